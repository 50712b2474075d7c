"""The bench report: `report.md` and its PNG plots, from a `BenchResult`.

Rules: rendering only — every figure shown comes from abcast.evaluation.results and
abcast.evaluation.analysis; nothing is measured or re-derived here. The page opens with
the thesis's Tables 4–6 (mean TO-broadcast latency, one table per ordering, n × middleware,
the model's prediction beside each cell), then measured vs model, the message-size
sweep, the floor, throughput vs offered load with the knee, the lone message (both with
their ratio to the floor, and both also paired with the floor, round by round), the
tracing-on verification, the peers and their ratios, the
scale section (full bench: 3–16 processes against the model, every ordering simulated at
64 nodes, the machine and its load), and every run with its checks. A missing figure
prints as "—". Plots use matplotlib's Agg backend (imported only in `draw_plots`); a
machine without matplotlib gets the page without them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from abcast.evaluation.analysis import (
    TRACKING,
    Floor,
    LoadCurve,
    ModelCell,
    cores_busy,
    cpu_us_per_message,
    floor_of,
    load_curves,
    model_cells,
    paired_lone,
    paired_saturation,
    peer_ratios,
    slope_checks,
)
from abcast.evaluation.grid import TABLE_PAYLOAD, Phase
from abcast.evaluation.results import BenchResult, Machine, RunMeasurement, is_clean
from abcast.evaluation.scale import ScalePoint, scale_points
from abcast.evaluation.sim_scale import SIM_HEADER, sim_table

THESIS_TABLES: Final = {"sequencer": 4, "skeen": 5, "chandra-toueg": 6}


def _num(value: float | None, digits: int = 2) -> str:
    return "—" if value is None else f"{value:,.{digits}f}"


def _ms(us: float | None, digits: int = 3) -> str:
    return "—" if us is None else f"{us / 1000:,.{digits}f}"


def _ratio(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}×"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows] + [""]


def _verdict(run: RunMeasurement) -> str:
    if not run.complete:
        return "INCOMPLETE"
    found = {**run.violations, **(run.spark_violations or {})}
    if any(found.values()):
        return ", ".join(f"{c}={n}" for c, n in sorted(found.items()) if n)
    if run.spark_violations is not None:
        return "clean (Spark)"
    return "clean (launcher)" if run.experiment.trace else "untraced"


# ---------------------------------------------------------------- sections


def _thesis_tables(result: BenchResult, cells: Sequence[ModelCell]) -> list[str]:
    if not result.of(Phase.TABLE):
        return []  # `--scale-only`
    lines = ["## Mean TO-broadcast latency (thesis Tables 4–6)", "",
             f"Closed-loop round-robin, {TABLE_PAYLOAD}-byte messages, real processes on "
             "loopback, traced and checked. Each cell: measured mean latency in ms, and in "
             "brackets the model s·(n−1)·T_msg + T_overhead (T_msg from the ping below, "
             "T_overhead fitted per ordering × middleware; * = fitted on that cell alone, "
             "so equal by construction).", ""]
    table_cells = {(c.ordering, c.transport, c.nodes): c for c in cells}
    runs = result.of(Phase.TABLE)
    orderings = sorted({r.experiment.ordering for r in runs},
                       key=lambda o: THESIS_TABLES.get(o, 99))
    middlewares = list(dict.fromkeys(r.experiment.transport for r in runs))
    sizes = sorted({r.experiment.nodes for r in runs})
    for ordering in orderings:
        number = THESIS_TABLES.get(ordering)
        lines += [f"**{'Table ' + str(number) + ' — ' if number else ''}{ordering}**", ""]
        rows = []
        for n in sizes:
            row = [str(n)]
            for mw in middlewares:
                c = table_cells.get((ordering, mw, n))
                if c is None or c.measured_us is None:
                    row.append("—")
                    continue
                star = "*" if c.exact_by_fit else ""
                row.append(f"{_ms(c.measured_us)} ({_ms(c.predicted_us)}{star})")
            rows.append(row)
        lines += _table(["n", *middlewares], rows)
    return lines


def _ping_sizes(result: BenchResult) -> list[str]:
    """The thesis's Table 3: the round trip against the frame size, per middleware."""
    sizes = sorted({p.size for p in result.pings})
    if len(sizes) < 2:
        return []
    cell = {(p.transport, p.size): p.rtt_p50_us for p in result.pings}
    lines = ["Round trip (p50 µs) against the frame size (the thesis's Table 3):", ""]
    return lines + _table(
        ["middleware", *(f"{s:,} B" for s in sizes)],
        [[mw, *(_num(cell.get((mw, s)), 1) for s in sizes)]
         for mw in dict.fromkeys(p.transport for p in result.pings)])


