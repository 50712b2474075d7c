"""Split and reassembly (abcast.reliability.fragments), any sizes, any arrival order,
duplicates: every packet comes back whole exactly once; the bounds hold, in bytes
stored, against any sequence of fragments peers may send while their links' marks move
on, and a refused fragment changes nothing; a fragment whose count disagrees with its
packet's is refused. Planted reassemblies that skip that last test, or keep a packet the
mark passed, are caught by the same properties. Two reliable
channels over a lossy, duplicating, reordering link hand every packet up once, whole."""

from __future__ import annotations

import contextlib
import random

import pytest
from hypothesis import Phase, given, settings
from hypothesis import strategies as st

from abcast.codec import Packet
from abcast.effects import CancelTimer, Effect, Send, SetTimer, Up
from abcast.errors import RemoteProtocolError
from abcast.events import Received, SendRequested, TimerFired, ViewInstalled
from abcast.ids import View
from abcast.ordering.sequencer_wire import SData, SOrder
from abcast.reliability.channel import ChannelConfig, ReliableChannel
from abcast.reliability.fragments import (
    UNBOUNDED,
    InnerCodec,
    Reassembly,
    SizeGate,
    encode_header,
    split,
    static_bound,
)

FAST = settings(max_examples=150, deadline=None)


@st.composite
def arrivals(draw: st.DrawFn) -> tuple[bytes, int, list[int]]:
    """A packet, a fragment size, and the order its fragments arrive in: every index at
    least once, some twice or more, any order."""
    data = draw(st.binary(min_size=0, max_size=5_000))
    chunk = draw(st.integers(1, 700))
    count = max(1, -(-len(data) // chunk))
    order = draw(st.permutations(range(count)))
    extra = draw(st.lists(st.integers(0, count - 1), max_size=count))
    mixed = list(order)
    for index in extra:  # duplicates, each inserted anywhere
        mixed.insert(draw(st.integers(0, len(mixed))), index)
    return data, chunk, mixed


@FAST
@given(arrivals())
def test_any_order_and_duplicates_give_the_packet_back_once_whole(
    case: tuple[bytes, int, list[int]],
) -> None:
    data, chunk, order = case
    parts = split(data, chunk)
    assert b"".join(p.payload for p in parts) == data
    assert all(len(p.payload) <= chunk for p in parts)
    assert [p.index for p in parts] == list(range(len(parts)))
    if len(parts) == 1:
        return  # one fragment: the channel sends it whole
    # exactly the packet's reservation (count × chunk): the sender's own test
    reassembly = Reassembly(max_bytes=len(parts) * chunk, max_partial=1, chunk=chunk)
    done: list[tuple[int, bytes]] = []
    seen: set[int] = set()
    for step, index in enumerate(order):
        whole = reassembly.add("a", 7, index, len(parts), parts[index].payload)
        seen.add(index)
        if whole is not None:
            done.append((step, whole))
            break  # past completion the channel's sequence numbers drop duplicates
    assert done and done[0][1] == data
    assert seen == set(range(len(parts)))  # it completed on the last new fragment
    assert reassembly.held() == 0 and reassembly.partial("a") == 0


Fragmentish = tuple[str, int, int, int, int, int]  # sender, first, index, count, size, step


FRAGMENTS = st.lists(st.tuples(st.sampled_from("abcd"), st.integers(0, 4),
                             st.integers(0, 5), st.integers(2, 5), st.integers(0, 80),
                             st.integers(0, 4)), max_size=100)


@FAST
@given(FRAGMENTS, st.integers(1, 12), st.integers(1, 3), st.integers(1, 100))
def test_the_bounds_hold_a_refusal_changes_nothing_an_open_packet_is_never_refused(
    fragments: list[Fragmentish], chunks: int, max_partial: int, chunk: int,
) -> None:
    _bounds_hold(Reassembly, fragments, chunks * chunk, max_partial, chunk)


class KeepsWhatCannotComplete(Reassembly):
    """Planted bug, the first version's: a packet the link's mark passed stays reserved
    (and the next lowest opens on top)."""

    def settle(self, sender: str, low: int) -> int:
        state = self._senders.get(sender)
        if state is not None:
            state.low = max(state.low, low)
        return 0


def test_the_planted_reassembly_that_keeps_what_cannot_complete_is_caught() -> None:
    @settings(max_examples=2_000, deadline=None, database=None, report_multiple_bugs=False,
              phases=(Phase.generate,))  # caught is enough: no shrinking
    @given(FRAGMENTS, st.integers(1, 12), st.integers(1, 3), st.integers(1, 100))
    def prop(fragments: list[Fragmentish], chunks: int, max_partial: int,
             chunk: int) -> None:
        _bounds_hold(KeepsWhatCannotComplete, fragments, chunks * chunk, max_partial, chunk)

    with pytest.raises(AssertionError):
        prop()


def _bounds_hold(kind: type[Reassembly], fragments: list[Fragmentish], max_bytes: int,
                 max_partial: int, chunk: int) -> None:
    """Any fragments, honest sizes or not, while each link's `low` moves on (its sender's
    other packets, or holes given up): what is stored never exceeds what is reserved,
    and that never exceeds the worst case the docs state."""
    guest_bytes = max_bytes // 3  # a and b are members; c and d guests, sharing this
    reassembly = kind(max_bytes, max_partial, total_bytes=max_bytes * 3 // 2,
                      guest_bytes=guest_bytes, chunk=chunk)
    reassembly.members = frozenset("ab")
    lows = dict.fromkeys("abcd", 1)
    opened: dict[tuple[str, int], int] = {}  # (sender, first) -> count, while under way
    for sender, offset, drawn, count, size_pick, step in fragments:
        lows[sender] = low = lows[sender] + step
        first = low + offset - 1  # below low (lost), at it (the lowest) or above
        index = drawn % count
        if size_pick < 60:  # what an honest sender sends
            size = chunk if index < count - 1 else 1 + size_pick % chunk
        else:  # any size: an empty fragment 0, a larger last one...
            size = size_pick - 60
        reassembly.settle(sender, low)
        for key in [k for k, c in opened.items() if k[0] == sender and k[1] + c <= low]:
            del opened[key]  # all its numbers went by: it can never complete
        before = [(reassembly.held(p), reassembly.partial(p), reassembly.stored(p))
                  for p in "abcd"]
        key = (sender, first)
        try:
            whole = reassembly.add(sender, first, index, count, bytes(size), low)
        except RemoteProtocolError:
            assert [(reassembly.held(p), reassembly.partial(p), reassembly.stored(p))
                    for p in "abcd"] == before
            # liveness: an honest fragment of a packet under way is never refused
            assert not (opened.get(key) == count and size_pick < 60)
            continue
        opened.setdefault(key, count)
        if whole is not None:
            del opened[key]
        for peer in "abcd":
            assert reassembly.stored(peer) <= reassembly.held(peer)
            assert reassembly.partial(peer) <= max_partial + 1  # + the lowest
        for member in "ab":
            assert reassembly.held(member) <= 2 * max_bytes
        assert reassembly.guests_held() <= 2 * guest_bytes
        assert reassembly.held() <= max_bytes * 3 // 2 + 2 * max_bytes + guest_bytes
    reassembly.forget(frozenset({"b"}))
    assert reassembly.held("a") == 0 and reassembly.partial("a") == 0


class AcceptsAnyCount(Reassembly):
    """Planted bug: a fragment whose count disagrees with its packet's is taken."""

    def check(self, sender: str, first: int, index: int, count: int, size: int,
              low: int = 0, lowest_opens: bool = True) -> None:
        state = self._senders.get(sender)
        part = None if state is None else state.partial.get(first)
        super().check(sender, first, index, part.count if part else count, size, low,
                      lowest_opens)


def _mismatch_property(kind: type[Reassembly]) -> None:
    @settings(max_examples=300, deadline=None, database=None, report_multiple_bugs=False)
    @given(st.binary(min_size=2, max_size=400), st.integers(1, 100), st.data())
    def prop(data: bytes, chunk: int, draw: st.DataObject) -> None:
        parts = split(data, chunk)
        if len(parts) < 2:
            return
        reassembly = kind(max_bytes=10_000, max_partial=4, chunk=chunk)
        forged_count = draw.draw(st.integers(2, 8).filter(lambda c: c != len(parts)))
        forged_index = draw.draw(st.integers(0, forged_count - 1))
        at = draw.draw(st.integers(1, len(parts) - 1))  # after fragment `at - 1`
        results = []
        for index in range(len(parts)):
            if index == at:
                with contextlib.suppress(RemoteProtocolError):
                    results.append(reassembly.add("a", 1, forged_index, forged_count,
                                                  b"\xff" * chunk))
            with contextlib.suppress(RemoteProtocolError):
                results.append(reassembly.add("a", 1, index, len(parts), parts[index].payload))
        # Whatever the forger sent, nothing but the honest packet is ever handed up.
        assert all(r is None or r == data for r in results)
        assert data in results

    prop()


def test_a_fragment_whose_count_disagrees_is_refused() -> None:
    _mismatch_property(Reassembly)


def test_the_planted_reassembly_that_takes_any_count_is_caught() -> None:
    with pytest.raises(AssertionError):
        _mismatch_property(AcceptsAnyCount)


@FAST
@given(st.binary(max_size=3_000), st.lists(st.tuples(st.text(max_size=64).filter(bool),
                                                     st.integers(1, 2**62)), max_size=30))
def test_the_inner_frame_decodes_to_the_same_packet(
    payload: bytes, ids: list[tuple[str, int]],
) -> None:
    codec = InnerCodec("a", [SOrder])
    packet = Packet((SOrder(1, ids, [payload]),), payload)
    assert codec.decode("a", codec.encode(packet)) == packet
    with pytest.raises(RemoteProtocolError):
        codec.decode("b", codec.encode(packet))  # someone else's packet
    with pytest.raises(RemoteProtocolError):
        codec.decode("a", codec.encode(packet)[:-1])


@FAST
@given(st.lists(st.integers(1, 2**62), min_size=1, max_size=5), st.binary(max_size=200))
def test_the_gate_adds_a_bounded_types_bound_and_an_unbounded_ones_encoding(
    seqs: list[int], payload: bytes,
) -> None:
    gate = SizeGate(room=10_000)
    codec = InnerCodec("n1", [SData | SOrder])
    packet = Packet((SData(seqs[0]),), payload)
    assert not gate.over(packet)
    assert gate.bounds[SData] == static_bound(SData)
    assert len(codec.encode(packet)) <= static_bound(SData) + len(payload) + 400
    order = Packet((SOrder(1, [("n1", s) for s in seqs], [payload]),), b"")
    assert static_bound(SOrder) == UNBOUNDED  # lists of bodies
    gate.room = len(encode_header(order.headers[0]))  # what the gate adds for it: its encoding
    assert not gate.over(order) and gate.bounds[SOrder] == 0
    gate.room -= 1
    assert gate.over(order)


@FAST
@given(st.lists(st.tuples(st.integers(1, 6), st.integers(0, 3), st.integers(1, 75)),
                max_size=80), st.integers(300, 900), st.integers(1, 3))
def test_making_room_drops_only_other_packets_and_then_the_fragment_fits(
    fragments: list[tuple[int, int, int]], max_bytes: int, max_partial: int,
) -> None:
    reassembly = Reassembly(max_bytes, max_partial, chunk=75)
    for first, index, last in fragments:
        size = 75 if index < 3 else last  # as its sender splits it
        reassembly.make_room("a", first * 4, 4)
        # never refused for room (a packet of 4 fragments of at most 75 bytes fits alone)
        reassembly.add("a", first * 4, index, 4, bytes(size))
        assert reassembly.held("a") <= max_bytes
        assert reassembly.partial("a") <= max_partial


@settings(max_examples=60, deadline=None)
@given(st.lists(st.integers(0, 9_000), min_size=1, max_size=12), st.integers(0, 2**32))
def test_over_a_lossy_link_every_packet_goes_up_once_whole(sizes: list[int], seed: int) -> None:
    """Two reliable channels, 2 KiB frames and a reassembly bound of about one of the
    largest packets (so fragments are refused for room all the time, as two flush-size
    packets are with the defaults): packets of any size cross a link that loses 10 %,
    duplicates 10 % and reorders (a seeded schedule); a refused fragment is dropped, as
    the runtime does; retransmission timers fire until everything is acked."""
    rng = random.Random(seed)
    config = ChannelConfig(ack_delay_us=100, rto_us=1_000, max_rto_us=4_000,
                           frame_bytes=2_048, window=32, reassembly_bytes=10_240)
    a, b = ReliableChannel("a", config), ReliableChannel("b", config)
    for channel in (a, b):
        channel.decode_above([SData | SOrder])
        channel.handle(ViewInstalled(View(1, ("a", "b"))), 0)
    sent = [Packet((SOrder(i + 1, [("a", i + 1)], [rng.randbytes(size)]),), b"")
            for i, size in enumerate(sizes)]
    wire: list[tuple[str, Send]] = []
    timers: dict[tuple[str, object], int] = {}

    def apply(node: str, effects: list[Effect]) -> list[Packet]:
        ups = []
        for e in effects:
            if isinstance(e, Send):
                wire.append((node, e))
            elif isinstance(e, SetTimer):
                timers[(node, e.key)] = e.at
            elif isinstance(e, CancelTimer):
                timers.pop((node, e.key), None)
            elif isinstance(e, Up):
                ups.append(e.packet)
        return ups

    got: list[Packet] = []
    now = 0
    for packet in sent:
        apply("a", a.handle(SendRequested("b", packet), now))
    for _ in range(2_000):
        if not wire and not timers:
            break
        now += 50
        rng.shuffle(wire)
        batch, wire[:] = list(wire), []
        for src, send in batch:
            if rng.random() < 0.1:
                continue  # lost
            dst, channel = ("b", b) if src == "a" else ("a", a)
            for _ in range(2 if rng.random() < 0.1 else 1):  # duplicated
                effects = channel.handle(Received(src, send.header, send.inner), now)
                ups = apply(dst, effects)
                got += ups if dst == "b" else []
        for (node, key), at in sorted(timers.items(), key=lambda kv: kv[1]):
            if at <= now:
                del timers[(node, key)]
                apply(node, (a if node == "a" else b).handle(TimerFired(key), now))
    assert sorted(got, key=lambda p: p.headers[0].first) == sent
    assert a.in_flight() == 0 and b._reassembly.held() == 0
