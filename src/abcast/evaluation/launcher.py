"""The local cluster launcher behind `abcast cluster`: a registry, N nodes, one run.

Rules: for network transports it starts the registry and each node as OS processes
(`sys.executable -m abcast.cli registry|node …`) on 127.0.0.1 and drives them through
their pipes: nodes report `ready`, `done` and their `result` as JSON lines on stdout and
are told `go <start_ns>` (one wall-clock instant at which all start their workload)
and `stop` on stdin. For mem:// (an in-process hub) the registry and the
nodes are tasks of this process, driven through a `LocalBarrier`. Either way: all ready →
go → all done (every node delivered all M) → stop → gather results → read the trace the
nodes wrote, check it, commit its runs row. Nothing outlives the run: every child process
still alive at the end is killed, whatever happened. A node that fails or exits early,
or a run that exceeds its timeout, ends the run as incomplete (with the reason in
`errors`), never as a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Final

import msgspec

from abcast.checks import Violation, check_events
from abcast.cli_params import ordering_argv
from abcast.errors import ConfigError, LocalProtocolError
from abcast.evaluation.cluster import (
    ClusterConfig,
    ClusterResult,
    latencies_from_rows,
    merge_stamped_latencies,
)
from abcast.evaluation.floor import floor_command
from abcast.evaluation.worker import (
    Failed,
    Finished,
    LocalBarrier,
    LocalControl,
    Ready,
    Result,
    WorkerConfig,
    WorkerOutcome,
    decode_report,
    run_worker,
)
from abcast.ids import NodeId, node_sort_key
from abcast.ordering.registry import get_ordering
from abcast.registry.server import RegistryServer
from abcast.trace.rows import TraceFormatError
from abcast.trace.writer import EVENTS_DIR, add_run, clear_run, read_events

log: Final = logging.getLogger(__name__)

ABCAST: Final = (sys.executable, "-m", "abcast.cli")
START_TIMEOUT_S: Final = 60.0
WIND_DOWN_S: Final = 60.0
PIPE_LIMIT: Final = 64 * 1024 * 1024  # a result line carries every stamped latency
#: how far ahead of `go` the nodes' common start lies: time for every node to read it
GO_LEAD_NS: Final = 20_000_000


def wind_down_s(config: ClusterConfig) -> float:
    """How long the nodes get to stop and report after `stop`: WIND_DOWN_S, never more
    than the run's own --timeout (a failed run ends within about twice what was asked)."""
    return min(WIND_DOWN_S, config.timeout_s)


def start_instant_ns() -> int:
    """The wall-clock instant every node of a run starts its workload at."""
    return time.time_ns() + GO_LEAD_NS


class _AbortedError(Exception):
    pass


@dataclass(slots=True)
class ClusterHandle:
    """What an `on_go` hook sees: where things are, and the registry to kill in tests."""

    registry_url: str
    addresses: dict[NodeId, str]
    finished: set[NodeId]  # live: the nodes that reported done so far
    registry_process: asyncio.subprocess.Process | None = None
    registry_server: RegistryServer | None = None

    async def kill_registry(self) -> None:
        if self.registry_process is not None:
            with contextlib.suppress(ProcessLookupError):
                self.registry_process.kill()
            await self.registry_process.wait()
        elif self.registry_server is not None:
            await self.registry_server.close()
        else:
            raise LocalProtocolError("this run uses an external registry")


GoHook = Callable[[ClusterHandle], Awaitable[None]]


@dataclass(slots=True)
class _Tally:
    """Reports gathered from the nodes, and the events the launcher waits on."""

    expected: int
    ready: dict[NodeId, str] = field(default_factory=dict)
    finished: set[NodeId] = field(default_factory=set)
    outcomes: dict[NodeId, WorkerOutcome] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    all_ready: asyncio.Event = field(default_factory=asyncio.Event)
    all_done: asyncio.Event = field(default_factory=asyncio.Event)
    abort: asyncio.Event = field(default_factory=asyncio.Event)

    def fail(self, message: str) -> None:
        self.errors.append(message)
        self.abort.set()

    async def until(self, event: asyncio.Event) -> None:
        waits = [asyncio.ensure_future(event.wait()), asyncio.ensure_future(self.abort.wait())]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for w in waits:
                w.cancel()
        if not event.is_set():
            raise _AbortedError


