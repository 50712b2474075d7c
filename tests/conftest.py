"""Suite-wide options: tests marked `heavy` stay outside the default run.

A `heavy` test is bench-sized (several JVMs, minutes of work on 2 cores): the default run
skips it with that reason, and `ABCAST_HEAVY=1 ./run tests -m heavy` runs it.
"""

from __future__ import annotations

import os

import pytest


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get("ABCAST_HEAVY") == "1":
        return
    skip = pytest.mark.skip(reason="heavy (bench-sized): run with ABCAST_HEAVY=1 "
                                   "./run tests -m heavy")
    for item in items:
        if "heavy" in item.keywords:
            item.add_marker(skip)
