"""A prototype of the steady-state lane (docs/performance.md §4), to measure what a lane
in Python can buy — a measurement, not a protocol. `bench/lone_path.py --lane` installs
it in abcast's node processes; run alone, it counts the Python calls per message with
and without it (three nodes in one process, cProfile's call counts: deterministic, so
they mean something on a loaded machine too):

    .venv/bin/python bench/_lane_prototype.py

Rules: for a frame of a group whose stack is [detector, channel, membership(ordering)]
and a broadcast of such a group, the prototype does in one function what the stack and
the runtime do in many: the envelope and the headers decoded once; the detector's and
the channel's steady-state shortcuts (`pass_up`); the membership layer's steady check (a
member, not frozen, no membership header, a sender in the view) and straight to the
ordering's `handle`; the ordering's non-control `Multicast`s through the channel's and
the detector's `pass_down_each`/`pass_down`, encoded and written to each peer's socket
at once when its queue is empty (else through `Node.transmit`); its `Deliver`s through
the driver's `_deliver`, before the writes (the driver carries them out after its
packets: docs/performance.md §3 has both orders measured). Whatever leaves that path — a
shortcut refused, a membership packet, an effect of another kind — is routed as the
stack would from that layer on. What it skips: the transport's `deliver_all` loop and
`Node._on_frame`, the stack's event queue and routing, the driver's carry-out, and the
transport's send, cork and per-turn flush (so a turn's frames to one peer are not
coalesced: fine for a lone message, wrong under load). Correct for a fault-free run of
the sequencer; not tested against the stack beyond that, and never to be shipped as it
is."""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import sys
from collections import deque
from pathlib import Path
from typing import Any

from abcast.codec import Packet, decode_envelope, encode_frame
from abcast.effects import Deliver, Effect, Multicast
from abcast.events import BroadcastRequested, MulticastRequested, Received
from abcast.membership.wire import MEMBERSHIP_TYPES
from abcast.runtime.driver import GroupDriver
from abcast.transport._common import QueuedTransport
from abcast.transport._framing import PREFIX

#: frames and broadcasts that took the lane, and the times it handed over to the stack
COUNTS = {"frames": 0, "broadcasts": 0, "handed over": 0}


def _write(node: Any, dest: str, data: bytes) -> None:
    transport = node._transport
    channel = getattr(transport, "_channels", {}).get(dest)
    if (channel is not None and channel._conn is not None and not channel._peer.queue
            and not transport._corks):
        channel._conn.write(PREFIX.pack(len(data)) + data)
        transport.stats.frames_out += 1
        transport.stats.bytes_out += len(data)
        return
    node.transmit(dest, data)


def _hand_over(driver: Any, stack: Any, index: int, event: Any, now: int) -> None:
    """Route `event` from layer `index` on as the stack would, and carry it out."""
    out: list[Any] = []
    stack._drain(deque([(index, event)]), now, out)
    driver._apply(out)
    COUNTS["handed over"] += 1


def _emit(node: Any, driver: Any, stack: Any, effects: list[Effect], now: int) -> None:
    detector, channel, _ = stack.layers
    for effect in effects:  # deliveries first (the driver's own order is packets first)
        if type(effect) is Deliver:
            driver._deliver(effect)
    for effect in effects:
        if type(effect) is Deliver:
            continue
        if type(effect) is Multicast and not effect.control:
            packet = Packet((effect.header, *effect.inner.headers), effect.inner.payload)
            heads = channel.pass_down_each(effect.to, packet, now)
            if heads is None:
                _hand_over(driver, stack, 1, MulticastRequested(effect.to, packet), now)
                continue
            below = detector.pass_down(effect.to, now)
            for dest, head in zip(effect.to, heads, strict=True):
                _write(node, dest, encode_frame(stack.group, stack.node, Packet(
                    (below, head, *packet.headers), packet.payload)))
        else:
            raise RuntimeError(f"the lane prototype cannot route {effect!r}")
    driver._pressure = None


