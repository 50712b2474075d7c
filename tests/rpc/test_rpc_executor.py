"""The at-most-once table (abcast.rpc.executor), row by row."""

from __future__ import annotations

from abcast.rpc.executor import Action, Cached, Executor
from abcast.rpc.wire import Request


def req(rid: int, client: str = "c1") -> Request:
    return Request(client, rid, b"x", "tcp://127.0.0.1:1")


def test_rows() -> None:
    ex = Executor(capacity=2)
    assert ex.on_frame(req(1)) == (Action.PROPOSE, None)
    assert ex.on_frame(req(1)) == (Action.WAIT, None)  # our copy is in flight
    assert ex.on_ordered(req(1)) is Action.EXECUTE
    assert ex.on_frame(req(1)) == (Action.WAIT, None)  # ordered, reply not yet known
    ex.replied("c1", 1, True, b"v")
    assert ex.on_frame(req(1)) == (Action.RESEND, Cached(True, b"v"))
    assert ex.on_ordered(req(1)) is Action.DUPLICATE
    assert ex.on_ordered(req(1, "c2")) is Action.EXECUTE  # another client's rid 1
    assert ex.on_ordered(req(2)) is Action.EXECUTE
    assert len(ex) == 2 and ex.cached("c1", 1) is None  # the oldest was forgotten
    assert (ex.stats.executed, ex.stats.duplicates, ex.stats.resent) == (3, 1, 1)
