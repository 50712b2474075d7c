"""The soak (bench/soak.py, tests/evaluation/test_soak.py): a group of real member
processes (abcast.evaluation.soak_member) under steady load and churn for minutes of real
time, every process's RSS and open fds sampled every second.

Rules: a registry process and `nodes` members (the first creates the group, over tcp);
the clock starts once all are in. Two of the first members are anchors, never disturbed,
so their samples span the whole run. Every `kill_every_s` the oldest non-anchor member is
SIGKILLed (the group's creator, its first sequencer, is the first victim) and a new
member joins; every `churn_every_s`, half a period later, the oldest remaining non-anchor
leaves gracefully and a new one joins. At the end every member stops appending; the run
waits until all live members report the same log (digest, count) and the same view,
tells them to exit, and judges: the trace (killed members' unsealed streams included:
they end in their crash row) by abcast.checks for the ordering's claims plus virtual
synchrony, and each anchor's RSS and fd samples after `warmup_s` by a least-squares
slope. A runs row is committed, so
`abcast check <out>` judges the same trace with Spark.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from abcast.checks import Violation, check_events
from abcast.errors import ConfigError
from abcast.evaluation.launcher import _kill, _start_registry_process
from abcast.ordering.registry import get_ordering
from abcast.trace.rows import RunInfo
from abcast.trace.writer import add_run, clear_run, read_events

MEMBER: Final = (sys.executable, "-m", "abcast.evaluation.soak_member")
PAGE_KIB: Final = os.sysconf("SC_PAGE_SIZE") // 1024
#: growth over the judged window above this fraction of the mean is a trend
TREND_FRACTION: Final = 0.05


@dataclass(frozen=True, slots=True)
class SoakConfig:
    out: Path
    minutes: float = 10.0
    nodes: int = 5
    ordering: str = "sequencer"
    kill_every_s: float = 60.0
    churn_every_s: float = 60.0
    warmup_s: float = 60.0
    pause_s: float = 0.02  # between one member's appends
    #: every this many seconds, SIGSTOP a member for `cut_off_s` (past the failure
    #: detector's timeout: the group cuts it off), then SIGCONT it (None: never)
    pause_every_s: float | None = None
    cut_off_s: float = 3.0
    run_id: str = "soak"

    def validate(self) -> None:
        if self.nodes < 3:
            raise ConfigError(f"a soak needs >= 3 nodes (2 anchors, 1 to churn), got {self.nodes}")
        if self.minutes <= 0 or self.kill_every_s <= 0 or self.churn_every_s <= 0:
            raise ConfigError("minutes, kill_every_s and churn_every_s must be positive")


@dataclass(frozen=True, slots=True)
class Sample:
    t_s: float  # since the start
    label: str  # "registry" or the member's node id
    pid: int
    rss_kib: int
    fds: int


@dataclass(frozen=True, slots=True)
class Trend:
    label: str
    samples: int
    rss_slope_kib_per_min: float
    rss_mean_kib: float
    fd_slope_per_min: float
    window_s: float

    @property
    def growing(self) -> bool:
        growth = self.rss_slope_kib_per_min * self.window_s / 60.0
        return growth > TREND_FRACTION * self.rss_mean_kib


@dataclass(slots=True)
class SoakResult:
    config: SoakConfig
    samples: list[Sample] = field(default_factory=list)
    events: list[tuple[float, str]] = field(default_factory=list)  # (t_s, what happened)
    reports: list[dict[str, Any]] = field(default_factory=list)  # the live members' last
    deliveries: dict[str, int] = field(default_factory=dict)  # node -> deliver rows
    violations: list[Violation] = field(default_factory=list)
    trends: list[Trend] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    duration_s: float = 0.0

    @property
    def states_equal(self) -> bool:
        keys = {(r["digest"], r["count"], tuple(r["members"])) for r in self.reports}
        return len(keys) == 1 and len(self.reports) == self.config.nodes

    @property
    def clean(self) -> bool:
        return (not self.errors and not self.violations and self.states_equal
                and not any(t.growing for t in self.trends))


def process_sample(pid: int) -> tuple[int, int] | None:
    """(RSS in KiB, open fds) of a live process; None once it is gone."""
    try:
        with open(f"/proc/{pid}/statm") as f:
            rss_pages = int(f.read().split()[1])
        fds = len(os.listdir(f"/proc/{pid}/fd"))
    except (OSError, ValueError, IndexError):
        return None
    if rss_pages == 0:
        return None  # a zombie: killed, not yet reaped
    return rss_pages * PAGE_KIB, fds


def slope_per_min(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (t_s, value) points, per minute (0 for fewer than 2)."""
    n = len(points)
    if n < 2:
        return 0.0
    mean_t = sum(t for t, _ in points) / n
    mean_v = sum(v for _, v in points) / n
    var = sum((t - mean_t) ** 2 for t, _ in points)
    if var == 0:
        return 0.0
    return 60.0 * sum((t - mean_t) * (v - mean_v) for t, v in points) / var


