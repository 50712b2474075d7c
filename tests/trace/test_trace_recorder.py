"""TraceRecorder: index is the 1-based position per node and kind, t_ns is strictly
increasing per node, misuse is refused, rows can stream to a sink."""

from __future__ import annotations

import pytest

from abcast.errors import LocalProtocolError
from abcast.trace import EventRow, TraceRecorder


def test_index_counts_per_node_and_kind() -> None:
    rec = TraceRecorder("r")
    rec.record("n1", "send", 10, origin="n1", seq=1, group="g")
    rec.record("n1", "deliver", 20, origin="n1", seq=1, group="g")
    rec.record("n2", "deliver", 21, origin="n1", seq=1, group="g")
    rec.record("n1", "send", 30, origin="n1", seq=2, group="g")
    rec.record("n1", "deliver", 40, origin="n1", seq=2, group="h")  # other group, same count
    assert [(r.kind, r.index) for r in rec.rows_of("n1")] == [
        ("send", 1), ("deliver", 1), ("send", 2), ("deliver", 2)]
    assert [(r.kind, r.index) for r in rec.rows_of("n2")] == [("deliver", 1)]
    assert rec.count("n1", "deliver") == 2
    assert rec.count("n3", "deliver") == 0


def test_t_ns_is_bumped_to_stay_strictly_increasing_per_node() -> None:
    rec = TraceRecorder("r")
    a = rec.record("n1", "crash", 1_000)
    b = rec.record("n1", "recover", 1_000)  # same instant
    c = rec.record("n1", "net_send", 500, peer="n2")  # clock stepped back
    d = rec.record("n2", "net_recv", 500, peer="n1")  # other nodes are independent
    e = rec.record("n1", "net_send", 5_000, peer="n2")
    assert [a.t_ns, b.t_ns, c.t_ns, e.t_ns] == [1_000, 1_001, 1_002, 5_000]
    assert d.t_ns == 500


def test_rows_are_in_node_order_then_recording_order() -> None:
    rec = TraceRecorder("r")
    for node in ("n10", "n2", "n1"):
        rec.record(node, "crash", 1)
        rec.record(node, "recover", 2)
    assert rec.nodes() == ("n1", "n2", "n10")
    assert [(r.node, r.kind) for r in rec.rows()] == [
        ("n1", "crash"), ("n1", "recover"), ("n2", "crash"), ("n2", "recover"),
        ("n10", "crash"), ("n10", "recover")]
    assert len(rec) == 6
    assert rec.rows_of("n7") == []


def test_stored_row_is_a_copy_of_the_callers_mutable_arguments() -> None:
    rec = TraceRecorder("r")
    clock = {"n2": 3}
    members = ["n1", "n2"]
    row = rec.record("n1", "send", 1, origin="n1", seq=1, group="g", deps=clock)
    view = rec.record("n1", "view", 2, group="g", view_id=1, members=members)
    clock["n2"] = 9
    members.append("n3")
    assert row.deps == {"n2": 3}
    assert view.members == ("n1", "n2")
    assert rec.rows_of("n1")[0] == row


@pytest.mark.parametrize(
    ("kind", "kwargs", "match"),
    [
        ("delivered", {}, "unknown trace kind"),
        ("deliver", {"seq": 1}, "origin and seq"),
        ("send", {"origin": "n1"}, "origin and seq"),
        ("opt_deliver", {}, "origin and seq"),
        ("view", {"members": ("n1",)}, "view_id"),
    ],
)
def test_bad_rows_are_refused(kind: str, kwargs: dict[str, object], match: str) -> None:
    rec = TraceRecorder("r")
    with pytest.raises(LocalProtocolError, match=match):
        rec.record("n1", kind, 1, **kwargs)  # type: ignore[arg-type]
    assert len(rec) == 0
    assert rec.count("n1", kind) == 0


def test_recorder_misuse() -> None:
    with pytest.raises(LocalProtocolError):
        TraceRecorder("")
    with pytest.raises(LocalProtocolError, match="sink"):
        TraceRecorder("r", keep_rows=False)
    with pytest.raises(LocalProtocolError):
        TraceRecorder("r").record("", "crash", 1)


def test_sink_sees_every_row_and_keep_rows_false_keeps_only_counters() -> None:
    seen: list[EventRow] = []
    rec = TraceRecorder("r", sink=seen.append, keep_rows=False)
    rec.record("n1", "deliver", 5, origin="n2", seq=1, group="g")
    rec.record("n1", "deliver", 5, origin="n2", seq=2, group="g")
    assert [(r.index, r.t_ns) for r in seen] == [(1, 5), (2, 6)]
    assert rec.rows() == []
    assert rec.count("n1", "deliver") == 2
    assert len(rec) == 2