def _model_section(result: BenchResult, cells: Sequence[ModelCell]) -> list[str]:
    t_msg = result.t_msg_us()
    lines = ["## Measured vs model", "",
             "T_msg is half the median round trip of a 100-byte frame between two "
             "processes over that middleware.", ""]
    lines += _table(["middleware", "rounds", "RTT p50 µs", "RTT mean µs", "T_msg µs", "note"],
                    [[p.transport, str(p.rounds), _num(p.rtt_p50_us, 1),
                      _num(p.rtt_mean_us, 1), _num(p.t_msg_us, 1), p.error or ""]
                     for p in result.pings if p.size == TABLE_PAYLOAD])
    lines += _ping_sizes(result)
    if not cells:
        return lines
    lines += ["Growth per extra node: least squares of the measured means over n−1, against "
              "the model's s·T_msg. T_overhead: the fitted constant (slope fixed by the "
              "model); beside it two more estimates — the intercept of the free "
              "least-squares line (slope measured), and the smallest n's mean less "
              "s·(n−1)·T_msg there.", ""]
    overheads = {(c.ordering, c.transport): c.overhead_us for c in cells}
    lines += _table(
        ["ordering", "middleware", "cells", "measured µs/node", "model s·T_msg µs/node",
         "T_overhead µs", "free fit µs", "smallest n µs"],
        [[s.ordering, s.transport, str(s.points), _num(s.measured_slope_us, 1),
          _num(s.model_slope_us, 1), _num(overheads.get((s.ordering, s.transport)), 1),
          _num(s.free_fit_overhead_us, 1), _num(s.smallest_n_overhead_us, 1)]
         for s in slope_checks(cells, t_msg)])
    return lines


def _size_section(result: BenchResult) -> list[str]:
    runs = result.of(Phase.SIZES)
    if not runs:
        return []
    lines = ["## Message size sweep", "", "Closed loop, traced.", ""]
    lines += _table(
        ["ordering", "middleware", "n", "payload B", "mean ms", "p50 ms", "p99 ms",
         "throughput msg/s", "check"],
        [[r.experiment.ordering, r.experiment.transport, str(r.experiment.nodes),
          f"{r.experiment.payload:,}",
          _ms(r.figures.mean_us), _ms(r.figures.p50_us), _ms(r.figures.p99_us),
          _num(r.figures.throughput, 0), _verdict(r)] for r in runs])
    return lines


FLOOR_TEXT: Final = (
    "The floor is what this machine and interpreter allow for the sequencer's message "
    "pattern: a do-nothing sequencer (abcast.evaluation.floor) run through the same "
    "workload, the same measurement and the same process start-up as abcast, in this "
    "bench, just before abcast's load curves. Each node is one process on one event loop "
    "with a TCP connection to every peer on loopback, read and written by asyncio "
    "Protocols; a loop turn's broadcasts leave as one data frame to every other node, the "
    "lowest node numbers each such frame as one unit and announces the numbers of what it "
    "handled at once in one order frame, and every node hands the application one "
    "delivery per message in number order. It does nothing else: no reliable channel "
    "(TCP's order and retransmission are all), no failure detector, no membership, views, "
    "flush or fail-over, no protocol layers or effects, no tracing and no checks. Ratios "
    "to the floor say how much of the machine abcast's layers take: a saturation of 0.5 "
    "of the floor delivers half of what the bare pattern does, a lone-message p50 of 3× "
    "takes three times as long. The workload's own delivery callback (counters, the "
    "latency stamp) is in both: at saturation it is a good part of the floor's cost.")


