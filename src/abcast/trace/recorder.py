"""`TraceRecorder`: the one place trace rows are made, used by the simulator and the real
runtime alike, so both produce rows that obey the same invariants.

Rules: the recorder owns the two derived columns. `index` is the 1-based position of the
row in its node's sequence of rows of that kind (for `deliver` rows: the delivery
position the checks use). `t_ns` is kept strictly increasing per node: a caller's t_ns
that is not larger than the node's previous one is bumped to previous + 1. The checks
(docs/checks.md, LOCAL_ORDER) compare t_ns of a node's `opt_deliver` and `deliver` rows and
rely on t_ns ordering all of a node's rows; two events in the same simulated microsecond,
or a wall clock that steps back, must not make that order ambiguous.

`record_run` records a run of message rows at once (abcast.trace.rows.MessageRun: one
origin's consecutive messages, sent or delivered as one batch, at t_ns, t_ns + 1, …): the
real runtime's path, whose cost is per batch, not per message. A sink with a `run` method
(`RunSink`, e.g. abcast.trace.stream.StreamingSink) gets the run as it is; any other sink
gets its rows one by one. A run's rows are exactly the rows `record` would have given for
its messages recorded one after another at the same moment.

`DeliveredPrefix` computes the `deps` of `send` rows for both drivers.

It knows nothing about files (abcast.trace.writer) or what the rows mean (abcast.checks).
Not thread-safe: one recorder belongs to one event loop or one simulator.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Mapping
from typing import Final, Protocol, runtime_checkable

from abcast.errors import LocalProtocolError
from abcast.ids import NodeId, sorted_nodes
from abcast.trace.rows import EventRow, MessageRun
from abcast.trace.schema import KINDS

#: kinds that are about one broadcast message and so need `origin` and `seq`
MESSAGE_KINDS: Final = frozenset({"send", "deliver", "opt_deliver"})
_KINDS: Final = frozenset(KINDS)


@runtime_checkable
class RunSink(Protocol):
    """A sink that takes runs whole (and single rows as any sink does)."""

    def __call__(self, row: EventRow) -> None: ...

    def run(self, run: MessageRun) -> None: ...


class _NodeLog:
    """What the recorder keeps per node."""

    __slots__ = ("counts", "last_t_ns", "rows")

    def __init__(self) -> None:
        self.rows: list[EventRow] = []
        self.counts: dict[str, int] = {}
        self.last_t_ns: int | None = None


class TraceRecorder:
    """Collects the trace rows of one run, for every node of the run.

    `sink`, when given, is called with every row as it is recorded (a streaming
    `NodeTraceWriter.append`, say); with `keep_rows=False` the recorder then keeps only
    its per-node counters, so a long real run does not hold its whole trace in memory.
    """

    def __init__(
        self,
        run_id: str,
        *,
        sink: Callable[[EventRow], None] | None = None,
        keep_rows: bool = True,
    ) -> None:
        if not run_id:
            raise LocalProtocolError("a TraceRecorder needs a non-empty run_id")
        if not keep_rows and sink is None:
            raise LocalProtocolError("keep_rows=False without a sink would drop every row")
        self.run_id = run_id
        self._sink = sink
        self._run_sink = sink.run if isinstance(sink, RunSink) else None
        self._keep_rows = keep_rows
        self._logs: dict[str, _NodeLog] = {}
        self._count = 0

    def record(
        self,
        node: str,
        kind: str,
        t_ns: int,
        *,
        origin: str | None = None,
        seq: int | None = None,
        group: str | None = None,
        size: int | None = None,
        view_id: int | None = None,
        deps: Mapping[str, int] | None = None,
        peer: str | None = None,
        members: tuple[str, ...] | list[str] | None = None,
    ) -> EventRow:
        """Record one event at `node` and return the row as stored (index assigned, t_ns
        possibly bumped). Raises LocalProtocolError for an unknown kind or a message row
        without origin/seq."""
        if kind not in _KINDS:
            raise LocalProtocolError(f"unknown trace kind {kind!r}; expected one of {KINDS}")
        if not node:
            raise LocalProtocolError("trace rows need a non-empty node")
        if kind in MESSAGE_KINDS and (origin is None or seq is None):
            raise LocalProtocolError(f"a {kind!r} row needs origin and seq (the message id)")
        if kind == "view" and view_id is None:
            raise LocalProtocolError("a 'view' row needs view_id")
        log = self._logs.get(node)
        if log is None:
            log = self._logs[node] = _NodeLog()
        if log.last_t_ns is not None and t_ns <= log.last_t_ns:
            t_ns = log.last_t_ns + 1
        log.last_t_ns = t_ns
        index = log.counts.get(kind, 0) + 1
        log.counts[kind] = index
        row = EventRow(
            run_id=self.run_id,
            node=node,
            kind=kind,
            origin=origin,
            seq=seq,
            group=group,
            t_ns=t_ns,
            index=index,
            size=size,
            view_id=view_id,
            # Copies: a caller's live vector clock must not change a recorded row.
            deps=None if deps is None else dict(deps),
            peer=peer,
            members=None if members is None else tuple(members),
        )
        self._count += 1
        if self._keep_rows:
            log.rows.append(row)
        if self._sink is not None:
            self._sink(row)
        return row

    def record_run(
        self,
        node: str,
        kind: str,
        t_ns: int,
        *,
        origin: str,
        first_seq: int,
        sizes: list[int],
        group: str | None,
        view_id: int | None,
        deps: Mapping[str, int] | None = None,
    ) -> MessageRun | None:
        """Record `len(sizes)` rows of a message kind at `node`: `origin`'s messages
        first_seq, first_seq + 1, … of these sizes, at t_ns, t_ns + 1, … (t_ns bumped as
        `record` bumps it). The run takes `sizes` as it is: do not change it afterwards.
        Returns the run (None for no sizes)."""
        if kind not in MESSAGE_KINDS:
            raise LocalProtocolError(f"a run is of a message kind {sorted(MESSAGE_KINDS)}, "
                                     f"not {kind!r}")
        if not node:
            raise LocalProtocolError("trace rows need a non-empty node")
        count = len(sizes)
        if not count:
            return None
        log = self._logs.get(node)
        if log is None:
            log = self._logs[node] = _NodeLog()
        last = log.last_t_ns
        if last is not None and t_ns <= last:
            t_ns = last + 1
        log.last_t_ns = t_ns + count - 1
        counts = log.counts
        first_index = counts.get(kind, 0) + 1
        counts[kind] = first_index + count - 1
        run = MessageRun(self.run_id, node, kind, origin, first_seq, group, t_ns, first_index,
                         sizes, view_id, None if deps is None else dict(deps))
        self._count += count
        if self._keep_rows:
            log.rows.extend(run.rows())
        if self._run_sink is not None:
            self._run_sink(run)
        elif self._sink is not None:
            for row in run.rows():
                self._sink(row)
        return run

    # ------------------------------------------------------------------ accessors

    def nodes(self) -> tuple[str, ...]:
        """Every node that recorded a row, in node order (n2 before n10)."""
        return sorted_nodes(list(self._logs))

    def rows_of(self, node: str) -> list[EventRow]:
        """The node's rows in recording order (which is also t_ns order)."""
        log = self._logs.get(node)
        return [] if log is None else list(log.rows)

    def rows(self) -> list[EventRow]:
        """All rows: node by node in node order, each node's in recording order."""
        return [row for node in self.nodes() for row in self._logs[node].rows]

    def count(self, node: str, kind: str) -> int:
        """How many `kind` rows `node` has recorded (the last index given out)."""
        log = self._logs.get(node)
        return 0 if log is None else log.counts.get(kind, 0)

    @property
    def keeps_rows(self) -> bool:
        return self._keep_rows

    def __len__(self) -> int:
        return self._count


