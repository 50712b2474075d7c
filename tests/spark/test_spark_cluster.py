"""`abcast check` on a real Spark cluster, not only the embedded `local[*]`: a standalone
cluster (a master and two workers on 127.0.0.1, started here from the installed PySpark
and stopped afterwards) and a Spark Connect server (`start-connect-server.sh`, which
ships with PySpark) give the same JSON verdict as `local[2]` on the same trace directory:
one clean run and every planted violation of tests/spark/spark_traces.py.

Heavy (three JVMs, three `abcast check` processes; 6 min 28 s on 2026-11-26 on the
2-core machine shared with other work, load average ~3; an earlier note gave 45 min on a
more loaded one):
marked `cluster` and `heavy` — outside the default run, `ABCAST_HEAVY=1 ./run tests -m
heavy` runs it — with one cluster and one server for the whole module.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from spark_traces import build_scenarios, write_scenarios

from abcast.pipeline.local_cluster import (
    connect_client_missing,
    connect_server,
    standalone_cluster,
)

pytestmark = [pytest.mark.spark, pytest.mark.cluster, pytest.mark.heavy,
              pytest.mark.timeout(3000)]


@pytest.fixture(scope="module")
def java() -> None:
    if shutil.which("java") is None:
        pytest.skip("Spark needs Java on PATH")


@pytest.fixture(scope="module")
def standalone(java: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """spark://127.0.0.1:PORT of a master with two workers (2 cores, 2 GiB each)."""
    with standalone_cluster(tmp_path_factory.mktemp("standalone")) as cluster:
        yield cluster.url


@pytest.fixture(scope="module")
def connect(java: None, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """sc://127.0.0.1:PORT of a Spark Connect server (running Spark on local[2])."""
    missing = connect_client_missing()
    if missing is not None:
        pytest.skip(f"the Spark Connect client needs {missing}")
    with connect_server(tmp_path_factory.mktemp("connect")) as server:
        yield server.url


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_scenarios(tmp_path_factory.mktemp("traces"), build_scenarios())


def _check(trace_dir: Path, *where: str) -> tuple[int, dict[str, object]]:
    proc = subprocess.run(
        [sys.executable, "-m", "abcast.cli", "check", str(trace_dir), "--json", *where],
        capture_output=True, text=True, check=False, timeout=1500)
    assert proc.returncode in (0, 1), proc.stderr[-3000:]
    verdict: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return proc.returncode, verdict


@pytest.fixture(scope="module")
def embedded(traces: Path) -> tuple[int, dict[str, object]]:
    code, verdict = _check(traces, "--master", "local[2]")
    # The corpus holds clean runs and planted violations: the verdict has both.
    assert code == 1 and verdict["examples"]
    assert verdict["runs"] == len(build_scenarios())
    return code, verdict


def test_a_standalone_cluster_gives_the_embedded_verdict(
    traces: Path, standalone: str, embedded: tuple[int, dict[str, object]],
) -> None:
    assert _check(traces, "--master", standalone) == embedded


def test_a_spark_connect_server_gives_the_embedded_verdict(
    traces: Path, connect: str, embedded: tuple[int, dict[str, object]],
) -> None:
    assert _check(traces, "--remote", connect) == embedded