def _floor_section(result: BenchResult) -> list[str]:
    runs = result.of(Phase.FLOOR)
    if not runs:
        return []
    lines = ["## The floor", "", FLOOR_TEXT, ""]
    curves = load_curves(result.runs, Phase.FLOOR)
    if curves:
        lines += _table(
            ["n", "offered msg/s", "delivered msg/s", "p50 ms"],
            [[str(c.nodes), f"{p.offered:,.0f}", _num(p.delivered, 0), _ms(p.p50_us)]
             for c in curves for p in c.points])
        lines += _table(["n", "saturation msg/s"],
                        [[str(c.nodes), _num(c.knee.saturation, 0)] for c in curves])
    lone = [r for r in runs if r.experiment.serial]
    if lone:
        lines += _table(
            ["n", "event loop", "lone p50 µs", "lone p99 µs", "CPU µs/msg", "cores busy",
             "status"],
            [[str(r.experiment.nodes), r.experiment.event_loop or "default",
              _num(r.figures.p50_us, 0), _num(r.figures.p99_us, 0),
              _num(cpu_us_per_message(r), 0), _num(cores_busy(r), 2),
              "ok" if r.complete else "INCOMPLETE " + "; ".join(r.errors)[:200]]
             for r in lone])
    return lines


def _load_section(result: BenchResult, curves: Sequence[LoadCurve], floor: Floor
                  ) -> list[str]:
    if not curves:
        return []
    lines = ["## Throughput vs offered load", "",
             "Open loop, tracing off (production settings). Delivered: messages "
             "ordered per second, go → last delivery. The knee (◆) is the last offered "
             f"rate delivered at ≥ {TRACKING:.0%} before the curve falls behind; "
             "saturation is the highest delivered rate. Broadcasts made in one loop turn "
             "leave as one batch, so past the knee each ordered message carries many. At the "
             "lowest offered rate messages leave 1 ms apart, mostly one in flight, and an "
             "idle node is woken for each (the next section has the lone message proper).",
             ""]
    rows = []
    for c in curves:
        for p in c.points:
            mark = " ◆" if c.knee.offered == p.offered else ""
            rows.append([c.ordering, c.transport, str(c.nodes), f"{p.offered:,.0f}{mark}",
                         _num(p.delivered, 0), _ms(p.p50_us)])
    lines += _table(["ordering", "middleware", "n", "offered msg/s", "delivered msg/s",
                     "p50 ms"], rows)
    rows = []
    for c in curves:
        floor_rate, ratio = floor.saturation_ratio(c)
        rows.append([c.ordering, c.transport, str(c.nodes), _num(c.knee.offered, 0),
                     _num(c.knee.saturation, 0),
                     "yes" if c.knee.saturated else "no (knee beyond the highest rate)",
                     _num(floor_rate, 0), _num(ratio, 3)])
    lines += _table(
        ["ordering", "middleware", "n", "knee offered msg/s", "saturation msg/s",
         "saturated in range", "floor msg/s", "of the floor"], rows)
    return lines + _paired_saturation_section(result)


def _paired_saturation_section(result: BenchResult) -> list[str]:
    paired = paired_saturation(result)
    if paired is None:
        return []
    ordering, transport, nodes = paired.group
    lines = ["### Saturation paired with the floor", "",
             f"The {ordering}'s saturation run and the floor's (n = {nodes}, {transport}, "
             "tracing off, the default loop, offered far above either's saturation), back "
             f"to back, in {len(paired.rounds) + paired.left_out} rounds that alternate "
             "which runs first. The \"of the floor\" column above divides runs made "
             "minutes apart, and this machine's speed drifts by up to 2× within minutes. "
             "Here each round's ratio comes from runs seconds apart, and the median over "
             "the rounds is the figure to quote. CPU ÷ floor: CPU per message over the "
             "floor's (every node delivers every message in both, so per delivery too).",
             ""]
    rows = [[str(number), _num(p.floor.figures.throughput, 0),
             _num(p.ours.figures.throughput, 0), _num(p.throughput_ratio, 3),
             _num(cpu_us_per_message(p.floor), 2), _num(cpu_us_per_message(p.ours), 2),
             _ratio(p.cpu_ratio)]
            for number, p in enumerate(paired.rounds, 1)]
    rows.append(["median", "", "", _num(paired.throughput_median, 3), "", "",
                 _ratio(paired.cpu_median)])
    lines += _table(["round", "floor msg/s", f"{ordering} msg/s", "÷ floor",
                     "floor CPU µs/msg", f"{ordering} CPU µs/msg", "CPU ÷ floor"], rows)
    if paired.left_out:
        lines += [f"{paired.left_out} round(s) left out: a run in them was incomplete or "
                  "in violation (see the runs below).", ""]
    return lines


