"""`TraceBuilder`: hand-written traces for tests — a clean run in a few lines, a planted
violation in one more.

Rules: every row goes through a real `TraceRecorder`, so built traces obey the same
invariants (index, strictly increasing t_ns) as the simulator's and the runtime's. A single
clock advances `tick_ns` per row across all nodes, so rows are in the order the test
wrote them. A node's deliveries and sends carry the view_id of the last `view` row it
recorded in that group (None before any), as the drivers write them. No checking happens
here.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from abcast.checks import MessageKey
from abcast.trace.recorder import TraceRecorder
from abcast.trace.rows import EventRow, RunInfo


class TraceBuilder:
    """Build one run's rows: `send`, `deliver`, `view`, `crash` … in the order written."""

    def __init__(self, run_id: str = "run-1", group: str = "g", *, tick_ns: int = 1_000):
        self.run_id = run_id
        self.group = group
        self.tick_ns = tick_ns
        self.recorder = TraceRecorder(run_id)
        self._now = 0
        self._next_seq: dict[tuple[str, str], int] = {}
        self._view: dict[tuple[str, str], int] = {}

    def _tick(self) -> int:
        self._now += self.tick_ns
        return self._now

    def send(
        self,
        origin: str,
        seq: int | None = None,
        *,
        deps: Mapping[str, int] | None = None,
        group: str | None = None,
        view_id: int | None = None,
    ) -> MessageKey:
        """`origin` broadcasts its next message (or `seq`), in its current view (or
        `view_id`); returns the message id."""
        g = self.group if group is None else group
        if seq is None:
            seq = self._next_seq.get((origin, g), 1)
        self._next_seq[(origin, g)] = max(self._next_seq.get((origin, g), 1), seq + 1)
        view = self._view.get((origin, g)) if view_id is None else view_id
        self.recorder.record(origin, "send", self._tick(), origin=origin, seq=seq, group=g,
                             size=0, deps=deps, view_id=view)
        return (g, origin, seq)

    def deliver(
        self,
        node: str,
        origin: str,
        seq: int,
        *,
        group: str | None = None,
        view_id: int | None = None,
        kind: str = "deliver",
    ) -> EventRow:
        g = self.group if group is None else group
        view = self._view.get((node, g)) if view_id is None else view_id
        return self.recorder.record(node, kind, self._tick(), origin=origin, seq=seq,
                                    group=g, size=0, view_id=view)

    def opt_deliver(self, node: str, origin: str, seq: int, *,
                    group: str | None = None) -> EventRow:
        return self.deliver(node, origin, seq, group=group, kind="opt_deliver")

    def deliver_all(self, nodes: Iterable[str], messages: Iterable[MessageKey]) -> None:
        """Each node delivers the messages in the given order, node by node."""
        ordered = list(messages)
        for node in nodes:
            for group, origin, seq in ordered:
                self.deliver(node, origin, seq, group=group)

    def view(self, node: str, view_id: int, members: Sequence[str], *,
             group: str | None = None) -> EventRow:
        g = self.group if group is None else group
        self._view[(node, g)] = view_id
        return self.recorder.record(node, "view", self._tick(), group=g, view_id=view_id,
                                    members=tuple(members))

    def crash(self, node: str) -> EventRow:
        return self.recorder.record(node, "crash", self._tick())

    def recover(self, node: str) -> EventRow:
        return self.recorder.record(node, "recover", self._tick())

    def rows(self) -> list[EventRow]:
        return self.recorder.rows()

    def run_info(self, guarantees: Iterable[str], *, ordering: str = "test",
                 nodes: int | None = None) -> RunInfo:
        return RunInfo(
            run_id=self.run_id,
            ordering=ordering,
            transport="mem://",
            nodes=len(self.recorder.nodes()) if nodes is None else nodes,
            payload_bytes=0,
            workload="handwritten",
            seed=None,
            faults=None,
            guarantees=tuple(guarantees),
            started_ns=0,
            duration_ns=self._now,
        )


# -- scenarios both checkers are held to --------------------------------------------------
# The in-memory and the Spark tests judge these same traces, so each is written once.

#: what an extended-virtual-synchrony run claims over a whole trace (OrderingSpec.claimed)
EVS_CLAIMS = ("integrity", "validity", "total", "virtual_synchrony")


