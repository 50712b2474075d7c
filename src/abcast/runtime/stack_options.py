"""The options a runtime group's stack is built with, and how the registry keeps them.

Rules: `for_streams` turns a group's ordering options into the ones its stack runs with
over a real transport (STREAM_CHANNEL for the default channel, the NAK channel over
udp://, the transport's frame and datagram bounds); `encode_options`/`decode_options` are
the bytes the registry keeps for a dynamic group, so joiners build the same stack as its
creator. Pure functions of their arguments (abcast.runtime.group calls them; so do the
ticket server and the tests of the fast paths).
"""

from __future__ import annotations

import dataclasses
from typing import Final

import msgspec

from abcast.codec import NOT_A_MESSAGE
from abcast.errors import ConfigError
from abcast.ordering.registry import OrderingOptions
from abcast.reliability.channel import ChannelConfig

#: Over real transports (TCP, ZeroMQ, gRPC, Pyro, in-memory) a frame is lost only with
#: its connection, while a busy process can stall for tens of ms: the simulator's 60 ms
#: retransmission floor would fire on queueing delay alone (measured: retransmission
#: storms at ~2.5 k msgs/s). A group that keeps the default channel gets a 1 s floor,
#: acks that ride on the packets it sends anyway (a lone sequencer message then costs
#: its nodes no standalone ack frame to write, wake up for and read), and one 10 ms tick
#: for all links in place of a delayed-ack and a retransmission timer per link: with a
#: 1 s floor an ack only frees the retransmission buffer and opens the window, so it may
#: wait 10–20 ms, and a packet sent or received sets and cancels no timer (per-link
#: timers cost a lone message ~8 timer effects for the group, each carried through the
#: stack and the driver: bench/micro_hotpath.py --only lone, docs/performance.md).
STREAM_CHANNEL: Final = ChannelConfig(ack_delay_us=20_000, rto_us=1_000_000,
                                      max_rto_us=4_000_000, piggyback_acks=True,
                                      tick_us=10_000)


def for_streams(
    options: OrderingOptions | None, scheme: str = "tcp", frame_bytes: int | None = None,
    datagram_bytes: int | None = None, envelope: int | None = None,
) -> OrderingOptions:
    """The options a runtime stack is built with: the default channel becomes
    STREAM_CHANNEL; a channel configured on purpose is kept. Over udp:// the default
    channel (multicast=None) is the NAK channel: one multicast per packet, NAK repair; an
    explicit "reliable" keeps the ack-based channel there. `frame_bytes` (the transport's
    max_frame_bytes) caps the channel's: a larger packet leaves in fragments;
    `datagram_bytes` (its datagram_frame_bytes) cuts the NAK channel's fragments to one
    datagram each, for frames of `envelope` bytes of envelope (registry.envelope_bytes)."""
    opts = options or OrderingOptions()
    if scheme == "udp" and opts.multicast is None:
        opts = dataclasses.replace(opts, multicast="nak")
    elif opts.channel == ChannelConfig():
        opts = dataclasses.replace(opts, channel=STREAM_CHANNEL)
    if frame_bytes is None and datagram_bytes is None:
        return opts
    return opts.within_frames(frame_bytes, datagram_bytes, envelope)


def encode_options(options: OrderingOptions | None) -> bytes:
    return msgspec.msgpack.encode(options or OrderingOptions())


def decode_options(data: bytes) -> OrderingOptions:
    if not data:
        return OrderingOptions()
    try:
        return msgspec.msgpack.decode(data, type=OrderingOptions)
    except NOT_A_MESSAGE as exc:
        raise ConfigError(f"the registry holds unreadable ordering options: {exc}") from None
