"""The FIFO core: holdback by origin sequence number."""

from __future__ import annotations

import pytest

from abcast.codec import Packet
from abcast.effects import Deliver, Multicast
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.events import BroadcastRequested, Received, ViewInstalled
from abcast.ids import View
from abcast.ordering.fifo import Fifo
from abcast.ordering.unordered import UData, Unordered


def _fifo() -> Fifo:
    f = Fifo("n2")
    f.handle(ViewInstalled(View(1, ("n1", "n2", "n3"))), 0)
    return f


def test_holds_back_until_the_gap_fills() -> None:
    f = _fifo()
    got: list[Deliver] = []
    for seq in (3, 1, 4, 2):
        got += [e for e in f.handle(Received("n1", UData(seq), Packet((), b"%d" % seq)), 0)
                if isinstance(e, Deliver)]
    assert [(d.origin, d.seq, d.payload) for d in got] == [
        ("n1", 1, b"1"), ("n1", 2, b"2"), ("n1", 3, b"3"), ("n1", 4, b"4")]
    assert f.held() == 0


def test_own_broadcast_is_delivered_locally_and_multicast_to_the_others() -> None:
    f = _fifo()
    effects = f.handle(BroadcastRequested(1, b"hi"), 0)
    assert effects[0] == Deliver("n2", 1, b"hi")
    assert isinstance(effects[1], Multicast) and effects[1].to == ("n1", "n3")


def test_a_second_copy_from_a_peer_is_a_protocol_error() -> None:
    f = _fifo()
    f.handle(Received("n1", UData(1), Packet()), 0)
    with pytest.raises(RemoteProtocolError):
        f.handle(Received("n1", UData(1), Packet()), 0)


def test_broadcast_before_a_view_is_api_misuse() -> None:
    with pytest.raises(LocalProtocolError):
        Unordered("n1").handle(BroadcastRequested(1, b""), 0)
