"""Suite-wide options, the one SparkSession, and how xdist hands the tests out.

Tests marked `heavy` stay outside the default run: a `heavy` test is bench-sized (several
JVMs, minutes of work on 2 cores), the default run skips it with that reason, and
`ABCAST_HEAVY=1 ./run tests -m heavy` runs it.

`spark` is ONE local[2] SparkSession per pytest process: a JVM's start and warm-up cost
tens of CPU-seconds, and every test reuses it. Under `./run tests` (`-n 2 --dist
loadgroup`) the modules that use it run on one worker, one after the other, so the run
starts one JVM, not one per worker; a module with a module-scoped fixture stays on one
worker the same way (built once, not once per worker its tests land on). Every other
test is handed out one at a time, the biggest group first. The scheduler below does the
grouping by module path (the controller sees node ids only), and collection refuses a
module that uses `spark` or a module-scoped fixture outside the listed ones, so a new
one cannot silently start a second JVM. (xdist's own loadgroup reads `xdist_group` marks
through node ids, which pytest 9.2 no longer lets it rewrite: pytest-xdist#1386.)
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator

import pytest

SPARK_GROUP = "spark"
#: the modules on the Spark worker besides tests/spark/
SPARK_MODULES = frozenset({"tests/evaluation/test_evaluation_end_to_end.py"})
#: modules with a module-scoped fixture (outside the Spark group): each on one worker
MODULE_GROUPS = frozenset({"tests/sim/test_state_bounded.py"})

# The Spark JVMs the suite starts (the `spark` fixture's, and `abcast check`/`report` run
# as commands by tests/docs/) run dozens of small jobs on tiny frames and end: the
# optimising JIT compiler's work never pays back there. Without it a fresh
# `abcast check` of a 600-row trace took 25 CPU-seconds instead of 44. Set before any
# JVM starts; a value in the environment wins.
os.environ.setdefault("ABCAST_SPARK_JAVA_OPTIONS", "-XX:TieredStopAtLevel=1")


def scope_of(nodeid: str) -> str:
    """The unit of work a test belongs to under `--dist loadgroup`."""
    path = nodeid.split("::", 1)[0]
    if path.startswith("tests/spark/") or path in SPARK_MODULES:
        return SPARK_GROUP
    if path in MODULE_GROUPS:
        return path
    return nodeid


def pytest_configure(config: pytest.Config) -> None:
    if config.pluginmanager.hasplugin("xdist") and not hasattr(config, "workerinput"):
        config.pluginmanager.register(_Scheduler(), "abcast-scheduler")


class _Scheduler:
    @pytest.hookimpl(tryfirst=True)
    def pytest_xdist_make_scheduler(self, config: pytest.Config, log: object) -> object:
        if config.getvalue("dist") != "loadgroup":
            return None
        from xdist.scheduler import LoadScopeScheduling

        class SharedFixtureScheduling(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                return scope_of(nodeid)

        return SharedFixtureScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    _check_groups(items)
    if os.environ.get("ABCAST_HEAVY") == "1":
        return
    skip = pytest.mark.skip(reason="heavy (bench-sized): run with ABCAST_HEAVY=1 "
                                   "./run tests -m heavy")
    for item in items:
        if "heavy" in item.keywords:
            item.add_marker(skip)


def _module_scoped(item: pytest.Item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return False
    return any(defs[-1].scope in ("module", "package")
               for defs in info.name2fixturedefs.values() if defs)


def _check_groups(items: list[pytest.Item]) -> None:
    for item in items:
        path = item.nodeid.split("::", 1)[0]
        if "spark" in item.fixturenames and scope_of(item.nodeid) != SPARK_GROUP:
            raise pytest.UsageError(f"{path} uses the spark fixture: add it to SPARK_MODULES "
                                    "in tests/conftest.py (one JVM per run)")
        if _module_scoped(item) and scope_of(item.nodeid) == item.nodeid:
            raise pytest.UsageError(f"{path} has a module-scoped fixture: add it to "
                                    "MODULE_GROUPS in tests/conftest.py (built once)")


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