def _lone_section(result: BenchResult, floor: Floor) -> list[str]:
    runs = result.of(Phase.LONE)
    if not runs:
        return []
    lines = ["## A lone message", "",
             "One message in flight (the serial workload: message k leaves once its sender "
             "delivered k−1, round robin), tcp, tracing off, on each event loop. Latency: "
             "broadcast → delivery, over every delivery on every node. For the sequencer a "
             "delivery is one hop (at the sequencer, or of its own message) or two (origin "
             "→ sequencer → the others; 4 of 9 deliveries at n = 3). In relay mode the "
             "origin sends to the sequencer only and the order carries the message, so a "
             "member handles one packet per message instead of two. Busy poll: after each "
             "read or write a node's loop keeps polling its sockets for that many µs instead "
             "of sleeping (`--busy-poll`), so a frame is not kept waiting for an idle CPU "
             "to wake up; it costs CPU while the group is idle. The floor's p50 and the "
             "ratios beside each row are the floor's lone message on the same event loop "
             "(it never busy-polls).", "",
             "CPU µs/msg: every node process's CPU time from go to its report, summed, "
             "over the messages; cores busy: that CPU over the run's span. One message in "
             "flight does not leave the machine idle: each message's hops, acks and "
             "timers on three processes keep a good part of the cores busy, so a "
             "process woken by a frame often waits for a core another node holds, and "
             "the latency follows the CPU each message costs the group as a whole (CPU "
             "÷ floor), not only the work on the critical path.", ""]
    rows = []
    for r in runs:
        floor_run = floor.lone_of(r)
        p50_ratio, p99_ratio = floor.lone_ratios(r)
        rows.append([r.experiment.variant, str(r.experiment.nodes), str(r.experiment.payload),
                     r.experiment.event_loop or "default", str(r.experiment.busy_poll_us),
                     _num(r.figures.p50_us, 0), _num(r.figures.p99_us, 0),
                     _num(r.figures.mean_us, 0), _num(r.figures.throughput, 0),
                     _num(floor_run.figures.p50_us if floor_run else None, 0),
                     _ratio(p50_ratio), _ratio(p99_ratio),
                     _num(cpu_us_per_message(r), 0), _num(cores_busy(r), 2),
                     _ratio(floor.lone_cpu_ratio(r)),
                     "ok" if r.complete else "INCOMPLETE " + "; ".join(r.errors)[:200]])
    lines += _table(
        ["ordering", "n", "payload B", "event loop", "busy poll µs", "p50 µs", "p99 µs",
         "mean µs", "messages/s", "floor p50 µs", "p50 ÷ floor", "p99 ÷ floor",
         "CPU µs/msg", "cores busy", "CPU ÷ floor", "status"],
        rows)
    return lines


def _paired_section(result: BenchResult) -> list[str]:
    paired = paired_lone(result)
    if paired is None:
        return []
    loop = paired.event_loop or "default"
    lines = ["### Paired with the floor", "",
             f"The sequencer's lone message at default settings and the floor's, back to "
             f"back on {loop}, in {len(paired.rounds) + paired.left_out} rounds that "
             "alternate which runs first. A row above compares runs made minutes apart, "
             "and this machine's speed drifts by up to 2× within minutes. Here each "
             "round's ratio comes from runs seconds apart, and the median over the rounds "
             "is the figure to quote.", ""]
    rows = [[str(number), _num(p.floor.figures.p50_us, 0), _num(p.ours.figures.p50_us, 0),
             _ratio(p.p50_ratio), _ratio(p.p99_ratio), _ratio(p.cpu_ratio)]
            for number, p in enumerate(paired.rounds, 1)]
    rows.append(["median", "", "", _ratio(paired.p50_median), _ratio(paired.p99_median),
                 _ratio(paired.cpu_median)])
    lines += _table(["round", "floor p50 µs", "sequencer p50 µs", "p50 ÷ floor",
                     "p99 ÷ floor", "CPU ÷ floor"], rows)
    if paired.left_out:
        lines += [f"{paired.left_out} round(s) left out: a run in them was incomplete or "
                  "in violation (see the runs below).", ""]
    return lines


