"""The NAK channel's fragments fit one datagram: over udp:// with `datagram_bytes=1400`
(the MTU-safe setting), every frame a stack sends for a 200 kB broadcast — each fragment
of the sequencer's data — is at most the transport's `datagram_frame_bytes`, so the
transport never cuts one into datagrams that are lost together. Without the datagram
bound (the planted variant: only max_frame_bytes, as before) a fragment spans ~45
datagrams. The default datagram size leaves the channel's 60,000-byte fragments as they
are."""

from __future__ import annotations

from abcast.effects import Transmit
from abcast.ids import View
from abcast.ordering.registry import OrderingOptions, build_stack, envelope_bytes
from abcast.runtime.stack_options import for_streams
from abcast.transport.udp import UdpTransport
from abcast.transport.wan import LatencyMatrix, WanTransport

MTU = "udp://239.255.9.9:7000?datagram_bytes=1400"


def _frames(options: OrderingOptions) -> list[bytes]:
    stack = build_stack("n2", "bank", "sequencer", View(1, ("n1", "n2", "n3")), options)
    stack.start(0)
    _, outputs = stack.broadcast(bytes(200_000), 10)
    return [o.data for o in outputs if isinstance(o, Transmit)]


def test_over_mtu_sized_datagrams_every_nak_fragment_is_one_datagram() -> None:
    udp = UdpTransport(MTU)
    room = udp.datagram_frame_bytes
    assert room < 1_400
    for envelope in (None, envelope_bytes("bank", "n2")):  # the largest, and this one
        options = for_streams(None, "udp", udp.max_frame_bytes, room, envelope)
        frames = _frames(options)
        assert len(frames) > 200_000 // room
        assert max(len(f) for f in frames) <= room
    # with the real envelope the fragments fill most of a datagram
    assert options.nak.frag_bytes > 0.75 * room
    # the largest packet the channel takes is not made smaller by the smaller fragments
    assert options.nak.frag_bytes * options.nak.max_fragments >= 20_000_000


def test_without_the_datagram_bound_fragments_span_many_datagrams() -> None:
    udp = UdpTransport(MTU)
    frames = _frames(for_streams(None, "udp", udp.max_frame_bytes))
    assert max(len(f) for f in frames) > 40 * udp.datagram_frame_bytes


def test_the_default_datagram_size_keeps_the_default_fragments() -> None:
    udp = UdpTransport("udp://239.255.9.9:7000")
    options = for_streams(None, "udp", udp.max_frame_bytes, udp.datagram_frame_bytes)
    assert options.nak.frag_bytes == OrderingOptions().nak.frag_bytes


def test_behind_the_wan_wrapper_the_datagram_bound_is_the_inner_transports() -> None:
    udp = UdpTransport(MTU)
    matrix = LatencyMatrix(("east",), ((0.2,),), nodes=(("a", "east"),))
    assert WanTransport(udp, matrix).datagram_frame_bytes == udp.datagram_frame_bytes
    assert WanTransport(UdpTransport("udp://127.0.0.1:0"), matrix).datagram_frame_bytes
