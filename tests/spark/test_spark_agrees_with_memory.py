"""The Spark checker and the in-memory checker (abcast.testing) implement the same
definitions (docs/checks.md): on the same traces they must report the same number of
violations per code per run.

The traces: the hand-written scenarios (clean and planted), seeded random mutations of a
clean total-order run (dropped, duplicated, swapped and foreign deliveries, crashes,
causal deps) and of a run through three views (lost and late deliveries, odd member
lists, repeated or falling views, crashes, later send views) and of a run with a joiner
and a rejoined node (snapshots: lost, swapped, repeated deliveries after the join), and
small simulated runs (a crash, a joiner, causal order, churn with a rejoin), and rows
drawn at random that no driver writes (`_adversarial`: the harness that found the
node-order, repeated-index, wide-index and seq-0 disagreements; with `wide`, seq jumps
past 2**62 and bigint extremes, which found the overflows and the repeated-row count),
and rows tied in a node's order (`tied_rows`: deliveries at one index and t_ns, view rows
at one t_ns), each written in two file orders, which found that the verdict followed the
file (abcast.checks.facts.DELIVERY_ORDER and VIEW_ROW_ORDER settle the ties now), and
null entries in member lists and deps maps (`null_entries`: memory raised TypeError).
"""

from __future__ import annotations

import random
from collections import Counter
from pathlib import Path

import pytest
from spark_traces import ALL, build_scenarios

from abcast.pipeline.commands import run_check
from abcast.pipeline.io import read_trace
from abcast.pipeline.suite import RunClaim, find_violations, runs_by_code, summarize
from abcast.pipeline.trace_tables import materialize_tables
from abcast.sim import SimConfig, run_simulation
from abcast.testing import TraceBuilder, Violation, check_traces, count_by_code
from abcast.testing.builders import null_entries, tied_rows
from abcast.trace.rows import EventRow, RunInfo
from abcast.trace.schema import CODES
from abcast.trace.writer import read_traces, write_run

pytestmark = pytest.mark.spark


def _mutated(seed: int) -> tuple[list[EventRow], RunInfo]:
    """A total-order run of 4 nodes, then a few random faults planted by seed."""
    rng = random.Random(seed)
    b = TraceBuilder(f"mutated-{seed}")
    nodes = ["n1", "n2", "n3", "n10"]
    delivered: dict[str, int] = {}
    order: list[tuple[str | None, str, int]] = []
    for _ in range(12):
        origin = rng.choice(nodes)
        deps = {o: k for o, k in delivered.items() if o != origin and rng.random() < 0.7}
        order.append(b.send(origin, deps=deps or None))
        delivered[origin] = delivered.get(origin, 0) + 1
    crashed = rng.choice([None, "n3"])
    for node in nodes:
        mine = list(order)
        if rng.random() < 0.5:  # drop one
            mine.pop(rng.randrange(len(mine)))
        if rng.random() < 0.5:  # swap a neighbour pair
            i = rng.randrange(len(mine) - 1)
            mine[i], mine[i + 1] = mine[i + 1], mine[i]
        if rng.random() < 0.3:  # deliver one twice
            mine.append(rng.choice(mine))
        if rng.random() < 0.2:  # deliver a message nobody sent
            mine.insert(rng.randrange(len(mine)), ("g", "n7", rng.randint(1, 3)))
        if node == crashed:
            mine = mine[: rng.randrange(len(mine))]
        if rng.random() < 0.3:  # an optimistic delivery, perhaps too late
            b.opt_deliver(node, *order[0][1:])
        for _group, origin, seq in mine:
            b.deliver(node, origin, seq)
        if rng.random() < 0.3:
            b.opt_deliver(node, *order[1][1:])
        if node == crashed:
            b.crash(node)
    return b.rows(), b.run_info(ALL)