def _verify_section(result: BenchResult) -> list[str]:
    verify = result.of(Phase.VERIFY)
    if not verify:
        return []
    untraced = {(r.experiment.ordering, r.experiment.nodes, r.experiment.rate): r
                for r in result.of(Phase.LOAD)}
    lines = ["## Tracing on, at the same offered rate", "",
             "Each curve's knee run again with tracing on; its trace is checked by Spark.", ""]
    rows = []
    for r in verify:
        e = r.experiment
        twin = untraced.get((e.ordering, e.nodes, e.rate))
        rows.append([e.ordering, str(e.nodes), _num(e.rate, 0),
                     _num(twin.figures.throughput if twin else None, 0),
                     _num(r.figures.throughput, 0), _verdict(r)])
    lines += _table(["ordering", "n", "offered msg/s", "untraced msg/s", "traced msg/s",
                     "check"], rows)
    return lines


def _peer_section(result: BenchResult) -> list[str]:
    if not result.peers:
        return []
    lines = ["## Peers, same machine, same run", "",
             "PySyncObj: 3-node Raft, a log appended through `@replicated` (default timers, "
             "and tuned: appendEntriesPeriod = autoTickPeriod = 5 ms). Redis Streams: XADD "
             "to one stream, every node XREAD-blocks it (the server is the sequencer). "
             "Same payloads, same round-robin workload; the open loop keeps at most 2,000 "
             "of a node's messages unapplied.", ""]
    rows = []
    for p in result.peers:
        e = p.experiment
        status = (f"skipped: {p.skipped}" if p.skipped else
                  "ok" if p.complete else "INCOMPLETE " + "; ".join(p.errors))
        rows.append([e.peer, str(e.nodes), str(e.payload),
                     "closed" if e.rate is None else f"open {e.rate:,.0f}/s", f"{e.messages:,}",
                     _num(p.figures.throughput, 0), _ms(p.figures.p50_us),
                     _ms(p.figures.p99_us), status])
    lines += _table(["peer", "n", "payload B", "load", "messages", "throughput msg/s",
                     "p50 ms", "p99 ms", "status"], rows)
    ratios = peer_ratios(result)
    if ratios:
        lines += ["abcast / peer: throughput is abcast's saturation (open loop, untraced) over "
                  "the peer's open-loop throughput; p50 is the closed-loop p50 over the "
                  "peer's (below 1×: abcast answers sooner).", ""]
        lines += _table(
            ["ordering", "peer", "abcast msg/s", "peer msg/s", "throughput ratio",
             "abcast p50 ms", "peer p50 ms", "p50 ratio"],
            [[r.ordering, r.peer, _num(r.abcast_throughput, 0), _num(r.peer_throughput, 0),
              _ratio(r.throughput_ratio), _ms(r.abcast_p50_us), _ms(r.peer_p50_us),
              _ratio(r.p50_ratio)] for r in ratios])
    return lines


SCALE_TEXT: Final = (
    "Real processes on tcp over loopback, 64-byte messages, tracing off, the default "
    "event loop and settings. Saturation: one open-loop run offered far above what the "
    "group can order (so every node has its whole share queued at once); the delivered "
    "rate, go → last delivery, is the group's saturation. Lone message: the serial "
    "workload (one message in flight), p50 over every delivery on every node. The model "
    "is the thesis's (a TO-broadcast costs s·(n−1) messages: sequencer s = 2, "
    "chandra-toueg s = 4), anchored at the smallest n: its saturation predicts "
    "X(n₀)·(n₀−1)/(n−1) — all n processes share the same cores, so the group's "
    "throughput falls as the messages per broadcast rise — and its latency "
    "s·(n−1)·T_msg + T_overhead, with T_msg from the tcp ping above and T_overhead the "
    "anchor's p50 less s·(n₀−1)·T_msg. \"Per delivery\" is the cost the model leaves "
    "out: every node delivers every message, X(n₀)·n₀/n. CPU per message: every node "
    "process's CPU time from go to its report, summed, over the messages; cores busy: "
    "that sum over the run's span; on free cores: the machine's cores over the CPU per "
    "message — the saturation the group would reach with every core to itself, the "
    "figure that survives other work on the machine — beside its own model column, "
    "anchored the same way. RSS per node: each node process's peak resident "
    "memory in the saturation run (mean and largest over the group), and beside it the "
    "mean peak as its workload began (interpreter, imports, the open group): the "
    "difference is what the traffic added.")

