"""Runs of rows (abcast.trace.columns, TraceRecorder.record_run): a batch's rows recorded
as one run and gathered column by column give exactly what the row-at-a-time path gives —
the same rows, the same indexes and t_ns, the same Arrow table byte for byte, the same
delivered prefixes — and a streamed trace of runs reads back as its rows."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from hypothesis import given, settings
from hypothesis import strategies as st

from abcast.trace import TraceRecorder, read_events
from abcast.trace.columns import EventColumns
from abcast.trace.recorder import DeliveredPrefix
from abcast.trace.rows import EventRow, MessageRun, events_to_table
from abcast.trace.stream import NodeTraceWriter, StreamingSink

_NODES = st.sampled_from(["n1", "n2", "n10"])
_NAMES = st.sampled_from(["n1", "n2", "n3", "ñ", ""])
_MAYBE_INT = st.none() | st.integers(-(2**40), 2**40)
_DEPS = st.none() | st.dictionaries(_NAMES, st.integers(0, 2**40), max_size=3)

_ROWS = st.builds(
    EventRow,
    run_id=st.just("r"), node=st.just("n1"),
    kind=st.sampled_from(["view", "crash", "recover", "net_send", "deliver"]),
    origin=st.none() | _NAMES, seq=_MAYBE_INT, group=st.none() | _NAMES,
    t_ns=st.integers(0, 2**62), index=_MAYBE_INT,
    size=st.none() | st.integers(0, 2**31 - 1), view_id=_MAYBE_INT, deps=_DEPS,
    peer=st.none() | _NAMES, members=st.none() | st.lists(_NAMES, max_size=4).map(tuple),
)
_RUNS = st.builds(
    MessageRun,
    run_id=st.just("r"), node=st.just("n1"),
    kind=st.sampled_from(["send", "deliver", "opt_deliver"]), origin=_NAMES,
    first_seq=st.integers(1, 2**40), group=st.none() | _NAMES, t_ns=st.integers(0, 2**62),
    first_index=st.integers(1, 2**40), sizes=st.lists(st.integers(0, 2**31 - 1), max_size=40),
    view_id=st.none() | st.integers(0, 2**40), deps=_DEPS,
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(_ROWS, _RUNS), max_size=12), st.integers(1, 3))
def test_columns_give_the_table_the_rows_give(items: list[EventRow | MessageRun],
                                              takes: int) -> None:
    """In several takes (fresh buffers each time) too."""
    rows: list[EventRow] = []
    tables: list[pa.Table] = []
    columns = EventColumns()
    for i, item in enumerate(items):
        if isinstance(item, MessageRun):
            columns.add_run(item)
            rows.extend(item.rows())
        else:
            columns.add(item)
            rows.append(item)
        if i % takes == 0:
            tables.append(columns.take())
    tables.append(columns.take())
    got = pa.concat_tables(tables)
    got.validate(full=True)
    assert got.equals(events_to_table(rows))
    assert len(columns) == 0


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(_NODES, st.sampled_from(["send", "deliver", "view"]),
                          st.integers(0, 50), st.integers(0, 4)), max_size=15))
def test_a_run_records_the_rows_its_messages_would_one_by_one(
    steps: list[tuple[str, str, int, int]],
) -> None:
    by_run, by_row = TraceRecorder("r"), TraceRecorder("r")
    streamed: list[EventRow] = []
    sunk = TraceRecorder("r", sink=streamed.append, keep_rows=False)
    for node, kind, t_ns, count in steps:
        if kind == "view":
            for rec in (by_run, by_row, sunk):
                rec.record(node, "view", t_ns, group="g", view_id=count, members=(node,))
            continue
        deps = {"n9": count} if kind == "send" else None
        sizes = list(range(count))
        for rec in (by_run, sunk):
            rec.record_run(node, kind, t_ns, origin="n5", first_seq=7, sizes=sizes,
                           group="g", view_id=2, deps=deps)
        for i, size in enumerate(sizes):
            by_row.record(node, kind, t_ns, origin="n5", seq=7 + i, group="g", size=size,
                          view_id=2, deps=deps)
    assert by_run.rows() == by_row.rows()
    assert len(by_run) == len(by_row) == len(sunk)
    assert sorted(streamed, key=lambda r: (r.node, r.t_ns)) == sorted(
        by_row.rows(), key=lambda r: (r.node, r.t_ns))


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["n1", "n2"]), st.integers(1, 30),
                          st.integers(0, 6)), max_size=20))
def test_a_noted_run_is_its_messages_noted_one_by_one(
    runs: list[tuple[str, int, int]],
) -> None:
    at_once, one_by_one = DeliveredPrefix(), DeliveredPrefix()
    for origin, first, count in runs:
        at_once.note_run(origin, first, count)
        for seq in range(first, first + count):
            one_by_one.note(origin, seq)
        assert at_once.deps("n0") == one_by_one.deps("n0")


def test_a_streamed_trace_of_runs_reads_back_as_its_rows(tmp_path: Path) -> None:
    sink = StreamingSink(tmp_path, "live", interval_s=0.05)
    rec = TraceRecorder("live", sink=sink, keep_rows=False)
    mirror = TraceRecorder("live")
    for r in (rec, mirror):
        r.record("n1", "view", 10, group="g", view_id=1, members=("n1", "n2"))
        r.record_run("n1", "send", 20, origin="n1", first_seq=1, sizes=[64] * 300,
                     group="g", view_id=1, deps={"n2": 0})
        r.record_run("n1", "deliver", 20, origin="n2", first_seq=1, sizes=[8, 9],
                     group="g", view_id=1)
        r.record_run("n2", "deliver", 5, origin="n1", first_seq=1, sizes=[64] * 300,
                     group="g", view_id=1)
    sink.close()
    assert read_events(tmp_path, "live") == mirror.rows()


def test_a_record_batch_holds_whole_runs(tmp_path: Path) -> None:
    """flush_every is reached inside a run: the run goes whole into that batch."""
    rec = TraceRecorder("live")
    run = rec.record_run("n1", "deliver", 1, origin="n2", first_seq=1, sizes=[1] * 5,
                         group="g", view_id=1)
    assert run is not None
    with NodeTraceWriter(tmp_path, "live", "n1", flush_every=3) as w:
        w.append_run(run)
        assert w.batches_written == 1
        w.append(EventRow("live", "n1", "crash", None, None, "g", 99, 1))
    assert read_events(tmp_path, "live") == [*run.rows(), EventRow(
        "live", "n1", "crash", None, None, "g", 99, 1)]
