"""A Spark cluster on this machine, from the installed PySpark alone: a standalone master
and workers, or a Spark Connect server — for the tests and the scaling bench that hold
`abcast check --master spark://…` / `--remote sc://…` to the embedded verdict.

Rules: everything binds 127.0.0.1 on ports below the ephemeral range (or the kernel's
choice), writes its logs and work files under a directory the caller gives, and is
stopped (the whole process group, a JVM being a child of a script) when the context
exits, failure or not. Needs Java on PATH; the Connect server's jar ships with PySpark,
its Python client needs the packages `pyspark.sql.connect` checks for (the `spark`
extra pins them).
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from abcast.evaluation.peers import free_ports
from abcast.pipeline.session import LOOPBACK, spark_home

START_TIMEOUT_S: Final = 180.0


def environment(work: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.update(SPARK_HOME=str(spark_home()), SPARK_LOCAL_IP=LOOPBACK,
               PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable,
               SPARK_LOG_DIR=str(work / "logs"), SPARK_PID_DIR=str(work / "pids"),
               SPARK_WORKER_DIR=str(work / "work"), SPARK_NO_DAEMONIZE="1")
    return env


@dataclass(frozen=True, slots=True)
class Started:
    """A running cluster: its URL and its processes (the master's first)."""

    url: str
    processes: tuple[subprocess.Popen[bytes], ...]


def _wait_for_port(port: int, proc: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with code {proc.returncode}: "
                               f"{log.read_text(errors='replace')[-3000:]}")
        with socket.socket() as s:
            if s.connect_ex((LOOPBACK, port)) == 0:
                return
        time.sleep(0.2)
    raise RuntimeError(f"nothing listens on {port} after {START_TIMEOUT_S:g} s ({log})")


def _spawn(cmd: list[str], work: Path, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(cmd, env=environment(work), stdout=out,
                                stderr=subprocess.STDOUT, start_new_session=True)


def _stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for proc in reversed(procs):
        for sig, wait_s in ((signal.SIGTERM, 20.0), (signal.SIGKILL, 10.0)):
            if proc.poll() is not None:
                break
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(wait_s)


@contextlib.contextmanager
def standalone_cluster(work: Path, workers: int = 2, cores: int = 2,
                       memory: str = "2g") -> Iterator[Started]:
    """A master and `workers` workers; yields `spark://127.0.0.1:PORT`."""
    work.mkdir(parents=True, exist_ok=True)
    spark_class = str(spark_home() / "bin" / "spark-class")
    port, web, *worker_ports = free_ports(2 + workers)
    procs: list[subprocess.Popen[bytes]] = []
    try:
        log = work / "master.log"
        procs.append(_spawn([spark_class, "org.apache.spark.deploy.master.Master", "--host",
                             LOOPBACK, "--port", str(port), "--webui-port", str(web)],
                            work, log))
        _wait_for_port(port, procs[0], log)
        url = f"spark://{LOOPBACK}:{port}"
        for i, worker_port in enumerate(worker_ports):
            log = work / f"worker{i + 1}.log"
            procs.append(_spawn([
                spark_class, "org.apache.spark.deploy.worker.Worker", url, "--host", LOOPBACK,
                "--port", str(worker_port), "--webui-port", "0", "--cores", str(cores),
                "--memory", memory, "--work-dir", str(work / f"work{i + 1}")], work, log))
            _wait_for_port(worker_port, procs[-1], log)
        yield Started(url, tuple(procs))
    finally:
        _stop(procs)


@contextlib.contextmanager
def connect_server(work: Path, master: str = "local[2]",
                   driver_memory: str = "2g") -> Iterator[Started]:
    """A Spark Connect server running Spark on `master`; yields `sc://127.0.0.1:PORT`."""
    work.mkdir(parents=True, exist_ok=True)
    (port,) = free_ports(1)
    log = work / "connect.log"
    script = spark_home() / "sbin" / "start-connect-server.sh"
    procs = [_spawn(["bash", str(script), "--wait", "--master", master,
                     "--conf", f"spark.connect.grpc.binding.port={port}",
                     "--conf", f"spark.connect.grpc.binding.address={LOOPBACK}",
                     "--conf", "spark.ui.enabled=false", "--driver-memory", driver_memory],
                    work, log)]
    try:
        _wait_for_port(port, procs[0], log)
        yield Started(f"sc://{LOOPBACK}:{port}", tuple(procs))
    finally:
        _stop(procs)


def connect_client_missing() -> str | None:
    """Why this interpreter cannot be a Spark Connect client (None: it can)."""
    from pyspark.sql.connect import utils

    try:
        for require in (utils.require_minimum_grpc_version,
                        utils.require_minimum_grpcio_status_version,
                        utils.require_minimum_googleapis_common_protos_version,
                        utils.require_minimum_zstandard_version):
            require()
    except ImportError as exc:
        return str(exc)
    return None