def _frame(node: Any, link: Any, data: bytes) -> bool:
    """The lane for one frame; False: not for the lane (nothing changed)."""
    env = decode_envelope(data)
    driver = node._groups.get(env.group)
    sender = env.sender
    if (driver is None or link.peer != sender or driver.closed or node.traffic is not None
            or len(driver.stack.layers) != 3):
        return False
    stack = driver.stack
    now = node.clock.now_us()
    headers = stack.codec.headers(env)
    detector, channel, membership = stack.layers
    if len(headers) < 3 or not detector.pass_up(sender, headers[0], now):
        return False
    if not channel.pass_up(sender, headers[1], now):
        _hand_over(driver, stack, 1, Received(sender, headers[1],
                                              Packet(headers[2:], env.payload)), now)
        return True
    s, header = membership.s, headers[2]
    event = Received(sender, header, Packet(headers[3:], env.payload))
    if (s.frozen or s.status not in ("member", "leaving") or type(header) in MEMBERSHIP_TYPES
            or s.view is None or sender not in s.view.members):
        _hand_over(driver, stack, 2, event, now)
        return True
    s.now = now
    _emit(node, driver, stack, membership.ordering.handle(event, now), now)
    COUNTS["frames"] += 1
    return True


_deliver_all = QueuedTransport.deliver_all
_flush = GroupDriver.flush


def deliver_all(self: Any, link: Any, frames: list[bytes]) -> bool:
    on_frame = self._on_frame
    node = getattr(on_frame, "__self__", None)
    if self._state != "open" or not link.alive or node is None:
        return _deliver_all(self, link, frames)
    for frame in frames:
        self.stats.frames_in += 1
        self.stats.bytes_in += len(frame)
        if not _frame(node, link, frame):
            on_frame(link, frame)
        if not link.alive or self._state != "open":
            return False
    return True


def flush(self: Any) -> None:
    stack = self.stack
    if (self._delivering is not None or self.host.recorder is not None
            or self.meter is not None or len(stack.layers) != 3 or self.closed):
        return _flush(self)
    membership = stack.layers[2]
    s = membership.s
    if s.frozen or s.status not in ("member", "leaving"):
        return _flush(self)
    batch = self._batcher.take()
    if batch is None:
        return None
    now = self.host.clock.now_us()
    seq = stack._next_seq
    stack._next_seq += 1
    s.now = now
    _emit(self.host, self, stack,
          membership.ordering.handle(BroadcastRequested(seq, batch.data), now), now)
    COUNTS["broadcasts"] += 1
    return _flush(self)  # anything queued meanwhile


def install() -> None:
    QueuedTransport.deliver_all = deliver_all  # type: ignore[method-assign]
    GroupDriver.flush = flush  # type: ignore[method-assign]


def _calls_per_message(messages: int) -> tuple[float, float]:
    """All Python calls, and abcast's, per message of micro_hotpath's lone run."""
    sys.path.insert(0, str(Path(__file__).parent))
    import micro_hotpath

    def count(n: int) -> tuple[int, int]:
        profiler = cProfile.Profile()

        async def run() -> None:
            profiler.enable()
            await micro_hotpath._lone_once("sequencer", n, 0.0003)
            profiler.disable()

        asyncio.run(run())
        stats = pstats.Stats(profiler).stats  # type: ignore[attr-defined]
        every = sum(row[1] for row in stats.values())
        ours = sum(row[1] for key, row in stats.items() if "/abcast/" in key[0])
        return every, ours

    small, large = count(messages), count(3 * messages)
    per = 1.1 * 2 * messages  # (micro_hotpath adds a tenth to warm up)
    return (large[0] - small[0]) / per, (large[1] - small[1]) / per


if __name__ == "__main__":
    before = _calls_per_message(500)
    install()
    after = _calls_per_message(500)
    print(f"Python calls per message (3 nodes, one process): {before[0]:.0f} without the"
          f" lane, {after[0]:.0f} with it; abcast's own {before[1]:.0f} → {after[1]:.0f}"
          f" ({COUNTS})")
