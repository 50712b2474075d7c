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

from collections.abc import Iterable, Mapping, Sequence

from abcast.testing._facts import MessageKey
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
