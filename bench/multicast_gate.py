"""The reliable channel's per-multicast cost of the fragmentation size gate: one
`ReliableChannel` (fragmentation on, as in every stack) multicasts the same packet to
four peers, over and over, acks never coming (the window is opened wide and the
retransmission buffers emptied between runs). Printed: µs of CPU per multicast, best of
three runs, for a data packet (`SData`: its header's size is bounded by its type), a
small order packet and an order packet with 16 bodies (`SOrder`: no static bound, so the
gate measures its header's encoding, once per multicast since issue fragfix).

Usage: .venv/bin/python bench/multicast_gate.py [--multicasts N]
Nothing is asserted; compare runs made side by side (another tree: PYTHONPATH=its src).
"""

from __future__ import annotations

import argparse
import time

from abcast.codec import Packet
from abcast.events import MulticastRequested, ViewInstalled
from abcast.ids import View
from abcast.ordering.sequencer_wire import SData, SOrder
from abcast.reliability.channel import ChannelConfig, ReliableChannel

PEERS = ("b", "c", "d", "e")


def per_multicast(channel: ReliableChannel, packet: Packet, n: int) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.process_time()
        for i in range(n):
            channel.handle(MulticastRequested(PEERS, packet), i)
        best = min(best, (time.process_time() - start) / n * 1e6)
        for peer in PEERS:
            channel._out[peer].unacked.clear()
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--multicasts", type=int, default=20_000)
    n = parser.parse_args().multicasts
    channel = ReliableChannel("a", ChannelConfig(window=1 << 30, max_waiting=1 << 30))
    channel.decode_above([SData | SOrder])
    channel.handle(ViewInstalled(View(1, ("a", *PEERS))), 0)
    packets = {
        "SData, 64-byte payload": Packet((SData(1),), b"x" * 64),
        "SOrder, one id": Packet((SOrder(1, [("a", 1)], []),), b""),
        "SOrder, 16 bodies of 64 bytes": Packet(
            (SOrder(1, [("a", i) for i in range(1, 17)], [b"x" * 64] * 16),), b""),
    }
    for name, packet in packets.items():
        print(f"  multicast to {len(PEERS)}  {name:32} {per_multicast(channel, packet, n):6.2f} µs")


if __name__ == "__main__":
    main()