SCALE_CAVEAT: Final = (
    "Read these figures for their shape against n, not as capacity. With more node "
    "processes than cores the machine is CPU-starved: a lone message's hops each wait "
    "for the receiving process to be scheduled, which the model's T_msg (a ping between "
    "two processes that each have a core) does not contain, so past n = cores the "
    "measured p50 grows faster than the model's straight line; and the saturation "
    "figures measure the cores more than the protocol (CPU per message is the "
    "protocol's cost; cores busy below the machine's count mean the runs waited for "
    "other work). The runs are short, one each: expect ±30 % between two benches on a "
    "shared machine.")

SIM_TEXT: Final = (
    "Every ordering in the deterministic simulator, one seeded run each, closed "
    "round-robin, no faults, the registry's stack; each run in a fresh process of its "
    "own (abcast.evaluation.sim_scale; `bench/sim_scale.py` runs the same alone). Clean: "
    "no violation of the ordering's claims and every node delivered every message. Wall "
    "and CPU time are the worker process's (CPU is what the run cost whatever else ran); "
    "peak RSS includes the interpreter and its imports. The crash-tolerant orderings' "
    "failure detectors send n·(n−1) heartbeats per period for as long as a run lasts: "
    "at 64 nodes they are most of the events.")


def _machine_line(machine: Machine | None) -> list[str]:
    if machine is None:
        return []
    before = " / ".join(f"{x:.1f}" for x in machine.load_before)
    after = " / ".join(f"{x:.1f}" for x in machine.load_after)
    return [f"Machine: {machine.cpus} CPUs, {machine.memory_gib:.0f} GiB, Python "
            f"{machine.python}, {machine.platform}. Load average (1 / 5 / 15 min) as the "
            f"section began: {before}; as it ended: {after} (a load above {machine.cpus} "
            "means other work shared the cores with these runs).", ""]


def _mib(pair: tuple[float, float] | None) -> str:
    return "—" if pair is None else f"{pair[0]:,.0f} / {pair[1]:,.0f}"


def _scale_section(result: BenchResult, points: Sequence[ScalePoint]) -> list[str]:
    if not points and not result.sims:
        return []
    lines = ["## Scale", ""]
    lines += _machine_line(result.machine)
    if points:
        lines += [SCALE_TEXT, ""]
        lines += _table(
            ["ordering", "n", "saturation msg/s", "model msg/s", "÷ model",
             "per delivery msg/s", "CPU µs/msg", "cores busy", "on free cores msg/s",
             "÷ model", "lone p50 µs",
             "model p50 µs", "÷ model", "lone p99 µs", "RSS/node MiB (mean / max)",
             "RSS/node at go MiB", "status"],
            [[p.ordering, str(p.nodes), _num(p.saturation, 0), _num(p.model_saturation, 0),
              _ratio(p.saturation_of_model), _num(p.delivery_bound, 0),
              _num(p.cpu_us_per_message, 1), _num(p.cores_busy, 2),
              _num(p.free_cores_saturation, 0), _ratio(p.free_cores_of_model),
              _num(p.lone_p50_us, 0),
              _num(p.model_p50_us, 0), _ratio(p.p50_of_model),
              _num(p.lone.figures.p99_us if p.lone else None, 0), _mib(p.rss_mib),
              _num(p.rss_at_go_mib, 0), p.status] for p in points])
        lines += [SCALE_CAVEAT, ""]
    if result.sims:
        sim = result.sims[0]
        lines += [f"**Simulated: every ordering at n = {sim.nodes}**, {sim.messages} "
                  f"broadcasts per run, seed {sim.seed}.", "", SIM_TEXT, ""]
        lines += _table(SIM_HEADER, sim_table(result.sims))
    return lines


def _runs_section(result: BenchResult) -> list[str]:
    lines = ["## Every run", ""]
    lines += _table(
        ["phase", "ordering", "mw", "n", "B", "load", "run", "msg/s", "p50 ms",
         "packets/bcast", "retrans.", "check", "errors"],
        [[r.experiment.phase.value, r.experiment.variant, r.experiment.transport,
          str(r.experiment.nodes), str(r.experiment.payload),
          r.experiment.setting, r.run_id or "—", _num(r.figures.throughput, 0),
          _ms(r.figures.p50_us),
          _num(r.packets_per_broadcast, 2), str(r.retransmissions), _verdict(r),
          "; ".join(r.errors)[:200]] for r in result.runs])
    return lines