async def run_cluster(config: ClusterConfig, *, on_go: GoHook | None = None) -> ClusterResult:
    """Run one cluster benchmark to the end and return its checked result."""
    config.validate()
    spec = get_ordering(config.ordering)
    run_id = config.new_run_id()
    if config.trace:
        clear_run(config.out, run_id)
    tally = _Tally(config.nodes)
    if config.in_process:
        await _run_in_process(config, run_id, tally, on_go)
    else:
        await _run_processes(config, run_id, tally, on_go)
    outcomes = [tally.outcomes[n] for n in sorted(tally.outcomes, key=node_sort_key)]
    result = ClusterResult(config, run_id, spec.claimed(config.options), outcomes, [], [],
                           errors=list(tally.errors))
    if not config.trace:
        result.latencies_ns = merge_stamped_latencies(outcomes)
        return result
    if not (config.out / EVENTS_DIR / run_id).is_dir():
        result.errors.append("no node wrote a trace row")
        return result
    log.info("run %s gathered; checking its trace", run_id)
    try:
        rows = read_events(config.out, run_id)
    except TraceFormatError as exc:
        result.errors.append(f"unreadable trace: {exc}")
        return result
    violations: list[Violation] = check_events(rows, spec.claimed(config.options), run_id)
    result.violations = violations
    result.latencies_ns = latencies_from_rows(rows)
    add_run(config.out, result.run_info())
    return result


async def _orchestrate(
    tally: _Tally, config: ClusterConfig, go: Callable[[], None],
    handle: Callable[[], ClusterHandle], on_go: GoHook | None,
) -> None:
    """ready → go → done, within the run's timeout; failures end up in tally.errors."""
    try:
        async with asyncio.timeout(config.timeout_s):
            await tally.until(tally.all_ready)
            log.info("all %d nodes ready: go", config.nodes)
            go()
            if on_go is not None:
                await on_go(handle())
            await tally.until(tally.all_done)
            log.info("all %d nodes done: stop", config.nodes)
    except TimeoutError:
        tally.errors.append(
            f"timed out after {config.timeout_s:g}s: {len(tally.ready)} nodes ready, "
            f"{len(tally.finished)} done of {config.nodes}")
    except _AbortedError:
        pass


# ------------------------------------------------------------------------ OS processes


def node_command(config: ClusterConfig, registry_url: str, run_id: str) -> list[str]:
    cmd = [
        *ABCAST, "node", "--registry", registry_url, "--group", config.group,
        "--ordering", config.ordering, "--transport", config.bind_url(),
        "--size", str(config.nodes), "--messages", str(config.messages),
        "--payload", str(config.payload), "--run-id", run_id, "--control", "pipe",
    ]
    if config.rate is not None:
        cmd += ["--rate", repr(config.rate)]
    if config.serial:
        cmd.append("--serial")
    cmd += ["--out", str(config.out)] if config.trace else ["--trace", "off"]
    if config.wan is not None:
        cmd += ["--wan", config.wan]
    cmd += ordering_argv(config.options)
    if config.metrics:
        cmd += ["--metrics-port", "0"]
    return cmd