@dataclass(slots=True)
class _Step:
    due: float
    period: float
    action: Callable[[], Awaitable[None]]


class _Member:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.node = ""
        self.lines: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            with contextlib.suppress(ValueError):
                self.lines.put_nowait(json.loads(line))
        self.lines.put_nowait({"event": "eof"})

    async def expect(self, event: str, timeout_s: float = 60.0) -> dict[str, Any]:
        async with asyncio.timeout(timeout_s):
            while True:
                message = await self.lines.get()
                if message.get("event") == event:
                    return message
                if message.get("event") == "eof":
                    raise ConfigError(f"member {self.node or '?'} exited "
                                      f"(code {await self.proc.wait()})")

    def tell(self, command: str) -> None:
        stdin = self.proc.stdin
        if stdin is not None and not stdin.is_closing():
            with contextlib.suppress(ConnectionError, RuntimeError):
                stdin.write(command.encode() + b"\n")

    async def close(self) -> None:
        await _kill(self.proc, grace_s=0.0)
        self._reader.cancel()


class _Soak:
    def __init__(self, config: SoakConfig, registry: str, result: SoakResult) -> None:
        self.config = config
        self.registry = registry
        self.result = result
        self.members: list[_Member] = []  # live, oldest first
        self.gone: list[_Member] = []
        self.anchors: set[str] = set()
        self.labels: dict[int, str] = {}  # pid -> label, for sampling
        self.t0 = time.monotonic()

    def now(self) -> float:
        return time.monotonic() - self.t0

    def restart_clock(self) -> None:
        """t = 0 from now on; what was noted before gets negative times."""
        offset = self.now()
        self.t0 += offset
        self.result.events = [(round(t - offset, 1), w) for t, w in self.result.events]

    def note(self, what: str) -> None:
        self.result.events.append((round(self.now(), 1), what))

    async def spawn(self, create: bool = False) -> _Member:
        c = self.config
        cmd = [*MEMBER, "--registry", self.registry, "--out", str(c.out), "--run-id",
               c.run_id, "--ordering", c.ordering, "--pause", repr(c.pause_s)]
        if create:
            cmd.append("--create")
        with open(c.out / "members.log", "ab") as log:
            proc = await asyncio.create_subprocess_exec(
                *cmd, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=log)
        member = _Member(proc)
        self.members.append(member)
        member.node = (await member.expect("ready"))["node"]
        self.labels[proc.pid] = member.node
        self.note(f"{member.node} joined")
        return member

    def victim(self) -> _Member:
        return next(m for m in self.members if m.node not in self.anchors)

    async def kill_one(self) -> None:
        member = self.victim()
        member.proc.send_signal(signal.SIGKILL)
        await member.proc.wait()
        self.members.remove(member)
        self.gone.append(member)
        self.note(f"{member.node} SIGKILLed")
        await self.spawn()

    async def leave_one(self) -> None:
        member = self.victim()
        member.tell("leave")
        left = await member.expect("left")
        member.tell("exit")
        async with asyncio.timeout(30):
            await member.proc.wait()
        self.members.remove(member)
        self.gone.append(member)
        self.note(f"{member.node} left ({'graceful' if left['graceful'] else 'removed'})")
        await self.spawn()

    async def pause_one(self) -> None:
        """Cut a member off (SIGSTOP past the detector's timeout), let it come back
        (SIGCONT), and wait until it is in the group's view again, or removed: then it
        exits and a new member joins."""
        member = self.victim()
        member.tell("report")
        before = (await member.expect("report"))["view_id"]
        member.proc.send_signal(signal.SIGSTOP)
        self.note(f"{member.node} paused")
        await asyncio.sleep(self.config.cut_off_s)
        member.proc.send_signal(signal.SIGCONT)
        self.note(f"{member.node} resumed")
        async with asyncio.timeout(60):
            while True:
                member.tell("report")
                report = await member.expect("report")
                others = {m.node for m in self.members}
                if (report["active"] and report["view_id"] > before
                        and set(report["members"]) == others):
                    self.note(f"{member.node} back in the group")
                    return
                if not report["active"]:
                    self.note(f"{member.node} was removed")
                    member.tell("exit")
                    async with asyncio.timeout(30):
                        await member.proc.wait()
                    self.members.remove(member)
                    self.gone.append(member)
                    await self.spawn()
                    return
                await asyncio.sleep(0.5)

    async def sample_forever(self, registry_pid: int | None) -> None:
        while True:
            t = self.now()
            pids = dict(self.labels)
            if registry_pid is not None:
                pids[registry_pid] = "registry"
            live = {m.proc.pid for m in self.members}
            for pid, label in pids.items():
                if label != "registry" and pid not in live:
                    continue
                got = process_sample(pid)
                if got is not None:
                    self.result.samples.append(Sample(round(t, 2), label, pid, *got))
            await asyncio.sleep(max(0.0, 1.0 - (self.now() - t)))

    async def finish(self) -> None:
        """Stop the load, wait for one state everywhere, let every member exit."""
        self.result.duration_s = self.now()
        await self.converge()
        for m in self.members:
            m.tell("exit")
        for m in self.members:
            async with asyncio.timeout(60):
                await m.proc.wait()

    async def close(self, registry: asyncio.subprocess.Process) -> None:
        """Nothing outlives the run: every member (and the registry) still there is
        killed and reaped."""
        for m in [*self.members, *self.gone]:
            await m.close()
        await _kill(registry, grace_s=0.0)

    async def converge(self, timeout_s: float = 90.0) -> None:
        for m in self.members:
            m.tell("stop")
        async with asyncio.timeout(timeout_s):
            while True:
                for m in self.members:
                    m.tell("report")
                reports = [await m.expect("report") for m in self.members]
                self.result.reports = reports
                if self.result.states_equal:
                    return
                await asyncio.sleep(0.5)


