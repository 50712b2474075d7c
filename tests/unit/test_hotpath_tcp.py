"""tcp:// write path: a lone frame goes out at once, a burst is coalesced, order holds.

The transport writes the first frame of a loop turn to an idle socket from inside
`send` (a lone message waits for no loop turn at any hop) and coalesces what follows in
that turn into one write at the next turn; between `cork` and `uncork` "the first frame"
is everything sent meanwhile (one write at the outermost `uncork`), and `send_run` writes
a step's run as `cork`, `send` each and `uncork` would. Observed through the
public counters: `stats.frames_out` counts frames handed to the wire. Whatever the
pattern of bursts, corks and loop turns, the receiver gets every frame once, in order.
"""

from __future__ import annotations

import asyncio
import random
from collections.abc import Awaitable, Callable

import pytest

from abcast.transport import Link, Transport, transport_from_url

pytestmark = pytest.mark.timeout(60)

WAIT_S = 20.0


def numbered(seq: int) -> bytes:
    return seq.to_bytes(8, "big") + bytes([seq % 251]) * 24


class Inbox:
    def __init__(self) -> None:
        self.seqs: list[int] = []
        self.intact = True
        self.arrived = asyncio.Event()

    def __call__(self, link: Link, frame: bytes) -> None:
        seq = int.from_bytes(frame[:8], "big")
        self.intact &= frame == numbered(seq)
        self.seqs.append(seq)
        self.arrived.set()

    async def wait_for(self, count: int) -> None:
        async with asyncio.timeout(WAIT_S):
            while len(self.seqs) < count:
                self.arrived.clear()
                await self.arrived.wait()


async def connected_pair(inbox: Inbox) -> tuple[Transport, Transport]:
    receiver = transport_from_url("tcp://127.0.0.1:0")
    sender = transport_from_url("tcp://127.0.0.1:0")
    address = await receiver.start("r", inbox)
    await sender.start("s", lambda link, frame: None)
    sender.add_peer("r", address)
    sender.send("r", numbered(0))  # waits in the queue until the connection is up
    await inbox.wait_for(1)
    await sender.drain()
    return sender, receiver


def on_a_fresh_turn(body: Callable[[Transport, Inbox], Awaitable[None]]) -> None:
    """Run `body(sender, inbox)` on a connected pair, from a fresh loop turn."""

    async def main() -> None:
        inbox = Inbox()
        sender, receiver = await connected_pair(inbox)
        try:
            await asyncio.sleep(0)
            await body(sender, inbox)
        finally:
            await sender.close()
            await receiver.close()

    asyncio.run(main())


def test_a_lone_frame_is_on_the_wire_when_send_returns_and_a_burst_costs_one_more_turn() -> None:
    async def body(sender: Transport, inbox: Inbox) -> None:
        before = sender.stats.frames_out
        sender.send("r", numbered(1))
        assert sender.stats.frames_out == before + 1  # written from inside send
        for seq in range(2, 11):
            sender.send("r", numbered(seq))
        assert sender.stats.frames_out == before + 1  # the rest of the turn waits
        await asyncio.sleep(0)
        assert sender.stats.frames_out == before + 10  # all of it, at the next turn
        await inbox.wait_for(11)
        assert inbox.seqs == list(range(11)) and inbox.intact

    on_a_fresh_turn(body)


def test_corked_frames_leave_together_at_the_outermost_uncork() -> None:
    async def body(sender: Transport, inbox: Inbox) -> None:
        before = sender.stats.frames_out
        sender.cork()
        sender.send("r", numbered(1))
        sender.cork()  # nested
        sender.send("r", numbered(2))
        sender.uncork()
        sender.send("r", numbered(3))
        assert sender.stats.frames_out == before  # held while corked
        sender.uncork()
        assert sender.stats.frames_out == before + 3  # all three, in this turn
        sender.send("r", numbered(4))
        assert sender.stats.frames_out == before + 3  # the turn's rest waits, as ever
        await asyncio.sleep(0)
        assert sender.stats.frames_out == before + 4
        await inbox.wait_for(5)
        assert inbox.seqs == list(range(5)) and inbox.intact

    on_a_fresh_turn(body)


def test_a_run_is_written_as_cork_send_uncork_would_write_it() -> None:
    """`send_run` (one step's frames): on a fresh turn its frames are on the wire when it
    returns — one frame (written at once by the fast path), or a peer's several (one
    write, as under a cork) — and a run later in the same turn waits for the next turn."""

    async def body(sender: Transport, inbox: Inbox) -> None:
        before = sender.stats.frames_out
        sender.send_run([("r", numbered(1))])
        assert sender.stats.frames_out == before + 1  # written from inside send_run
        sender.send_run([("r", numbered(2))])
        assert sender.stats.frames_out == before + 1  # the turn's rest waits, as ever
        await asyncio.sleep(0)
        assert sender.stats.frames_out == before + 2
        await asyncio.sleep(0)
        sender.send_run([("r", numbered(3)), ("r", numbered(4))])
        assert sender.stats.frames_out == before + 4  # a peer twice: one write, now
        await inbox.wait_for(5)
        assert inbox.seqs == list(range(5)) and inbox.intact

    on_a_fresh_turn(body)


@pytest.mark.parametrize("seed", range(3))
def test_any_pattern_of_bursts_and_turns_arrives_once_in_order(seed: int) -> None:
    rng = random.Random(seed)

    async def main() -> None:
        inbox = Inbox()
        sender, receiver = await connected_pair(inbox)
        try:
            seq = 0
            for _ in range(300):
                corked = rng.random() < 0.3
                if corked:
                    sender.cork()
                for _ in range(rng.choice((1, 1, 2, 5, 40))):
                    seq += 1
                    sender.send("r", numbered(seq))
                if corked:
                    sender.uncork()
                for _ in range(rng.choice((0, 1, 1, 2))):
                    await asyncio.sleep(0)
            await inbox.wait_for(seq + 1)
            await asyncio.sleep(0.01)  # nothing more, nothing twice
            assert inbox.seqs == list(range(seq + 1)) and inbox.intact
            assert sender.stats.frames_out == seq + 1 and sender.buffered("r") == 0
        finally:
            await sender.close()
            await receiver.close()

    asyncio.run(main())