def _views_mutated(seed: int) -> tuple[list[EventRow], RunInfo]:
    """Four nodes through three views (a joiner, a leaver), then view faults planted by
    seed: a lost or late delivery, a node listing other members, a view installed twice
    or out of order, a crash mid-view, a broadcast recorded in a newer view."""
    rng = random.Random(1000 + seed)
    b = TraceBuilder(f"views-{seed}")
    members = [["n1", "n2", "n3"], ["n1", "n2", "n3", "n10"], ["n1", "n3", "n10"]]
    b.view("n10", 0, ["n10"])  # the joiner's private start
    crashed = rng.choice([None, "n3"])
    for number, view in enumerate(members, start=1):
        for node in view:
            listed = list(view)
            if rng.random() < 0.1:
                listed = listed[:-1]
            b.view(node, number, listed)
            if rng.random() < 0.05:
                b.view(node, rng.choice([number, number - 1]), view)
        ms = []
        for _ in range(rng.randint(1, 4)):
            origin = rng.choice(view)
            later = number + 1 if rng.random() < 0.1 else None
            ms.append(b.send(origin, view_id=later))
        late: list[tuple[str, tuple[str | None, str, int]]] = []
        for node in view:
            for m in ms:
                roll = rng.random()
                if roll < 0.1:
                    continue  # lost
                if roll < 0.2:
                    late.append((node, m))  # delivered after the next view is installed
                    continue
                b.deliver(node, m[1], m[2])
        if crashed is not None and number == 2 and rng.random() < 0.5:
            b.crash(crashed)
            crashed = None
        for node, m in late:
            if number < len(members):
                b.view(node, number + 1, members[number])
            b.deliver(node, m[1], m[2])
    return b.rows(), b.run_info(ALL)


def _joiners_mutated(seed: int) -> tuple[list[EventRow], RunInfo]:
    """n1..n3 in view 1; n10 joins in view 2 (private start first) with the earlier
    messages as state; n3 is cut off after view 2 and rejoins in view 4 (crash, recover);
    causal deps throughout. Then faults planted by seed: a lost, swapped or repeated
    delivery at the joiner or the rejoined node, a delivery in a stale view."""
    rng = random.Random(2000 + seed)
    b = TraceBuilder(f"joiners-{seed}")
    members = {1: ["n1", "n2", "n3"], 2: ["n1", "n2", "n3", "n10"], 3: ["n1", "n2", "n10"],
               4: ["n1", "n2", "n3", "n10"]}
    b.view("n10", 0, ["n10"])
    delivered: dict[str, int] = {}
    for number, view in members.items():
        if number == 4:
            b.crash("n3")
            b.recover("n3")
        for node in view:
            b.view(node, number, view)
        ms = []
        for _ in range(rng.randint(2, 4)):
            origin = rng.choice(view)
            deps = {o: k for o, k in delivered.items() if o != origin and rng.random() < 0.8}
            ms.append(b.send(origin, deps=deps or None))
            delivered[origin] = delivered.get(origin, 0) + 1
        for node in view:
            mine = list(ms)
            if node in ("n10", "n3") and number >= 2:
                roll = rng.random()
                if roll < 0.2:
                    mine.pop(rng.randrange(len(mine)))
                elif roll < 0.4:
                    i = rng.randrange(len(mine) - 1)
                    mine[i], mine[i + 1] = mine[i + 1], mine[i]
                elif roll < 0.5:
                    mine.insert(0, ("g", "n1", 1))  # something it had as state
            for _group, origin, seq in mine:
                stale = number - 1 if rng.random() < 0.05 else None
                b.deliver(node, origin, seq, view_id=stale)
    return b.rows(), b.run_info(ALL)


_LONG_IDS = ("n" + "9" * 39, "n1" + "0" * 39)  # digit runs past any Spark decimal
#: values no writer gives but a trace may hold: seq jumps past any range a checker could
#: list, the bigint extremes (no arithmetic on them may overflow)
_WIDE = (2**62, -(2**63), 2**63 - 1, 2**63 - 2, 2**31, -(2**31))