async def run_soak(config: SoakConfig) -> SoakResult:
    """Run the soak to the end; everything it saw is in the result (never raises for
    what the group did: errors go to `result.errors`)."""
    config.validate()
    config.out.mkdir(parents=True, exist_ok=True)
    clear_run(config.out, config.run_id)
    result = SoakResult(config)
    registry_proc, registry_url = await _start_registry_process()
    soak = _Soak(config, registry_url, result)
    sampler: asyncio.Task[None] | None = None
    started_ns = time.time_ns()
    try:
        await soak.spawn(create=True)
        for _ in range(config.nodes - 1):
            await soak.spawn()
        soak.anchors = {m.node for m in soak.members[1:3]}
        soak.restart_clock()  # the run's minutes count from the full group
        sampler = asyncio.create_task(soak.sample_forever(registry_proc.pid))
        end = config.minutes * 60.0
        # (due at, period, action): a kill at the end of each period, a leave half a
        # period earlier, a pause (when asked for) a quarter of a period in
        plan = [_Step(config.kill_every_s, config.kill_every_s, soak.kill_one),
                _Step(config.kill_every_s / 2, config.churn_every_s, soak.leave_one)]
        if config.pause_every_s is not None:
            plan.append(_Step(config.kill_every_s / 4, config.pause_every_s, soak.pause_one))
        while (t := soak.now()) < end:
            step = min(plan, key=lambda p: p.due)
            await asyncio.sleep(max(0.0, min(step.due, end) - t))
            if soak.now() >= end:
                break
            await step.action()
            step.due += step.period
        sampler.cancel()
        await soak.finish()
    except (TimeoutError, ConfigError) as exc:
        result.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        if sampler is not None:
            sampler.cancel()
        await soak.close(registry_proc)
    _judge(config, result, soak.anchors, started_ns)
    return result


#: what `heap_slopes` follows in a member's heap samples (soak_member.heap_sample), KiB
HEAP_FIELDS: Final[dict[str, Callable[[dict[str, Any]], float]]] = {
    "rss": lambda r: r["rss_kib"], "anonymous": lambda r: r.get("anon_kib", 0),
    "glibc in use": lambda r: r["glibc"].get("in_use", 0) / 1024,
    "glibc free": lambda r: r["glibc"].get("free", 0) / 1024,
    "pymalloc arenas": lambda r: r["pymalloc_arenas"] * 1024,
    "arrow pool": lambda r: (r["arrow"] or {}).get("allocated", 0) / 1024,
}


