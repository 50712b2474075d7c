"""The matrix core step by step (two or three stacks through a packet pool) and its open
channel: a write waits for the row minimum, a silent member's NOPE releases it (after
`fast_us` when adaptive, after a whole period when fixed), idle heartbeats slow down,
the open channel lets a joiner and its contact talk before a view holds both and lets a
removed member go after lingering, and malformed peer input is refused."""

from __future__ import annotations

import itertools

import pytest

from abcast.codec import Packet
from abcast.effects import Send, Up
from abcast.errors import RemoteProtocolError
from abcast.events import Received, SendRequested, TimerFired, ViewInstalled
from abcast.ids import MsgId, View
from abcast.membership import Membership
from abcast.ordering._matrix_wire import MatrixClock, MatrixWire, MxWrite
from abcast.ordering._open_channel import OpenChannel
from abcast.ordering.matrix import Matrix, MatrixConfig
from abcast.ordering.registry import OrderingOptions
from abcast.reliability.channel import RData, ReliableChannel
from abcast.testing.pool import PacketPool

BEAT_KEY = (2, ("beat",))  # the matrix slot (detector, channel, membership) and its timer


def _pool(nodes: int, config: MatrixConfig) -> PacketPool:
    return PacketPool.of("matrix", nodes, options=OrderingOptions(matrix=config))


def _matrix(pool: PacketPool, node: str) -> Matrix:
    slot = pool.stacks[node].top
    assert isinstance(slot, Membership) and isinstance(slot.ordering, Matrix)
    return slot.ordering


def _deliver_all(pool: PacketPool) -> None:
    while pool.in_flight:
        pool.deliver(0)


@pytest.mark.parametrize("adaptive", [True, False])
def test_a_write_waits_for_every_members_stamp(adaptive: bool) -> None:
    config = MatrixConfig(adaptive=adaptive, period_us=300_000, fast_us=1_000)
    pool = _pool(3, config)
    pool.broadcast("n1", b"w")
    _deliver_all(pool)
    # n2 and n3 have the write but have sent nothing: nobody may execute it yet.
    assert all(not d for d in pool.deliveries.values())
    assert _matrix(pool, "n1").bound() == 0
    beats = [t for t in pool.timers() if t.key == BEAT_KEY and t.node != "n1"]
    expected = 1_000 if adaptive else 300_000
    assert [t.at for t in beats] == [expected, expected]
    for timer in beats:
        pool.fire(timer)
    _deliver_all(pool)
    assert all(d == [MsgId("n1", 1)] for d in pool.deliveries.values())


def test_idle_heartbeats_slow_down_to_the_ceiling() -> None:
    config = MatrixConfig(period_us=100_000, idle_max_us=400_000)
    pool = _pool(2, config)
    beats = []
    for _ in range(6):
        timer = next(t for t in pool.timers() if t.node == "n1" and t.key == BEAT_KEY)
        pool.fire(timer)
        beats.append(timer.at)
        _deliver_all(pool)
    gaps = [b - a for a, b in itertools.pairwise(beats)]
    assert gaps == [200_000, 400_000, 400_000, 400_000, 400_000]
    assert _matrix(pool, "n1").nopes_sent == 6


def test_the_open_channel_lets_strangers_talk_until_a_view_removes_them() -> None:
    inner = Packet(("x",), b"")
    joiner = OpenChannel("j")
    joiner.handle(ViewInstalled(View(0, ("j",))), 0)
    plain = ReliableChannel("j")
    plain.handle(ViewInstalled(View(0, ("j",))), 0)
    assert [e for e in plain.handle(SendRequested("c", inner), 0) if isinstance(e, Send)] == []
    assert any(isinstance(e, Send) and e.to == "c"
               for e in joiner.handle(SendRequested("c", inner), 0))

    contact = OpenChannel("c", linger_us=1_000)
    contact.handle(ViewInstalled(View(1, ("c", "d"))), 0)
    assert any(isinstance(e, Up) for e in contact.handle(Received("j", RData(1), inner), 0))
    assert "j" in contact.guests()
    contact.handle(ViewInstalled(View(2, ("c", "j"))), 10)  # d removed: it lingers
    assert contact.lingering() == {"d"} and contact.guests() == frozenset()
    assert any(isinstance(e, Send) for e in contact.handle(SendRequested("d", inner), 20))
    contact.handle(TimerFired(("linger", "d")), 1_010)
    assert contact.lingering() == frozenset() and "d" not in contact.guests()  # forgotten
    # d may come back (a member cut off, rejoining): a guest again, on its old numbers
    assert any(isinstance(e, Send) for e in contact.handle(SendRequested("d", inner), 1_020))
    assert "d" in contact.guests()


def test_malformed_matrix_input_is_refused() -> None:
    clock = MatrixClock("n1")
    with pytest.raises(RemoteProtocolError, match="not square"):
        clock.merge(MatrixWire(["n1", "n2"], [[1, 2]]), frozenset({"n1", "n2"}))
    clock.merge(MatrixWire(["n1", "n2"], [[9, 9], [3, 4]]), frozenset({"n1", "n2"}))
    assert clock.known("n2", "n1") == 3
    assert clock.direct("n2") is None  # its own row is never taken from others
    layer = Matrix("n1")
    layer.handle(ViewInstalled(View(1, ("n1", "n2"))), 0)
    wire = MatrixWire(["n1", "n2"], [[0, 0], [0, 5]])
    layer.handle(Received("n2", MxWrite(1, 1, 5, 1, wire), Packet((), b"a")), 0)
    # a packet of an older view is dropped (the flush settled that view)
    assert layer.handle(Received("n2", MxWrite(0, 2, 3, 2, wire), Packet((), b"b")), 0) == []
    with pytest.raises(RemoteProtocolError, match="went backwards"):
        layer.handle(Received("n2", MxWrite(1, 2, 3, 2, wire), Packet((), b"b")), 0)
