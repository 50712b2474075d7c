"""The Spark tests: marked `spark`; without pyspark they are not collected, without Java
they are skipped. Their `spark` fixture (one local[2] SparkSession per pytest process,
on one xdist worker) is in tests/conftest.py, where tests elsewhere reach it too.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if importlib.util.find_spec("pyspark") is None and collection_path.name.startswith(
            "test_spark"):
        return True
    return None
