"""The FIFO core: holdback by origin sequence number."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

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


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(1, 1_000_000), max_size=300), st.integers(1, 64))
def test_a_flooding_peer_never_holds_more_than_max_ahead(seqs: list[int], bound: int) -> None:
    # A hostile origin sends whatever numbers it likes: the holdback stays under the
    # bound, what is further ahead is refused (one RemoteProtocolError each), and what
    # is delivered is the origin's gapless prefix.
    f = Fifo("n2", max_ahead=bound)
    f.handle(ViewInstalled(View(1, ("n1", "n2"))), 0)
    delivered: list[int] = []
    refused = 0
    for seq in seqs:
        try:
            effects = f.handle(Received("n1", UData(seq), Packet((), b"")), 0)
        except RemoteProtocolError:
            refused += 1
            continue
        delivered += [e.seq for e in effects if isinstance(e, Deliver)]
        assert f.held() < bound
    assert delivered == list(range(1, len(delivered) + 1))
    assert f.refused_far <= refused


def test_past_the_bound_a_message_is_refused_and_the_gap_still_fills() -> None:
    f = Fifo("n2", max_ahead=4)
    f.handle(ViewInstalled(View(1, ("n1", "n2"))), 0)
    for seq in (2, 3, 4):
        assert f.handle(Received("n1", UData(seq), Packet((), b"")), 0) == []
    with pytest.raises(RemoteProtocolError, match="holdback bound"):
        f.handle(Received("n1", UData(5), Packet((), b"")), 0)
    assert f.held() == 3 and f.refused_far == 1
    got = f.handle(Received("n1", UData(1), Packet((), b"")), 0)
    assert [e.seq for e in got if isinstance(e, Deliver)] == [1, 2, 3, 4]