def _adversarial(seed: int, *, wide: bool = False) -> tuple[list[EventRow], RunInfo]:
    """Rows no driver writes but a trace may hold, drawn by seed: any kind at any node in
    any order (a delivery before its send, after a crash or a leave), ids with digit runs
    past 38 digits, seqs -1..5, repeated, negative and past-40-bit indices, null groups
    and view ids, odd member lists, deps of any origin. `wide`: a quarter of the seqs,
    indices, view ids, deps bounds and times drawn from `_WIDE` instead, and a row now and
    then written twice, verbatim."""
    rng = random.Random((9000 if wide else 3000) + seed)
    run = f"{'wide' if wide else 'adversarial'}-{seed}"
    nodes = rng.sample(["n1", "n2", "n10", "n02", "a", "z9", *_LONG_IDS], rng.randint(1, 5))
    groups = ["g", "h", None] if rng.random() < 0.3 else ["g"]
    kinds = ["send", "deliver", "deliver", "deliver", "opt_deliver", "view", "crash",
             "recover"]

    def num(low: int, high: int) -> int:
        return rng.choice(_WIDE) if wide and rng.random() < 0.25 else rng.randint(low, high)

    def wide_only(low: int, high: int) -> list[int]:
        return [num(low, high)] if wide else []

    times = range(1, rng.randint(1, 40) + 1)
    if wide:  # repeats too: rows tied in t_ns (and index) have one order (DELIVERY_ORDER)
        times = sorted(num(1, 99) for _ in times)  # type: ignore[assignment]
    rows: list[EventRow] = []
    counters: dict[tuple[str, str], int] = {}
    for t_ns in times:
        node, kind, group = rng.choice(nodes), rng.choice(kinds), rng.choice(groups)
        # (the wide-only choices are drawn only then: the other seeds keep their rows)
        seq, view = num(-1, 5), rng.choice([None, 1, 1, 2, 2, 3, *wide_only(1, 3)])
        if kind == "send":
            deps = ({o: num(0, 4) for o in rng.sample(nodes, rng.randint(0, len(nodes)))}
                    if rng.random() < 0.5 else None)
            origin = node if rng.random() < 0.9 else rng.choice(nodes)
            rows.append(EventRow(run, node, kind, origin, seq, group, t_ns, None, 0, view, deps))
        elif kind in ("deliver", "opt_deliver"):
            n = counters[(node, kind)] = counters.get((node, kind), 0) + 1
            index = n if rng.random() < 0.9 else rng.choice([None, n - 1, 1, 2**41 + n, -n,
                                                              *wide_only(1, 3)])
            rows.append(EventRow(run, node, kind, rng.choice(nodes), seq, group, t_ns, index,
                                 0, view))
        elif kind == "view":
            members = tuple(rng.sample(nodes, rng.randint(1, len(nodes))))
            members = (node,) if rng.random() < 0.2 else members
            rows.append(EventRow(run, node, kind, None, None, group, t_ns, None, None, view,
                                 None, None, None if rng.random() < 0.1 else members))
        else:
            rows.append(EventRow(run, node, kind, None, None, group, t_ns, None))
        if wide and rng.random() < 0.1:
            rows.append(rows[-1])
    return rows, RunInfo(run, "test", "mem://", len(nodes), 0, "adversarial", seed, None,
                         ALL, 0, 1)


def _simulated() -> list[tuple[list[EventRow], RunInfo]]:
    configs = [
        SimConfig("sequencer", 3, 12, seed=1, faults="crash=n3@4ms"),
        SimConfig("matrix", 3, 8, seed=2, faults="join=n4@2ms"),
        SimConfig("causal", 4, 12, seed=3, faults="drop=0.1"),
        SimConfig("chandra-toueg", 3, 8, seed=4, faults="crash=n2@3ms"),
        # churn: a leaver, a joiner given state, a partitioned member that rejoins
        SimConfig("causal-total", 6, 40, seed=2,
                  faults="drop=0.02,delay=1-20ms,leave=n2@150ms,join=n7@300ms,"
                         "partition=n3|n1+n2+n4+n5+n6@100ms-2000ms"),
    ]
    out = []
    for config in configs:
        result = run_simulation(config)
        info = result.run_info()
        # Claim everything: both checkers must also agree on what the ordering does not
        # promise (and so may well violate).
        everything = RunInfo(**{**{f: getattr(info, f) for f in info.__slots__},
                                "guarantees": ALL})
        out.append((result.recorder.rows(), everything))
    return out


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("agree")
    for scenario in build_scenarios():
        write_run(out, scenario.rows, scenario.info)
    for seed in range(6):
        write_run(out, *_mutated(seed))
        write_run(out, *_views_mutated(seed))
        write_run(out, *_joiners_mutated(seed))
    for seed in range(60):
        rows, info = _adversarial(seed)
        if rows:
            write_run(out, rows, info)
    for seed in range(40):
        rows, info = _adversarial(seed, wide=True)
        if rows:
            write_run(out, rows, info)
    for seed in range(20):  # rows tied in a node's order, in two file orders
        for run_id, order in ((f"tied-{seed}", 1), (f"tied-{seed}-reversed", -1)):
            write_run(out, tied_rows(seed, run_id)[::order], RunInfo(
                run_id, "test", "mem://", 4, 0, "tied", seed, None, ALL, 0, 1))
    for run_id, deviant in (("null-entries", False), ("null-entries-deviant", True)):
        write_run(out, null_entries(run_id, deviant=deviant), RunInfo(
            run_id, "test", "mem://", 3, 0, "nulls", None, None, ALL, 0, 1))
    for rows, info in _simulated():
        write_run(out, rows, info)
    return out