def rejoined_then_crashed(run_id: str = "rejoin-crash", *, skip_after: bool = False,
                          skip_before: bool = False,
                          recover_again: bool = False) -> TraceBuilder:
    """n1..n3 deliver n1#1..3 in view 1; n3 is cut off while n1, n2 deliver n1#4..6 in
    views 2 and 3; n3 rejoins (crash, recover) in view 4 with n1#1..6 as state; all
    deliver n1#7, n1#8 and n2#1 (which depends on n1#8); then n3 really crashes (a last
    crash row, no view after it).

    `skip_after`: n3 never delivers n1#7 (a hole of its second incarnation).
    `skip_before`: n3 never delivered n1#2 in view 1 (a hole of its first incarnation,
    inside what its second one got as state). `recover_again`: n3 writes another crash
    and recover right after installing view 4, with no view row after them: its third
    incarnation, which delivers n1#7 on, keeps the admission of the second."""
    b = TraceBuilder(run_id)
    everyone = ["n1", "n2", "n3"]
    for node in everyone:
        b.view(node, 1, everyone)
    first = [b.send("n1") for _ in range(3)]
    b.deliver_all(["n1", "n2"], first)
    b.deliver_all(["n3"], [first[0], first[2]] if skip_before else first)
    for view, count in ((2, 2), (3, 1)):
        for node in ("n1", "n2"):
            b.view(node, view, ["n1", "n2"])
        b.deliver_all(["n1", "n2"], [b.send("n1") for _ in range(count)])
    b.crash("n3")
    b.recover("n3")
    for node in everyone:
        b.view(node, 4, everyone)
    if recover_again:
        b.crash("n3")
        b.recover("n3")
    later = [b.send("n1"), b.send("n1"), b.send("n2", deps={"n1": 8})]
    b.deliver_all(["n1", "n2"], later)
    b.deliver_all(["n3"], later[1:] if skip_after else later)
    b.crash("n3")
    return b


def rejoined_optimistic(run_id: str = "rejoin-opt", *, late: bool = False) -> TraceBuilder:
    """n1 and n2 opt-deliver then final-deliver n2#1 in view 1 (n2's own broadcast); n2 is
    cut off and rejoins (crash, recover) in view 2, where n2#1 comes again: n2
    opt-delivers it, then final-delivers it (a cut-off minority's duplicate, one
    INTEGRITY_DUPLICATE unit, and local order in each incarnation). `late`: its second
    opt-delivery comes after its second final one (a LOCAL_ORDER unit)."""
    b = TraceBuilder(run_id)
    for node in ("n1", "n2"):
        b.view(node, 1, ["n1", "n2"])
    m = b.send("n2")
    for node in ("n1", "n2"):
        b.opt_deliver(node, "n2", 1)
        b.deliver(node, "n2", 1)
    b.crash("n2")
    b.recover("n2")
    for node in ("n1", "n2"):
        b.view(node, 2, ["n1", "n2"])
    if not late:
        b.opt_deliver("n2", *m[1:])
    b.deliver("n2", *m[1:])
    if late:
        b.opt_deliver("n2", *m[1:])
    return b


def split_and_merge(
    run_id: str = "evs", *, right_order_swapped: bool = False, right_view: int = 11,
    skip_merge: str = "", crash: str = "",
) -> TraceBuilder:
    """Four nodes in view 1 deliver n1#1 and n3#1; {n1,n2} go on in view 10 and {n3,n4}
    in `right_view`, each side delivering a message of its own; all merge into view 20
    and deliver n1#2 there. `right_order_swapped`: {n3,n4} delivered the view-1 messages
    the other way round; `skip_merge`: that node never installs the merge view; `crash`:
    that node crashes before the merge."""
    everyone, left, right = ("n1", "n2", "n3", "n4"), ("n1", "n2"), ("n3", "n4")
    b = TraceBuilder(run_id)
    for node in everyone:
        b.view(node, 1, everyone)
    first = [b.send("n1"), b.send("n3")]
    b.deliver_all(left, first)
    b.deliver_all(right, first[::-1] if right_order_swapped else first)
    for node in left:
        b.view(node, 10, left)
    for node in right:
        b.view(node, right_view, right)
    b.deliver_all(left, [b.send("n2")])
    b.deliver_all(right, [b.send("n4")])
    if crash:
        b.crash(crash)
    merged = [n for n in everyone if n not in (skip_merge, crash)]
    for node in merged:
        b.view(node, 20, everyone)
    b.deliver_all(merged, [b.send("n1")])
    return b