@dataclass(frozen=True, slots=True)
class Plot:
    title: str
    file_name: str


def render_markdown(result: BenchResult, plots: Sequence[Plot] = ()) -> str:
    cells = model_cells(result.of(Phase.TABLE), result.t_msg_us())
    curves = load_curves(result.runs)
    traced = [r for r in result.runs if r.experiment.trace]
    checked = [r for r in traced if r.spark_violations is not None]
    bad = [r for r in result.runs if not is_clean(r)]
    spark = (f"Spark checked {len(checked)} of {len(traced)} traced runs"
             f" in {result.spark_s:.1f} s" if result.spark_s is not None else
             "Spark did not run")
    lines = [f"# abcast bench{' (quick)' if result.quick else ''}", "",
             f"{len(result.runs)} cluster runs, {len(result.peers)} peer runs, "
             f"{len(result.pings)} pings in {result.wall_s:.0f} s. {spark}"
             f"{': ' + result.spark_error if result.spark_error else '.'} "
             f"Runs incomplete or in violation: {len(bad)}.", ""]
    lines += [f"- {note}" for note in result.notes]
    if result.notes:
        lines.append("")
    if result.phase_s:
        spent = [f"{name} {seconds:.0f} s" for name, seconds in result.phase_s.items()]
        if result.spark_s is not None:
            spent.append(f"Spark {result.spark_s:.0f} s")
        lines += ["Time per section: " + ", ".join(spent) + ".", ""]
    lines += _thesis_tables(result, cells)
    lines += _model_section(result, cells)
    lines += _size_section(result)
    floor = floor_of(result)
    lines += _floor_section(result)
    lines += _load_section(result, curves, floor)
    lines += _lone_section(result, floor)
    lines += _paired_section(result)
    lines += _verify_section(result)
    lines += _peer_section(result)
    lines += _scale_section(result, scale_points(result))
    if plots:
        lines += ["## Plots", ""]
        for plot in plots:
            lines += [f"![{plot.title}]({plot.file_name})", ""]
    lines += _runs_section(result)
    return "\n".join(lines).rstrip() + "\n"


# ---------------------------------------------------------------- plots


def draw_plots(result: BenchResult, out: Path) -> list[Plot]:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return []
    plots: list[Plot] = []
    cells = model_cells(result.of(Phase.TABLE), result.t_msg_us())
    pairs = sorted({(c.ordering, c.transport) for c in cells if c.measured_us is not None})
    if pairs:
        fig, ax = plt.subplots(figsize=(8, 5))
        for ordering, mw in pairs:
            pts = sorted((c.nodes, c.measured_us, c.predicted_us) for c in cells
                         if (c.ordering, c.transport) == (ordering, mw)
                         and c.measured_us is not None)
            line = ax.plot([p[0] for p in pts], [p[1] / 1000 for p in pts], "o-",
                           label=f"{ordering}/{mw}")[0]
            model = [(p[0], p[2] / 1000) for p in pts if p[2] is not None]
            if model:
                ax.plot(*zip(*model, strict=True), "--", color=line.get_color(), alpha=0.5)
        ax.set(xlabel="n (nodes)", ylabel="mean latency (ms)",
               title="TO-broadcast latency (dashed: model)")
        ax.legend(fontsize=7, ncol=2)
        plots.append(_save(fig, out, "latency_vs_n.png", "Latency vs n, measured and model"))
    sizes = result.of(Phase.SIZES)
    if sizes:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for ordering, mw in sorted({(r.experiment.ordering, r.experiment.transport)
                                    for r in sizes}):
            by_size = sorted((r.experiment.payload, r.figures.mean_us) for r in sizes
                             if (r.experiment.ordering, r.experiment.transport) == (
                                 ordering, mw) and r.figures.mean_us is not None)
            if by_size:
                ax.plot([p[0] for p in by_size], [p[1] / 1000 for p in by_size], "o-",
                        label=f"{ordering}/{mw}")
        ax.set(xscale="log", xlabel="payload (bytes)", ylabel="mean latency (ms)",
               title="Message size sweep")
        ax.legend()
        plots.append(_save(fig, out, "latency_vs_size.png", "Latency vs message size"))
    ping_sizes = sorted({p.size for p in result.pings})
    if len(ping_sizes) > 1:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for mw in dict.fromkeys(p.transport for p in result.pings):
            rtts = sorted((p.size, p.rtt_p50_us) for p in result.pings
                          if p.transport == mw and p.rtt_p50_us is not None)
            if rtts:
                ax.plot([x for x, _ in rtts], [y for _, y in rtts], "o-", label=mw)
        ax.set(xscale="log", xlabel="frame (bytes)", ylabel="round trip p50 (µs)",
               title="Ping against frame size (thesis Figure 34)")
        ax.legend()
        plots.append(_save(fig, out, "ping_vs_size.png", "Ping against frame size"))
    curves = load_curves(result.runs)
    if curves:
        fig, ax = plt.subplots(figsize=(7, 4.5))
        top = max(p.offered for c in curves for p in c.points)
        ax.plot([0, top], [0, top], ":", color="grey", label="delivered = offered")
        for c in curves:
            curve = [(p.offered, p.delivered) for p in c.points if p.delivered is not None]
            if not curve:
                continue
            line = ax.plot(*zip(*curve, strict=True), "o-",
                           label=f"{c.ordering}/{c.transport} n={c.nodes}")[0]
            knee = next((p for p in c.points if p.offered == c.knee.offered), None)
            if knee is not None and knee.delivered is not None:
                ax.plot([knee.offered], [knee.delivered], "D", markersize=11,
                        color=line.get_color(), markerfacecolor="none")
        ax.set(xlabel="offered (broadcasts/s)", ylabel="delivered (messages/s)",
               title="Throughput vs offered load (◇ knee)")
        ax.legend(fontsize=8)
        plots.append(_save(fig, out, "throughput_vs_load.png", "Throughput vs offered load"))
    scale = scale_points(result)
    if scale:
        plots.append(_scale_plot(scale, out))
    return plots


