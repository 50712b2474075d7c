"""The bench's client/server section: the thesis's Case A / Case B experiments and the
reply-consolidation cost (the ROMIOP paper's figures 6–8), on real processes.

Rules: one registry (in this process) and one group of `abcast serve --echo` processes
(tcp, the sequencer ordering) that grows by joins — 2, 3, 4 … servers — so each group
size is measured in the same run, side by side. At each size:

- T_request: one client (this process) makes sequential requests, Case A
  (`path="direct"`) and Case B (`path="via-member"`, round robin), voting `first` (the
  client has an answer) and `all` (every replica answered); mean and p50 per cell;
- consolidation: sequential requests whose payload the servers echo, voting `first`,
  `all` and `percent(51)`, against payload size;
- the cells compared with each other are interleaved, one request of each in turn, so
  a burst of load from elsewhere hits them all alike;
- saturation (at `saturation_servers`): `clients` client processes
  (abcast.evaluation.rpc_load) keep `window` requests each in flight for `seconds`,
  through a member (round robin), through the sequencer, or direct; the CPU time every
  process used (user + system, from /proc) and the sequencer's share.

Figures are noisy on a shared machine: compare cells of one run, not runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Final

from abcast.registry.server import RegistryServer
from abcast.rpc.client import Client
from abcast.rpc.voting import Status

GROUP: Final = "bench-rpc"
ORDERING: Final = "sequencer"


@dataclass(frozen=True, slots=True)
class RpcSpec:
    t_request_nodes: tuple[int, ...] = (2, 4, 6)
    t_request_count: int = 300
    consolidation_nodes: tuple[int, ...] = (2, 3, 5)
    payloads: tuple[int, ...] = (10, 64, 1_024, 8_192, 65_536)
    consolidation_count: int = 100
    votes: tuple[str, ...] = ("first", "all", "percent(51)")
    saturation_servers: int = 4
    clients: int = 3
    window: int = 16
    seconds: float = 3.0
    #: how the clients reach the group: "via-member" (round robin), "via-sequencer" (Case
    #: B with the sequencer as every request's contact), "direct" (Case A)
    saturation_paths: tuple[str, ...] = ("via-member", "via-sequencer", "direct")


def quick_rpc_spec() -> RpcSpec:
    return RpcSpec(t_request_nodes=(2, 4), t_request_count=60, consolidation_nodes=(3,),
                   payloads=(64, 65_536), consolidation_count=30, seconds=1.5,
                   saturation_paths=("via-sequencer",))


@dataclass(frozen=True, slots=True)
class Timing:
    nodes: int
    path: str
    vote: str
    payload: int
    requests: int
    ok: int
    mean_us: float | None
    p50_us: float | None


@dataclass(frozen=True, slots=True)
class ProcessCpu:
    node: str
    role: str  # server | client
    cpu_s: float
    sequencer: bool = False


@dataclass(frozen=True, slots=True)
class SaturationRun:
    path: str
    servers: int
    clients: int
    seconds: float
    requests: int
    ok: int
    processes: tuple[ProcessCpu, ...]

    @property
    def rate(self) -> float:
        return self.requests / self.seconds

    @property
    def sequencer_share(self) -> float | None:
        total = sum(p.cpu_s for p in self.processes)
        seq = sum(p.cpu_s for p in self.processes if p.sequencer)
        return seq / total if total > 0 else None


@dataclass(slots=True)
class RpcBench:
    t_request: list[Timing] = field(default_factory=list)
    consolidation: list[Timing] = field(default_factory=list)
    saturation: list[SaturationRun] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def counts(self) -> tuple[int, int]:
        """(requests made, of which OK) over the whole section."""
        pairs = [(t.requests, t.ok) for t in (*self.t_request, *self.consolidation)]
        pairs += [(s.requests, s.ok) for s in self.saturation]
        return sum(p[0] for p in pairs), sum(p[1] for p in pairs)

    @property
    def failed(self) -> bool:
        """Some request of the section was not OK."""
        made, ok = self.counts
        return ok < made

    def ratio_b_over_a(self, nodes: int, vote: str = "first") -> float | None:
        """Case B's p50 T_request over Case A's, one group size, one vote (the median:
        on a shared machine the mean follows the other load's scheduling stalls)."""
        cells = {t.path: t.p50_us for t in self.t_request
                 if t.nodes == nodes and t.vote == vote}
        a, b = cells.get("direct"), cells.get("via-member")
        return b / a if a and b else None

    def to_json(self) -> dict[str, object]:
        return {
            "t_request": [asdict(t) for t in self.t_request],
            "consolidation": [asdict(t) for t in self.consolidation],
            "saturation": [{**asdict(s), "rate": s.rate, "sequencer_share": s.sequencer_share}
                           for s in self.saturation],
            "notes": list(self.notes),
        }


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a running process (Linux /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _env() -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[2])
    path = os.environ.get("PYTHONPATH")
    return {**os.environ, "PYTHONPATH": src if not path else f"{src}:{path}"}


class _Proc:
    """A child process speaking JSON or text lines on stdout."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.node = ""

    async def line(self, prefix: str, timeout_s: float = 60.0) -> str:
        assert self.proc.stdout is not None
        async with asyncio.timeout(timeout_s):
            while True:
                raw = await self.proc.stdout.readline()
                if not raw:
                    raise RuntimeError(f"process {self.node or '?'} exited "
                                       f"({await self.proc.wait()})")
                text = raw.decode()
                if text.startswith(prefix):
                    return text

    async def stop(self) -> None:
        if self.proc.returncode is None:
            self.proc.kill()
        await self.proc.wait()


async def _spawn(logs: Path | None, *args: str) -> _Proc:
    """A child process; its stderr goes to `logs`/rpc-processes.log (None: discarded)."""
    if logs is not None:
        logs.mkdir(parents=True, exist_ok=True)
        err: int | object = open(logs / "rpc-processes.log", "ab")  # noqa: SIM115
    else:
        err = asyncio.subprocess.DEVNULL
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, *args, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=err, env=_env())  # type: ignore[arg-type]
    finally:
        if hasattr(err, "close"):
            err.close()
    return _Proc(proc)


async def _add_server(registry: str, logs: Path | None) -> _Proc:
    server = await _spawn(logs, "-m", "abcast.cli", "serve", GROUP, "--echo", "--registry",
                          registry, "--ordering", ORDERING, "--timeout", "60")
    line = await server.line("serving ")
    server.node = line.split(" as ")[1].split(",")[0]
    return server


async def _until_members(client: Client, n: int) -> None:
    async with asyncio.timeout(60):
        while len(client.members) != n:
            await client.request(b"", vote="first", timeout=1.0)
            await asyncio.sleep(0.05)


Cell = tuple[str, str, int]  # path, vote, payload


async def _time(client: Client, nodes: int, cells: list[Cell], count: int) -> list[Timing]:
    """`count` sequential requests per cell, the cells interleaved (one request of each
    in turn), so every cell sees the same background load."""
    took: dict[Cell, list[float]] = {cell: [] for cell in cells}
    ok = dict.fromkeys(cells, 0)
    for k in range(max(3, count // 10) + count):  # the first ones warm up
        for cell in cells:
            path, vote, payload = cell
            start = time.perf_counter_ns()
            outcome = await client.request(b"x" * payload, vote=vote, timeout=5.0,
                                           path=path)
            if k >= max(3, count // 10):
                took[cell].append((time.perf_counter_ns() - start) / 1000)
                ok[cell] += outcome.status is Status.OK
    return [Timing(nodes, path, vote, payload, count, ok[(path, vote, payload)],
                   statistics.fmean(t) if t else None, statistics.median(t) if t else None)
            for (path, vote, payload), t in took.items()]


async def _saturate(registry: str, servers: list[_Proc], client: Client, spec: RpcSpec,
                    path: str, logs: Path | None) -> SaturationRun:
    loads = [await _spawn(logs, "-m", "abcast.evaluation.rpc_load", "--registry", registry,
                          "--group", GROUP, "--seconds", str(spec.seconds), "--window",
                          str(spec.window), "--path",
                          "direct" if path == "direct" else "via-member", "--contact",
                          "sequencer" if path == "via-sequencer" else "round-robin")
             for _ in range(spec.clients)]
    try:
        for load in loads:
            load.node = json.loads(await load.line('{"event": "ready"'))["node"]
        everyone = [*servers, *loads]
        before = {p.node: _cpu_s(p.proc.pid) for p in everyone}
        for load in loads:
            assert load.proc.stdin is not None
            load.proc.stdin.write(b"go\n")
        results = [json.loads(await load.line('{"event": "result"')) for load in loads]
        after = {p.node: _cpu_s(p.proc.pid) for p in everyone}
        sequencer = client.members[0]
        processes = tuple(
            ProcessCpu(p.node, "server" if p in servers else "client",
                       after[p.node] - before[p.node], p.node == sequencer)
            for p in everyone)
        return SaturationRun(path, len(servers), len(loads), spec.seconds,
                             sum(r["requests"] for r in results),
                             sum(r["ok"] for r in results), processes)
    finally:
        for load in loads:
            if load.proc.stdin is not None and load.proc.returncode is None:
                load.proc.stdin.write(b"exit\n")
        for load in loads:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(10):
                    await load.proc.wait()
            await load.stop()


async def run_rpc_bench(spec: RpcSpec, progress: object = None,
                        logs: Path | None = None) -> RpcBench:
    """Every cell of the section (see the module rules); the processes' stderr goes to
    `logs`/rpc-processes.log."""
    result = RpcBench()
    load_before = os.getloadavg()[0]
    sizes = sorted({*spec.t_request_nodes, *spec.consolidation_nodes,
                    spec.saturation_servers if spec.seconds > 0 else 0} - {0})
    servers: list[_Proc] = []
    async with RegistryServer() as registry:
        client: Client | None = None
        try:
            for n in sizes:
                while len(servers) < n:
                    servers.append(await _add_server(registry.url, logs))
                if client is None:
                    client = await Client.connect(GROUP, registry=registry.url)
                await _until_members(client, n)
                _say(progress, f"client/server: {n} servers")
                if n in spec.t_request_nodes:
                    result.t_request += await _time(client, n, [
                        (path, vote, 64) for vote in ("first", "all")
                        for path in ("direct", "via-member")], spec.t_request_count)
                if n in spec.consolidation_nodes:
                    for payload in spec.payloads:
                        result.consolidation += await _time(client, n, [
                            ("via-member", vote, payload) for vote in spec.votes],
                            spec.consolidation_count)
                if n == spec.saturation_servers and spec.seconds > 0:
                    for path in spec.saturation_paths:
                        result.saturation.append(
                            await _saturate(registry.url, servers, client, spec, path, logs))
        finally:
            if client is not None:
                await client.close()
            for server in servers:
                await server.stop()
    result.notes.append(f"load average (1 min) on this machine: {load_before:.1f} at the "
                        f"start, {os.getloadavg()[0]:.1f} at the end ({os.cpu_count()} CPUs)")
    return result


def _say(progress: object, text: str) -> None:
    step = getattr(progress, "step", None)
    if callable(step):
        step(text)