def tied_rows(seed: int, run_id: str | None = None) -> list[EventRow]:
    """Rows no writer gives but a trace may hold, drawn by seed, where a node's rows tie:
    deliveries of different messages (or one message twice) at one index and one t_ns,
    view rows at one t_ns (a private start beside the first group view, two views at
    once, one view listed two ways), and crash, recover and optimistic rows among them.
    Four nodes, causal deps, views 0..3. Every check has something to judge, and in any
    order of these rows both checkers must find the same (docs/checks.md, "Fine print")."""
    rng = random.Random(4000 + seed)
    run = f"tied-{seed}" if run_id is None else run_id
    nodes = ["n1", "n2", "n3", "n10"]
    rows: list[EventRow] = []
    sent: list[tuple[str, int]] = []
    for origin in nodes:
        for seq in range(1, rng.randint(1, 3) + 1):
            deps = ({o: rng.randint(0, 2) for o in rng.sample(nodes, 2)}
                    if rng.random() < 0.5 else None)
            rows.append(EventRow(run, origin, "send", origin, seq, "g", rng.randint(1, 4),
                                 None, 0, rng.choice([None, 1, 2]), deps))
            sent.append((origin, seq))
    for node in nodes:
        mine = rng.sample(sent, rng.randint(0, len(sent)))
        if mine and rng.random() < 0.3:
            mine.insert(rng.randrange(len(mine)), rng.choice(mine))  # one message twice
        index, t_ns = 0, rng.randint(1, 3)
        for origin, seq in mine:
            if index == 0 or rng.random() < 0.6:  # else: the previous index and t_ns again
                index += 1
                t_ns += rng.randint(0, 1)
            kind = "opt_deliver" if rng.random() < 0.1 else "deliver"
            rows.append(EventRow(run, node, kind, origin, seq, "g", t_ns, index, 0,
                                 rng.choice([None, 1, 2, 2, 3])))
        for _ in range(rng.randint(1, 4)):
            view = rng.choice([0, 1, 2, 2, 3])
            members = ((node,) if view == 0 or rng.random() < 0.1
                       else tuple(rng.sample(nodes, rng.randint(2, len(nodes)))))
            rows.append(EventRow(run, node, "view", None, None, "g", rng.randint(1, 4),
                                 rng.choice([None, 1, 1, 2]), None, view, None, None,
                                 None if rng.random() < 0.1 else members))
        if rng.random() < 0.3:
            crashed = rng.randint(2, 6)
            rows.append(EventRow(run, node, "crash", None, None, "g", crashed, None))
            if rng.random() < 0.5:
                rows.append(EventRow(run, node, "recover", None, None, "g",
                                     crashed + rng.randint(0, 1), None))
    return rows


def null_entries(run_id: str = "null-entries", *, deviant: bool = False) -> list[EventRow]:
    """A clean run whose nested columns hold nulls no writer gives (list<string> and
    map<string, int64> allow them): n2 lists view 1 as [null, n2, n1]; the joiner n3's
    private start lists [n3, null], so it is still its private start, and n3 is admitted
    in view 2 with n1#1 as state; n1#1 was sent with deps {n2: null} (no bound), n2#1
    with {n1: 1, n3: null}. A null entry names no node and no bound (docs/checks.md,
    "Fine print"): nothing is reported. `deviant`: n2 lists view 1 as [n1, null], one
    VIEW_CONSISTENCY unit."""
    b = TraceBuilder(run_id)
    b.view("n3", 0, ["n3"])
    for node in ("n1", "n2"):
        b.view(node, 1, ["n1", "n2"])
    first = b.send("n1")
    b.deliver_all(["n1", "n2"], [first])
    for node in ("n1", "n2", "n3"):
        b.view(node, 2, ["n1", "n2", "n3"])
    second = b.send("n2", deps={"n1": 1})
    b.deliver_all(["n1", "n2", "n3"], [second])
    listed: tuple[str | None, ...] = ("n1", None) if deviant else (None, "n2", "n1")
    nulls: dict[tuple[str, str, int | None], dict[str, Any]] = {
        ("n3", "view", 0): {"members": ("n3", None)},
        ("n2", "view", 1): {"members": listed},
        ("n1", "send", 1): {"deps": {"n2": None}},
        ("n2", "send", 1): {"deps": {"n1": 1, "n3": None}},
    }
    out = []
    for row in b.rows():
        key = (row.node, row.kind, row.view_id if row.kind == "view" else row.seq)
        out.append(replace(row, **nulls[key]) if key in nulls else row)
    return out