class DeliveredPrefix:
    """Per origin, the highest k such that 1..k were delivered here (the `deps` of
    docs/design.md §6), computed exactly as the simulator does.

    What was delivered above a gap is kept as runs of consecutive numbers (sorted starts
    and their ends), not one entry per message: a gap that never fills (an origin's
    message a view change gave up, the origin going on) used to keep every later message
    of that origin for the rest of the run — the soak's RSS growth on long-lived members
    (issue #21). Memory is one run per gap."""

    __slots__ = ("_prefix", "_runs")

    def __init__(self) -> None:
        self._prefix: dict[NodeId, int] = {}
        #: per origin, above its prefix: (sorted run starts, their ends)
        self._runs: dict[NodeId, tuple[list[int], list[int]]] = {}

    def note(self, origin: NodeId, seq: int) -> None:
        self.note_run(origin, seq, 1)

    def above(self) -> int:
        """Runs kept for what was delivered above gaps, over all origins."""
        return sum(len(starts) for starts, _ in self._runs.values())

    def note_run(self, origin: NodeId, first: int, count: int) -> None:
        """`note` for origin's messages first … first + count - 1, in one step."""
        k = self._prefix.get(origin, 0)
        last = first + count - 1
        if last <= k:
            return  # nothing new (a message delivered twice: opt_deliver then deliver)
        first = max(first, k + 1)
        runs = self._runs.get(origin)
        if first > k + 1:
            if runs is None:
                runs = self._runs[origin] = ([], [])
            _add_to_runs(runs[0], runs[1], first, last)
            return
        k = last
        if runs is not None:
            starts, ends = runs
            while starts and starts[0] <= k + 1:  # runs the prefix now reaches
                k = max(k, ends[0])
                del starts[0], ends[0]
        self._prefix[origin] = k

    def deps(self, me: NodeId) -> dict[NodeId, int]:
        return {o: k for o, k in self._prefix.items() if k > 0 and o != me}


def _add_to_runs(starts: list[int], ends: list[int], lo: int, hi: int) -> None:
    """Add lo … hi to the runs (sorted, disjoint, not adjacent), merging every run it
    overlaps or touches."""
    i = bisect.bisect_left(ends, lo - 1)  # the first run ending at lo - 1 or later
    j = bisect.bisect_right(starts, hi + 1)  # past the last run starting by hi + 1
    if i < j:
        lo, hi = min(lo, starts[i]), max(hi, ends[j - 1])
    del starts[i:j], ends[i:j]
    starts.insert(i, lo)
    ends.insert(i, hi)