async def _start_registry_process() -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(
        *ABCAST, "registry", "--listen", "tcp://127.0.0.1:0", "--json", "--stop-on-eof",
        "--recovery-grace", "0",
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    try:
        async with asyncio.timeout(START_TIMEOUT_S):
            line = await proc.stdout.readline()
        return proc, str(json.loads(line)["url"])
    except (TimeoutError, ValueError, KeyError) as exc:
        await _kill(proc)
        raise ConfigError(f"the registry process did not start: {exc!r}") from None


async def _read_reports(proc: asyncio.subprocess.Process, label: str, tally: _Tally) -> None:
    assert proc.stdout is not None
    got_result = False
    while line := await proc.stdout.readline():
        try:
            report = decode_report(line)
        except (msgspec.DecodeError, msgspec.ValidationError):
            log.warning("%s wrote a line that is not a report: %.200r", label, line)
            continue
        match report:
            case Ready(node, address):
                tally.ready[node] = address
                if len(tally.ready) >= tally.expected:
                    tally.all_ready.set()
            case Finished(node):
                tally.finished.add(node)
                if len(tally.finished) >= tally.expected:
                    tally.all_done.set()
            case Result(outcome):
                tally.outcomes[outcome.node] = outcome
                got_result = True
                log.info("%s (%s) reported its result", label, outcome.node)
            case Failed(error):
                tally.fail(f"{label}: {error}")
    if not got_result:
        code = await proc.wait()
        tally.fail(f"{label} exited with code {code} before reporting its result")


async def _run_processes(
    config: ClusterConfig, run_id: str, tally: _Tally, on_go: GoHook | None,
) -> None:
    registry_proc: asyncio.subprocess.Process | None = None
    procs: list[asyncio.subprocess.Process] = []
    readers: list[asyncio.Task[None]] = []
    try:
        if config.registry is None:
            registry_proc, registry_url = await _start_registry_process()
        else:
            registry_url = config.registry
        cmd = floor_command(registry_url, config.group, config.nodes, config.messages,
                            config.payload, run_id, config.rate, config.serial
                            ) if config.floor else node_command(config, registry_url, run_id)
        env = None if config.event_loop is None else {
            **os.environ, "ABCAST_LOOP": config.event_loop}
        for i in range(config.nodes):
            proc = await asyncio.create_subprocess_exec(
                *cmd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                limit=PIPE_LIMIT, env=env,
            )
            procs.append(proc)
            label = f"node process {i + 1} (pid {proc.pid})"
            readers.append(asyncio.create_task(_read_reports(proc, label, tally)))

        def go() -> None:
            line = f"go {start_instant_ns()}\n".encode()
            for proc in procs:
                _tell(proc, line)

        def handle() -> ClusterHandle:
            return ClusterHandle(registry_url, dict(tally.ready), tally.finished,
                                 registry_process=registry_proc)

        await _orchestrate(tally, config, go, handle, on_go)
        for proc in procs:
            _tell(proc, b"stop\n", close=True)
        if readers:
            _, pending = await asyncio.wait(readers, timeout=wind_down_s(config))
            if pending:
                tally.errors.append(f"{len(pending)} nodes did not report after stop")
    finally:
        for task in readers:
            task.cancel()
        for proc in procs:
            _tell(proc, b"stop\n", close=True)  # cancelled too: let them write their traces
        for proc in procs:
            await _kill(proc, grace_s=5.0)
        if registry_proc is not None:
            await _kill(registry_proc)


def _tell(proc: asyncio.subprocess.Process, line: bytes, *, close: bool = False) -> None:
    stdin = proc.stdin
    if stdin is None or stdin.is_closing():
        return
    with contextlib.suppress(ConnectionError, RuntimeError):
        stdin.write(line)
        if close:
            stdin.close()


async def _kill(proc: asyncio.subprocess.Process, grace_s: float = 0.0) -> None:
    """Wait up to `grace_s` for a clean exit, then kill; always reaps the process."""
    if proc.returncode is None and grace_s > 0:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(grace_s):
                await proc.wait()
    if proc.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            proc.kill()
        await proc.wait()


# ------------------------------------------------------------------------ one process (mem)


async def _run_in_process(
    config: ClusterConfig, run_id: str, tally: _Tally, on_go: GoHook | None,
) -> None:
    server: RegistryServer | None = None
    if config.registry is None:
        server = RegistryServer()
        registry_url = await server.start()
    else:
        registry_url = config.registry
    barrier = LocalBarrier(config.nodes)
    worker_config = WorkerConfig(
        group=config.group, ordering=config.ordering, transport=config.bind_url(),
        size=config.nodes, messages=config.messages, registry=registry_url, run_id=run_id,
        payload=config.payload, rate=config.rate, serial=config.serial,
        out=config.out if config.trace else None, options=config.options, wan=config.wan,
        metrics_port=0 if config.metrics else None,
    )

    async def one(i: int) -> None:
        try:
            outcome = await run_worker(worker_config, lambda _node: LocalControl(barrier))
        except Exception as exc:
            log.exception("node task %d failed", i + 1)
            tally.fail(f"node task {i + 1}: {type(exc).__name__}: {exc}")
            return
        tally.outcomes[outcome.node] = outcome

    async def mirror() -> None:
        # the barrier's events, seen through the tally the orchestration waits on
        await barrier.all_ready.wait()
        tally.ready.update(barrier.ready)
        tally.all_ready.set()
        await barrier.all_done.wait()
        tally.finished.update(barrier.finished)
        tally.all_done.set()

    tasks = [asyncio.create_task(one(i), name=f"node-{i + 1}") for i in range(config.nodes)]
    mirroring = asyncio.create_task(mirror())
    try:
        def go() -> None:
            barrier.start_ns = start_instant_ns()
            barrier.go.set()

        await _orchestrate(
            tally, config, go,
            lambda: ClusterHandle(registry_url, dict(barrier.ready), barrier.finished,
                                  registry_server=server),
            on_go,
        )
        barrier.stop.set()
        _, pending = await asyncio.wait(tasks, timeout=wind_down_s(config))
        if pending:
            tally.errors.append(f"{len(pending)} nodes did not stop")
    finally:
        barrier.stop.set()
        mirroring.cancel()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, mirroring, return_exceptions=True)
        if server is not None:
            await server.close()
