"""Fixtures of the Spark tests: ONE local[2] SparkSession for the whole run (start-up costs
seconds; every test reuses it).

Tests here are marked `spark`; without pyspark they are not collected, without Java they
are skipped.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    if importlib.util.find_spec("pyspark") is None and collection_path.name.startswith(
            "test_spark"):
        return True
    return None


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java on PATH")
    from abcast.pipeline.session import build_session

    session = build_session("local[2]", app_name="abcast-tests", driver_memory="1g")
    # Tiny frames: two partitions per shuffle is plenty and keeps each query quick.
    session.conf.set("spark.sql.shuffle.partitions", "2")
    yield session
    session.stop()
