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


def test_case_a_holds_until_leader_or_retry() -> None:
    ex = Executor()
    direct = Request("c1", 1, b"x", "tcp://127.0.0.1:1", path="direct")
    assert ex.on_frame(direct, leader=False) == (Action.HOLD, None)
    assert ex.on_frame(direct, leader=False) == (Action.PROPOSE, None)  # a retry
    assert ex.release_held() == []
    second = Request("c1", 2, b"y", "tcp://127.0.0.1:1", path="direct")
    assert ex.on_frame(second, leader=False) == (Action.HOLD, None)
    assert ex.on_frame(second, leader=True) == (Action.PROPOSE, None)
    third = Request("c1", 3, b"z", "tcp://127.0.0.1:1", path="direct")
    ex.on_frame(third, leader=False)
    assert ex.on_ordered(third) is Action.EXECUTE  # ordered: no longer held
    fourth = Request("c1", 4, b"w", "tcp://127.0.0.1:1", path="direct")
    ex.on_frame(fourth, leader=False)
    assert ex.release_held() == [fourth]  # this server became the leader
    assert ex.on_frame(fourth, leader=True) == (Action.WAIT, None)


def test_the_reply_cache_keeps_the_newest_bytes_and_joiners_get_ids_only() -> None:
    ex = Executor(cache_bytes=10)
    for rid in (1, 2, 3):
        ex.on_ordered(req(rid))
        ex.replied("c1", rid, True, b"12345")
    assert ex.cached("c1", 1) is None and ex.cached("c1", 3) == Cached(True, b"12345")
    assert ex.on_frame(req(1)) == (Action.WAIT, None)  # ran, its reply forgotten
    joiner = Executor()
    joiner.load(ex.export())
    assert joiner.on_ordered(req(2)) is Action.DUPLICATE
    assert joiner.on_frame(req(3)) == (Action.WAIT, None)


def test_a_refused_proposal_is_withdrawn_and_proposed_again() -> None:
    ex = Executor()
    assert ex.on_frame(req(1)) == (Action.PROPOSE, None)
    ex.withdraw(req(1))  # the group refused the broadcast (backpressure)
    assert ex.on_frame(req(1)) == (Action.PROPOSE, None)  # the retry: not a WAIT for ever
    assert ex.on_ordered(req(1)) is Action.EXECUTE
    ex.withdraw(req(1))  # ordered already: nothing to withdraw
    assert ex.on_ordered(req(1)) is Action.DUPLICATE