def _scale_plot(points: Sequence[ScalePoint], out: Path) -> Plot:
    """Saturation (measured, and on free cores), lone p50 and RSS per node against n;
    dashed: the model."""
    import matplotlib.pyplot as plt

    fig, (sat, lat, mem) = plt.subplots(1, 3, figsize=(13, 4.2))
    for index, ordering in enumerate(dict.fromkeys(p.ordering for p in points)):
        mine = [p for p in points if p.ordering == ordering]
        color = f"C{index}"
        series = (
            (sat, ordering, "o-", [p.saturation for p in mine],
             [p.model_saturation for p in mine]),
            (sat, f"{ordering} on free cores", "s:", [p.free_cores_saturation for p in mine],
             [p.model_free_cores for p in mine]),
            (lat, ordering, "o-", [p.lone_p50_us for p in mine],
             [p.model_p50_us for p in mine]),
            (mem, ordering, "o-", [p.rss_mib[0] if p.rss_mib else None for p in mine],
             [None for _ in mine]))
        for ax, label, style, measured, model in series:
            got = [(p.nodes, y) for p, y in zip(mine, measured, strict=True) if y is not None]
            if not got:
                continue
            ax.plot(*zip(*got, strict=True), style, color=color, label=label)
            predicted = [(p.nodes, y) for p, y in zip(mine, model, strict=True)
                         if y is not None]
            if predicted:
                ax.plot(*zip(*predicted, strict=True), "--", color=color, alpha=0.5,
                        label=f"{label} (model)")
    sat.set(xlabel="n (processes)", ylabel="saturation (messages/s)", yscale="log",
            title="Saturation against n")
    lat.set(xlabel="n (processes)", ylabel="lone message p50 (µs)", yscale="log",
            title="A lone message against n")
    mem.set(xlabel="n (processes)", ylabel="peak RSS per node (MiB, mean)",
            title="Memory per node (saturation run)", ylim=(0, None))
    for ax in (sat, lat, mem):
        ax.legend(fontsize=6)
    return _save(fig, out, "scale.png", "Scale: saturation, lone p50 and memory against n")


def _save(fig: object, out: Path, name: str, title: str) -> Plot:
    import matplotlib.pyplot as plt

    fig.savefig(out / name, dpi=110, bbox_inches="tight")  # type: ignore[attr-defined]
    plt.close(fig)  # type: ignore[arg-type]
    return Plot(title, name)


def write_report(result: BenchResult, out: Path) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    page = out / "report.md"
    page.write_text(render_markdown(result, draw_plots(result, out)))
    return page