def heap_slopes(path: Path, warmup_s: float) -> dict[str, tuple[float, float, float]]:
    """From one member's heap samples (ABCAST_SOAK_HEAP), after `warmup_s` of its own
    life: each HEAP_FIELDS quantity as (first, last, slope per minute), KiB; and the
    mapping of /proc/self/smaps that grew most (keyed "mapping <start>")."""
    rows = [json.loads(line) for line in path.read_text().splitlines() if line]
    rows = [r for r in rows if r["t_s"] >= warmup_s]
    if len(rows) < 2:
        return {}
    out = {name: (get(rows[0]), get(rows[-1]), slope_per_min([(r["t_s"], get(r)) for r in rows]))
           for name, get in HEAP_FIELDS.items()}

    def by_start(r: dict[str, Any]) -> dict[str, int]:
        return {k.split("-")[0]: v for k, v in r.get("mappings", {}).items()}

    first, last = by_start(rows[0]), by_start(rows[-1])
    grown = max(last, key=lambda k: last[k] - first.get(k, 0), default=None)
    if grown is not None:
        out[f"mapping {grown}"] = (first.get(grown, 0), last[grown],
                                   60.0 * (last[grown] - first.get(grown, 0))
                                   / (rows[-1]["t_s"] - rows[0]["t_s"]))
    return out


@dataclass(frozen=True, slots=True)
class KillRun:
    """What `kill_under_load` saw."""

    victim: str
    appended_before: int  # appends the victim had completed `margin_s` before its kill
    kill_ns: int
    result: SoakResult


async def kill_under_load(out: Path, *, nodes: int = 3, load_s: float = 2.0,
                          margin_s: float = 1.5, ordering: str = "sequencer") -> KillRun:
    """`nodes` members under load; the group's creator (its first sequencer) reports how
    many appends it completed, keeps appending for `margin_s`, and is SIGKILLed; a joiner
    replaces it; the run converges and is judged as the soak judges (no RSS trends)."""
    config = SoakConfig(out=out, nodes=nodes, ordering=ordering, run_id="killed",
                        warmup_s=0.0)
    config.validate()
    out.mkdir(parents=True, exist_ok=True)
    clear_run(out, config.run_id)
    result = SoakResult(config)
    registry_proc, registry_url = await _start_registry_process()
    soak = _Soak(config, registry_url, result)
    started_ns = time.time_ns()
    victim, appended, kill_ns = "", 0, 0
    try:
        await soak.spawn(create=True)
        for _ in range(nodes - 1):
            await soak.spawn()
        soak.anchors = {m.node for m in soak.members[1:]}
        await asyncio.sleep(load_s)
        target = soak.members[0]
        victim = target.node
        target.tell("report")
        appended = int((await target.expect("report"))["appended"])
        await asyncio.sleep(margin_s)
        kill_ns = time.time_ns()
        await soak.kill_one()
        await asyncio.sleep(load_s)
        await soak.finish()
    except (TimeoutError, ConfigError) as exc:
        result.errors.append(f"{type(exc).__name__}: {exc}")
    finally:
        await soak.close(registry_proc)
    _judge(config, result, set(), started_ns)
    return KillRun(victim, appended, kill_ns, result)


def _judge(config: SoakConfig, result: SoakResult, anchors: set[str], started_ns: int) -> None:
    spec = get_ordering(config.ordering)
    claims = (*spec.guarantees, "virtual_synchrony")
    try:
        rows = read_events(config.out, config.run_id)
    except ConfigError as exc:
        result.errors.append(f"unreadable trace: {exc}")
        return
    for row in rows:
        if row.kind == "deliver":
            result.deliveries[row.node] = result.deliveries.get(row.node, 0) + 1
    result.violations = check_events(rows, claims, config.run_id)
    add_run(config.out, RunInfo(
        run_id=config.run_id, ordering=config.ordering, transport="tcp", nodes=config.nodes,
        payload_bytes=0, workload="soak", seed=None, faults="kill,leave,join",
        guarantees=claims, started_ns=started_ns,
        duration_ns=int(result.duration_s * 1e9)))
    for label in [*sorted(anchors), "registry"]:
        mine = [s for s in result.samples if s.label == label and s.t_s >= config.warmup_s]
        if not mine:
            continue
        result.trends.append(Trend(
            label, len(mine),
            slope_per_min([(s.t_s, float(s.rss_kib)) for s in mine]),
            sum(s.rss_kib for s in mine) / len(mine),
            slope_per_min([(s.t_s, float(s.fds)) for s in mine]),
            mine[-1].t_s - mine[0].t_s))