def test_spark_and_memory_count_the_same_per_code_per_run(spark: object,
                                                          trace_dir: Path) -> None:
    """The same counts per (run, code), and the same counterexamples (nodes, messages,
    positions) for every violation."""
    runs, events = read_traces(trace_dir)
    found_in_memory = check_traces(runs, events)
    memory = {run_id: count_by_code(found, CODES) for run_id, found in found_in_memory.items()}
    assert sum(sum(c.values()) for c in memory.values()) > 20  # violations to agree on
    for code in ("VIEW_CONSISTENCY", "VIRTUAL_SYNCHRONY", "SAME_VIEW_DELIVERY"):
        assert sum(c[code] for c in memory.values()) >= 3, code
    joiners = [c for run, c in memory.items() if run.startswith("joiners-")]
    for code in ("FIFO_ORDER", "CAUSAL_ORDER"):  # planted at joiners: to agree on
        assert sum(c[code] for c in joiners) >= 2, code
    for seed in range(20):  # tied rows: the file's order of them changes nothing
        assert memory[f"tied-{seed}"] == memory[f"tied-{seed}-reversed"], seed

    trace = read_trace(spark, str(trace_dir))  # type: ignore[arg-type]
    claims = [RunClaim(r.run_id, r.ordering, r.nodes, r.guarantees) for r in runs]
    # with_views: the cached view tables (test_spark_checks runs the lazily derived ones)
    # every violation brought back as an example: the counterexamples are compared too
    verdict = summarize(find_violations(materialize_tables(trace.events, with_views=True),
                                        runs_by_code(claims)), examples_per_code=10_000)
    by_spark = {r.run_id: {code: verdict.counts.get((r.run_id, code), 0) for code in CODES}
                for r in runs}
    mismatches = {run: (memory[run], by_spark[run]) for run in memory
                  if memory[run] != by_spark[run]}
    assert not mismatches
    shown_by_spark = Counter((e.run_id, e.code, e.nodes, e.messages, e.positions)
                             for e in verdict.examples)
    shown_in_memory = Counter(_as_shown(run_id, v) for run_id, found in found_in_memory.items()
                              for v in found)
    assert shown_in_memory - shown_by_spark == Counter()
    assert shown_by_spark - shown_in_memory == Counter()


#: Spark's witness code keeps an AGREEMENT position in [0, 2**40) (trace_tables.witness_code)
_WITNESS_TOP = 2**40 - 1


def _as_shown(run_id: str, v: Violation) -> tuple[object, ...]:
    """A memory violation as Spark shows its counterexample (message ids as strings, an
    agreement witness's position clamped as Spark's witness code clamps it)."""
    positions = v.positions
    if v.code in ("AGREEMENT", "UNIFORM_AGREEMENT"):
        positions = tuple(min(max(p, 0), _WITNESS_TOP) for p in positions)
    messages = tuple(("" if g is None else f"{g}/") + f"{o}:{s}" for g, o, s in v.messages)
    return (run_id, v.code, v.nodes, messages, positions)


def test_the_check_command_sees_a_joiners_private_start_without_view_claims(
        spark: object, tmp_path: Path) -> None:
    """`abcast check` reads only the columns the claimed checks need. A run that claims
    causal order but no view check still needs the view rows' member lists: without them
    a joiner's private start (its first view, itself alone) counts as its admission view,
    its snapshot is empty, and a causal predecessor it had as state from an origin it
    never delivers from is "missing" (the churn sweep's causal runs: 1,828 such units in
    Spark, none in memory)."""
    b = TraceBuilder("joiner-causal")
    first, second = ["n1", "n2", "n3"], ["n1", "n2", "n10"]
    b.view("n10", 0, ["n10"])  # the joiner's private start
    for node in first:
        b.view(node, 1, first)
    early = [b.send("n3") for _ in range(2)]  # n3's only messages, then it leaves
    for node in first:
        for _group, origin, seq in early:
            b.deliver(node, origin, seq)
    for node in second:
        b.view(node, 2, second)
    later = b.send("n1", deps={"n3": 2})  # n10 holds n3#1..2 as state
    for node in second:
        b.deliver(node, later[1], later[2])
    causal_only = ("integrity", "validity", "fifo", "causal")
    write_run(tmp_path, b.rows(), b.run_info(causal_only))
    runs, events = read_traces(tmp_path)
    memory = check_traces(runs, events)
    assert memory == {"joiner-causal": []}

    outcome = run_check(spark, str(tmp_path), None)  # type: ignore[arg-type]
    assert dict(outcome.verdict.counts) == {}
