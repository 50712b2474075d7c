"""Sweep: dynamic groups under churn — a join, a leave, a crash and a partition that heals,
at random times, under drop/dup/delay — many seeds per ordering.

Rules: one task = one seeded `run_simulation` over 6–8 nodes (drawn from the seed, or
fixed by --nodes) whose fault schedule is drawn from the seed too
(abcast.sim.churn.churn_faults), so a failing run is replayed from its printed faults. The
stack is the registry's (`build_stack`: the membership layer — abcast.membership — around
the ordering, over an open detector and channel; chandra-toueg decides its views by
consensus); a run the
registry refuses counts as refused. --safe and --relay apply to the orderings that offer
them. A
run is clean when: the trace checks find nothing among the members present for the
whole run; every such member delivered every message one of them broadcast; the view
sequences are consistent, virtual synchrony and same-view delivery hold
(abcast.sim.churn.membership_problems); and the nodes running at the end hold equal
states. Prints a Markdown table; exit 1 on any unclean run. A benchmark, not a test: it
never compares times against a limit.

    .venv/bin/python bench/sweep_churn.py --seeds 300 --orderings sequencer,causal-total
    .venv/bin/python bench/sweep_churn.py --seeds 300 --orderings unordered,fifo,causal,skeen
    .venv/bin/python bench/sweep_churn.py --seeds 300 --orderings matrix
    .venv/bin/python bench/sweep_churn.py --seeds 20 --nodes 6 --safe
    .venv/bin/python bench/sweep_churn.py --seeds 30 --messages 400 --cut-sequencer \
        --partition-ms 3000-6000
    .venv/bin/python bench/sweep_churn.py --seeds 60 --messages 400 --flapping --safe
    .venv/bin/python bench/sweep_churn.py --seeds 300 --orderings sequencer,causal-total --evs
    .venv/bin/python bench/sweep_churn.py --seeds 300 --orderings sequencer,causal-total --relay
    .venv/bin/python bench/sweep_churn.py --seeds 120 --orderings skeen,matrix,sequencer --nak
    .venv/bin/python bench/sweep_churn.py --seeds 100 --stream-channel

With --spark-sample K the first K seeds of each ordering also write their traces, and
the Spark checker (`abcast check --json`, abcast.pipeline) checks them after the sweep:
its violations per code must equal the in-memory checker's over the same whole traces
(the "claimed checks, whole trace" column), else the sweep fails:

    .venv/bin/python bench/sweep_churn.py --seeds 300 --orderings matrix --spark-sample 10

With --evs (partitions="evs", abcast.membership.merge) both sides of the
partition go on and merge on heal. The workload is then open-loop (--rate, default 40
broadcasts/s: the closed round-robin would wait for the other side's messages, which a
merged member gets as state, never as deliveries), a run ends once idle for --stall-s, and
the checks are abcast.sim.churn's under evs: the claims over the whole trace, agreement,
FIFO and causal order per lineage (epoch between merges, side), the merge views, equal
states after the merge; complete = every lineage's judged members delivered every
message one of them broadcast in it.

With --native-lane (and --stream-channel: the only channel shape whose frames the lane
takes) each seed runs twice, through the Python path and with the native lane
(`SimConfig.native_lane`: abcast.runtime.lane, the C extension abcast._lane, built by
bench/build_native.py in a checkout), and the two must write the same trace, row for row,
and end alike (`abcast.sim.harness.first_difference`; with net_trace on, so every
protocol packet sent and received is a row); a run that does not is unclean,
and a line names its first differing row (a lane bug: replay the printed config with and
without native_lane). The lane's run is the one judged; the sweep ends with the lane's
counts over all runs (frames and broadcasts it took, what it declined):

    .venv/bin/python bench/sweep_churn.py --seeds 40 --stream-channel --native-lane
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import multiprocessing
import random
import shutil
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from abcast.checks import check_events, count_by_code
from abcast.errors import ConfigError
from abcast.ordering.registry import OrderingOptions, get_ordering
from abcast.sim import SimConfig, run_simulation
from abcast.sim.churn import (
    STREAM_SHAPE,
    churn_faults,
    flapping_faults,
    judge,
    lineages,
    merge_views,
    present_throughout,
)
from abcast.sim.harness import first_difference
from abcast.trace.rows import EventRow
from abcast.trace.writer import write_run

ORDERINGS = ("sequencer", "causal-total", "chandra-toueg", "unordered", "fifo", "causal",
             "skeen", "matrix")


@dataclass(frozen=True, slots=True)
class Task:
    ordering: str
    seed: int
    nodes: int
    messages: int
    safe: bool
    partition_ms: tuple[int, int] = (1_500, 3_000)
    cut_leader: bool = False
    clean_split: bool = False
    flapping: bool = False
    evs: bool = False
    rate: float = 40.0  # broadcasts per second, under evs
    stall_us: int = 8_000_000  # an evs run ends once idle this long
    relay: bool = False  # sequencer family: the origin sends to the sequencer only
    #: write this run's trace here too, for the Spark checker ("": not sampled)
    trace_dir: str = ""
    nak: bool = False  # the NAK channel over IP multicast (multicast="nak")
    #: the runtime's stream channel shape: acks carried, one tick for all links
    stream_channel: bool = False
    #: an evs run is over once nothing was delivered for this long after the last fault
    settle_us: int = 5_000_000
    #: run it with the native lane too, and compare the two runs' traces
    native_lane: bool = False

    def options(self) -> OrderingOptions:
        options = OrderingOptions(safe=self.safe, partitions="evs" if self.evs else "primary",
                                  relay=self.relay, multicast="nak" if self.nak else None)
        if self.stream_channel:
            options = dataclasses.replace(options, channel=STREAM_SHAPE)
        return options

    def config(self) -> SimConfig:
        # --native-lane: every protocol packet a row too, so the traces compare packet
        # by packet
        if not self.evs:
            return SimConfig(self.ordering, nodes=self.nodes, messages=self.messages,
                             seed=self.seed, faults=self.faults(), options=self.options(),
                             ip_multicast=self.nak, net_trace=self.native_lane)
        return SimConfig(self.ordering, nodes=self.nodes, messages=self.messages,
                         seed=self.seed, faults=self.faults(), options=self.options(),
                         rate=self.rate, stall_us=self.stall_us, settle_us=self.settle_us,
                         ip_multicast=self.nak, net_trace=self.native_lane)

    def faults(self) -> str:
        if self.flapping:
            return flapping_faults(random.Random(self.seed), self.nodes)
        return churn_faults(random.Random(self.seed), self.nodes,
                            partition_ms=self.partition_ms, cut_leader=self.cut_leader,
                            clean_split=self.clean_split)

    def command(self) -> str:
        extra = ""
        if self.safe or self.evs or self.relay or self.nak or self.stream_channel:
            extra = f", options={self.options()!r}"
        if self.nak:
            extra += ", ip_multicast=True"
        if self.evs:
            extra += f", rate={self.rate}, stall_us={self.stall_us}, settle_us={self.settle_us}"
        if self.native_lane:
            extra += ", net_trace=True, native_lane=True"
        return (f"SimConfig({self.ordering!r}, nodes={self.nodes}, messages={self.messages}, "
                f"seed={self.seed}, faults={self.faults()!r}{extra})")


@dataclass(frozen=True, slots=True)
class Outcome:
    task: Task
    violations: dict[str, int]
    problems: dict[str, int]
    complete: bool
    refused: str = ""
    views: int = 0
    rejoins: int = 0
    merges: int = 0
    #: abcast.checks' view checks over the whole trace (every node, crashed ones up to
    #: their crash): informational, the cut-off incarnations included
    view_checks: dict[str, int] = field(default_factory=dict)
    #: the claimed guarantees over the whole trace, as `abcast sim` reports them:
    #: informational (a non-SAFE sequencer cut off in a minority delivers there)
    claimed_checks: dict[str, int] = field(default_factory=dict)
    wall_s: float = 0.0
    #: --native-lane: where the lane's run first departed from the Python run ("": not)
    diverged: str = ""
    #: --native-lane: abcast._lane.counts() over the lane's run
    lane_counts: dict[str, int] = field(default_factory=dict)

    @property
    def clean(self) -> bool:
        return (not self.refused and not self.violations and not self.problems
                and self.complete and not self.diverged)


def run_one(task: Task) -> Outcome:
    start = time.perf_counter()
    config = task.config()
    diverged, lane_counts = "", {}
    try:
        result = run_simulation(config)
        if task.native_lane:
            from abcast import _lane

            python = result
            _lane.reset_counts()
            result = run_simulation(dataclasses.replace(config, native_lane=True))
            lane_counts = _lane.counts()
            diverged = first_difference(python, result) or ""
    except ConfigError as exc:
        return Outcome(task, {}, {}, False, refused=str(exc))
    violations, problems = judge(result)
    rows = result.recorder.rows()
    if task.trace_dir:
        write_run(task.trace_dir, rows, result.run_info())
    if task.evs:
        gone = (*result.departed, *result.leaving)
        complete = all(_complete(lin.rows, lin.members)
                       for lin in lineages(rows, config.node_ids(), gone))
    else:
        present = present_throughout(rows, config.node_ids())
        complete = result.quiescent and _complete(rows, present)
    views = len({r.view_id for r in rows if r.kind == "view"})
    rejoins = sum(1 for r in rows if r.kind == "recover")
    view_checks = count_by_code(check_events(rows, ("virtual_synchrony",), result.run_id))
    return Outcome(task, count_by_code(violations), dict(Counter(p.code for p in problems)),
                   complete, views=views, rejoins=rejoins, merges=len(merge_views(rows)),
                   view_checks=view_checks,
                   claimed_checks=result.counts, wall_s=time.perf_counter() - start,
                   diverged=diverged, lane_counts=lane_counts)


def _complete(rows: list[EventRow], members: set[str]) -> bool:
    """Every member delivered every message one of them broadcast (in these rows)."""
    sent = {(r.origin, r.seq) for r in rows if r.kind == "send" and r.node in members}
    return all(sent <= {(r.origin, r.seq) for r in rows if r.kind == "deliver" and r.node == n}
               for n in members)


def table(outcomes: list[Outcome], orderings: list[str]) -> list[str]:
    lines = ["| ordering | mode | seeds | clean | refused | violations (present throughout) "
             "| membership problems | incomplete | mean views | rejoins | merges "
             "| view checks, whole trace | claimed checks, whole trace | wall time (s) |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for ordering in orderings:
        for safe, evs in sorted({(o.task.safe, o.task.evs) for o in outcomes}):
            mine = [o for o in outcomes if o.task.ordering == ordering
                    and (o.task.safe, o.task.evs) == (safe, evs)]
            if not mine:
                continue
            viol: Counter[str] = Counter()
            probs: Counter[str] = Counter()
            whole: Counter[str] = Counter()
            claimed: Counter[str] = Counter()
            for o in mine:
                viol.update(o.violations)
                probs.update(o.problems)
                whole.update(o.view_checks)
                claimed.update(o.claimed_checks)
            ran = [o for o in mine if not o.refused]
            lines.append(
                f"| {ordering} | {'evs' if evs else 'safe' if safe else 'plain'} | {len(mine)} "
                f"| {sum(o.clean for o in mine)} | {sum(bool(o.refused) for o in mine)} "
                f"| {dict(viol) or 0} | {dict(probs) or 0} "
                f"| {sum(not o.complete for o in ran)} "
                f"| {sum(o.views for o in ran) / max(len(ran), 1):.1f} "
                f"| {sum(o.rejoins for o in ran)} | {sum(o.merges for o in ran)} "
                f"| {dict(whole) or 0} "
                f"| {dict(claimed) or 0} | {sum(o.wall_s for o in mine):.0f} |")
    return lines


def lane_line(outcomes: list[Outcome]) -> str:
    """--native-lane: what the lane did over all runs, and how many runs diverged."""
    total: Counter[str] = Counter()
    for o in outcomes:
        total.update(o.lane_counts)
    ran = [o for o in outcomes if not o.refused]
    diverged = sum(bool(o.diverged) for o in ran)
    return (f"Native lane over {len(ran)} runs: took {total['frames']} frames and "
            f"{total['broadcasts']} broadcasts, declined {total['declined']}; "
            f"{diverged} runs diverged from the Python path.")


def spark_check(trace_dir: str, sampled: list[Outcome]) -> tuple[bool, str]:
    """The Spark checker over the sampled traces, against the in-memory counts of the
    same runs: (they agree, a line to print)."""
    abcast = str(Path(sys.executable).with_name("abcast"))
    done = subprocess.run([abcast, "check", trace_dir, "--json"], capture_output=True,
                          text=True, check=False)
    if done.returncode not in (0, 1) or not done.stdout.strip():
        return False, f"Spark checker failed (exit {done.returncode}): {done.stderr[-400:]}"
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    spark = {code: n for code, n in summary["violations"].items() if n}
    memory: Counter[str] = Counter()
    for o in sampled:
        memory.update({code: n for code, n in o.claimed_checks.items() if n})
    agree = summary["runs"] == len(sampled) and spark == dict(memory)
    return agree, (f"Spark checker (abcast check) on {summary['runs']} sampled traces, "
                   f"{summary['events']} events: violations {spark or 0}; in-memory on the "
                   f"same traces: {dict(memory) or 0}; {'agree' if agree else 'DISAGREE'}.")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--seeds", type=int, default=300)
    p.add_argument("--first-seed", type=int, default=1)
    p.add_argument("--nodes", type=int, default=None,
                   help="group size (default: 6, 7 or 8, drawn from the seed)")
    p.add_argument("--orderings", default=",".join(ORDERINGS))
    p.add_argument("--messages", type=int, default=200)
    p.add_argument("--safe", action="store_true", help="SAFE delivery (sequencer family)")
    p.add_argument("--workers", type=int, default=1)
    p.add_argument("--partition-ms", default="1500-3000",
                   help="how long the minority is cut off, LO-HI ms (drawn per seed)")
    p.add_argument("--cut-sequencer", action="store_true",
                   help="the cut-off minority holds n1, the first sequencer")
    p.add_argument("--clean-split", action="store_true",
                   help="cut the minority from every other node, the joiner too (else the "
                        "joiner, named on neither side, bridges the two)")
    p.add_argument("--flapping", action="store_true",
                   help="harsher schedules: 2-4 overlapping partitions, one or two joiners "
                        "(abcast.sim.churn.flapping_faults; the partition options are unused)")
    p.add_argument("--evs", action="store_true",
                   help="partitions='evs': both sides go on and merge on heal (sequencer "
                        "family; an open-loop workload, see above)")
    p.add_argument("--rate", type=float, default=40.0,
                   help="with --evs: broadcasts per second over the group")
    p.add_argument("--relay", action="store_true",
                   help="the sequencer family in relay mode (the origin sends to the "
                        "sequencer only); chandra-toueg runs as usual")
    p.add_argument("--nak", action="store_true",
                   help="the NAK channel over IP multicast (multicast='nak'), every ordering")
    p.add_argument("--stream-channel", action="store_true",
                   help="the channel shaped as over real transports: acks carried and one "
                        "tick for all links (abcast.sim.churn.STREAM_SHAPE)")
    p.add_argument("--native-lane", action="store_true",
                   help="with --stream-channel: run each seed with the native lane too; "
                        "both runs must write the same trace (see above)")
    p.add_argument("--stall-s", type=float, default=8.0,
                   help="with --evs: a run ends once nothing was delivered for this long")
    p.add_argument("--settle-s", type=float, default=5.0,
                   help="with --evs: a run is over once nothing was delivered for this long "
                        "after the last fault (a cut longer than the merge's fast probing, a "
                        "minute, merges within one slow probe period, 15 s, of its heal: "
                        "give more than that, and a --stall-s above it)")
    p.add_argument("--spark-sample", type=int, default=0, metavar="K",
                   help="also check the first K seeds' traces of each ordering with the "
                        "Spark checker (abcast check), which must agree with the in-memory one")
    args = p.parse_args(argv)
    if args.native_lane:
        from abcast.runtime import lane

        if not args.stream_channel:
            p.error("--native-lane needs --stream-channel: the lane declines every frame "
                    "of the default channel (per-link timers)")
        if lane.RECEIVE is None:
            p.error(f"--native-lane: the native lane is not on: {lane.STATUS}")
    spark_dir = tempfile.mkdtemp(prefix="churn-spark-") if args.spark_sample else ""
    lo, _, hi = args.partition_ms.partition("-")
    partition_ms = (int(lo), int(hi or lo))
    orderings = [o.strip() for o in args.orderings.split(",") if o.strip()]
    todo = [
        Task(o, seed, args.nodes or random.Random(seed).choice((6, 7, 8)), args.messages,
             args.safe and get_ordering(o).supports_safe, partition_ms, args.cut_sequencer,
             args.clean_split, args.flapping, args.evs, args.rate,
             round(args.stall_s * 1_000_000), args.relay and get_ordering(o).supports_relay,
             spark_dir if seed < args.first_seed + args.spark_sample else "", args.nak,
             args.stream_channel, round(args.settle_s * 1_000_000), args.native_lane)
        for seed in range(args.first_seed, args.first_seed + args.seeds) for o in orderings
    ]
    console = Console(stderr=True)
    outcomes: list[Outcome] = []
    started = time.perf_counter()
    progress = Progress(TextColumn("[bold]churn sweep"), BarColumn(), MofNCompleteColumn(),
                        TimeElapsedColumn(), console=console)
    with progress:
        bar = progress.add_task("runs", total=len(todo))
        if args.workers > 1:
            with multiprocessing.get_context("spawn").Pool(args.workers) as pool:
                for out in pool.imap_unordered(run_one, todo):
                    outcomes.append(out)
                    progress.update(bar, advance=1)
        else:
            for task in todo:
                outcomes.append(run_one(task))
                progress.update(bar, advance=1)
    print("\n".join(table(outcomes, orderings)))
    print(f"\n{len(outcomes)} runs, {args.messages} messages each, "
          f"{time.perf_counter() - started:.0f} s elapsed.")
    if args.native_lane:
        print(lane_line(outcomes))
    spark_ok = True
    if spark_dir:
        sampled = [o for o in outcomes if o.task.trace_dir and not o.refused]
        spark_ok, line = spark_check(spark_dir, sampled)
        print(line)
        shutil.rmtree(spark_dir, ignore_errors=True)
    bad = [o for o in outcomes if not o.clean]
    refused = {o.refused for o in bad if o.refused}
    for reason in sorted(refused):
        print(f"- refused: {reason}")
    for o in [o for o in bad if o.diverged]:
        print(f"- the native lane diverged, {o.diverged}: {o.task.command()}")
    for o in [o for o in bad if not o.refused and not o.diverged][:20]:
        what = {**o.violations, **o.problems} or "incomplete"
        print(f"- {what}: {o.task.command()}")
    return 1 if bad or not spark_ok else 0


if __name__ == "__main__":
    sys.exit(main())
