"""The one conformance suite every transport must pass (tcp, mem, zmq, grpc, pyro, udp),
and tcp with a group secret (MAC or AEAD frames) and with mutual TLS.

Properties: per-link FIFO with no loss on a healthy link and no duplicates ever; large
frames arrive intact; six nodes all-to-all keep every link's order; after a peer
restarts (same or new address) and add_peer is called again, traffic resumes and
stays in order; a dropped link is counted once and the sender comes back; close stops
callbacks at once and makes the API refuse; drain holds the sender at the high-water
mark and nothing is lost. Waits are bounded, never timed.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from transport_harness import (
    SCHEMES,
    SECURED,
    Inbox,
    Nodes,
    bind_url,
    number_of,
    numbered,
    options_for,
    run,
    strictly_increasing,
)

from abcast.errors import ConfigError, LocalProtocolError
from abcast.transport import Link, Transport, TransportOptions, transport_from_url
from abcast.transport._common import QueuedTransport

pytestmark = [pytest.mark.timeout(60), pytest.mark.parametrize("scheme", SCHEMES + SECURED)]

MiB = 1024 * 1024


def test_frames_on_one_link_arrive_in_order(scheme: str) -> None:
    count = 2000

    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            a, b = await _pair(nodes, scheme, inbox)
            sizes = [8 + (seq * 37) % 3000 for seq in range(count)]
            for seq in range(count):
                a.send("b", numbered(seq, sizes[seq]))
                if seq % 250 == 249:
                    await a.drain()  # several loop turns: several batches
            await inbox.wait_until(lambda: len(inbox.got("a")) >= count, f"{count} frames")
            # Threaded senders learn of success after the receiver has the frames.
            await inbox.wait_until(lambda: a.stats.frames_out >= count, "the sender's count")
            assert inbox.got("a") == list(range(count))
            assert inbox.sizes["a"] == sizes
            assert inbox.corrupt == 0
            assert a.stats.frames_out == count and b.stats.frames_in == count
            assert a.stats.bytes_out == sum(sizes) == b.stats.bytes_in
            assert b.stats.bad_frames == 0

    run(main)


def test_large_frames_arrive_intact(scheme: str) -> None:
    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            a, _b = await _pair(nodes, scheme, inbox)
            plan = [(0, 4 * MiB), (1, 10), (2, 4 * MiB), (3, 4 * MiB - 1), (4, 100)]
            for seq, size in plan:
                a.send("b", numbered(seq, size))
            await inbox.wait_until(lambda: len(inbox.got("a")) >= len(plan), "large frames")
            assert inbox.got("a") == [seq for seq, _ in plan]
            assert inbox.sizes["a"] == [size for _, size in plan]
            assert inbox.corrupt == 0

    run(main)


def test_six_nodes_all_to_all_keep_each_link_in_order(scheme: str) -> None:
    names = [f"n{i}" for i in range(1, 7)]
    per_link = 300

    async def main() -> None:
        inboxes = {name: Inbox() for name in names}
        async with Nodes() as nodes:
            transports = {name: await nodes.start(scheme, name, inboxes[name]) for name in names}
            for name, transport in transports.items():
                for other in names:
                    if other != name:
                        transport.add_peer(other, transports[other].address)
            for seq in range(per_link):
                for name, transport in transports.items():
                    for other in names:
                        if other != name:
                            transport.send(other, numbered(seq, 24))
                if seq % 100 == 99:
                    for transport in transports.values():
                        await transport.drain()
            for name in names:
                inbox = inboxes[name]
                senders = [o for o in names if o != name]
                await inbox.wait_until(_has_all(inbox, senders, per_link), f"all frames at {name}")
                for sender in senders:
                    assert inbox.got(sender) == list(range(per_link)), (sender, name)
                assert set(inbox.seqs) == set(senders)  # every link names its sender

    run(main)


@pytest.mark.parametrize("where", ["same-address", "new-address"])
def test_traffic_resumes_in_order_after_peer_restart(scheme: str, where: str) -> None:
    async def main() -> None:
        first, second = Inbox(), Inbox()
        async with Nodes() as nodes:
            a = await nodes.start(scheme, "a", Inbox())
            b = await nodes.start(scheme, "b", first)
            a.add_peer("b", b.address)
            for seq in range(100):
                a.send("b", numbered(seq))
            await first.wait_until(lambda: len(first.got("a")) >= 100, "first epoch")
            old_address = b.address
            await b.close()
            for seq in range(100, 150):  # sent while b is down: may be lost, never reordered
                a.send("b", numbered(seq))
            await a.drain()
            url = old_address if where == "same-address" else None
            b2 = await nodes.start(scheme, "b", second, url=url)
            if where == "same-address":
                assert b2.address == old_address
            a.add_peer("b", b2.address)
            # Probe until the new connection carries frames, then every later frame counts.
            await _probe(a, second, 1000)
            block = list(range(5000, 5200))
            for s in block:
                a.send("b", numbered(s))
            await second.wait_until(
                lambda: bool(second.got("a")) and second.got("a")[-1] == block[-1], "second epoch"
            )
            got = second.got("a")
            assert strictly_increasing(got), "frames were reordered or duplicated"
            assert got[-len(block) :] == block
            assert first.got("a") == list(range(100))
            assert a.stats.reconnects >= 1

    run(main)


def test_reconnecting_to_a_live_peer_never_reorders(scheme: str) -> None:
    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            a, b = await _pair(nodes, scheme, inbox)
            seq = 0
            for round_ in range(5):
                for _ in range(400):
                    a.send("b", numbered(seq, 64))
                    seq += 1
                await asyncio.sleep(0)
                a.add_peer("b", b.address)  # a fresh connection while frames are in flight
                await asyncio.sleep(0.005 * round_)
            await _probe(a, inbox, 10_000)
            block = list(range(20_000, 20_300))
            for s in block:
                a.send("b", numbered(s))
            await inbox.wait_until(lambda: inbox.got("a")[-1:] == block[-1:], "the last block")
            got = inbox.got("a")
            assert strictly_increasing(got), "a reconnect reordered or duplicated frames"
            assert got[-len(block) :] == block
            assert b.stats.bad_frames == 0

    run(main)


def test_a_restarted_sender_is_heard_again(scheme: str) -> None:
    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            b = await nodes.start(scheme, "b", inbox)
            a = await nodes.start(scheme, "a", Inbox())
            a.add_peer("b", b.address)
            for seq in range(100):
                a.send("b", numbered(seq))
            await inbox.wait_until(lambda: len(inbox.got("a")) >= 100, "the first incarnation")
            await a.close()
            a2 = await nodes.start(scheme, "a", Inbox())  # same node id, new incarnation
            a2.add_peer("b", b.address)
            for seq in range(1000, 1100):
                a2.send("b", numbered(seq))
            await inbox.wait_until(lambda: inbox.got("a")[-1:] == [1099], "the second incarnation")
            assert inbox.got("a") == list(range(100)) + list(range(1000, 1100))

    run(main)


def test_every_frame_is_sent_or_discarded_never_silently_lost(scheme: str) -> None:
    """frames_out + discarded_frames + still queued == accepted by send(), always."""

    async def main() -> None:
        async with Nodes() as nodes:
            gone = await nodes.start(scheme, "gone", Inbox())
            dead_address = gone.address
            await gone.close()
            a = await nodes.start(scheme, "a", Inbox())
            a.add_peer("down", dead_address)
            for seq in range(50):
                a.send("down", numbered(seq))
            await asyncio.sleep(0.2)  # a few failed connection attempts
            assert a.buffered("down") + a.stats.frames_out * 16 >= 50 * 16
            a.remove_peer("down")
            a.remove_peer("down")  # a no-op
            assert a.buffered("down") == 0
            with pytest.raises(LocalProtocolError):
                a.send("down", b"removed")
            inbox = Inbox()
            await inbox.wait_until(
                lambda: a.stats.frames_out + a.stats.discarded_frames == 50, "the accounting"
            )
            a.add_peer("down2", dead_address)
            for seq in range(30):
                a.send("down2", numbered(seq))
            await asyncio.sleep(0.05)
            await a.close()
            await inbox.wait_until(
                lambda: a.stats.frames_out + a.stats.discarded_frames == 80, "the accounting"
            )

    run(main)


def test_dropped_link_is_counted_and_the_sender_comes_back(scheme: str) -> None:
    poison = 50

    async def main() -> None:
        inbox = Inbox()

        def drop_poison(link: Link, frame: bytes) -> None:
            if number_of(frame) == poison:
                link.drop("planted bad frame")
                link.drop("second call is a no-op")

        inbox.hook = drop_poison
        async with Nodes() as nodes:
            a, b = await _pair(nodes, scheme, inbox)
            for seq in range(100):
                a.send("b", numbered(seq))
            await inbox.wait_until(lambda: poison in inbox.got("a"), "the poison frame")
            await _probe(a, inbox, 1000)
            block = list(range(5000, 5100))
            for s in block:
                a.send("b", numbered(s))
            await inbox.wait_until(lambda: inbox.got("a")[-1] == block[-1], "frames after the drop")
            got = inbox.got("a")
            assert strictly_increasing(got)
            assert got[: poison + 1] == list(range(poison + 1))
            assert not any(poison < s < 100 for s in got), "frames after the drop on that link"
            assert got[-len(block) :] == block
            assert b.stats.bad_frames == 1 and b.stats.dropped_connections == 1
            assert a.stats.reconnects >= 1

    run(main)


def test_close_stops_callbacks_and_refuses_the_api(scheme: str) -> None:
    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            unstarted = transport_from_url(bind_url(scheme), options_for(scheme))
            with pytest.raises(LocalProtocolError):
                unstarted.send("b", b"x")
            a = await nodes.start(scheme, "a", Inbox())
            b = await nodes.start(scheme, "b", inbox)
            with pytest.raises(LocalProtocolError):
                a.send("b", b"unknown peer")
            with pytest.raises(LocalProtocolError):
                await b.start("b", inbox)
            a.add_peer("b", b.address)
            with pytest.raises(ConfigError):
                a.add_peer("c", "nope://x")
            too_big = TransportOptions().max_frame_bytes + 1
            with pytest.raises(LocalProtocolError):
                a.send("b", bytes(too_big))
            for seq in range(3000):
                a.send("b", numbered(seq, 200))
            await inbox.wait_until(lambda: len(inbox.got("a")) >= 10, "some frames")
            inbox.closing = True
            await b.close()
            for seq in range(3000, 3100):  # the peer is gone: a still queues without error
                a.send("b", numbered(seq))
            await asyncio.sleep(0.3)
            assert inbox.calls_after_close == 0
            with pytest.raises(LocalProtocolError):
                b.send("a", b"after close")
            with pytest.raises(LocalProtocolError):
                b.add_peer("a", a.address)
            await b.drain()  # returns at once
            await b.close()  # idempotent
            assert strictly_increasing(inbox.got("a"))
            await a.close()
            with pytest.raises(LocalProtocolError):
                a.send("b", b"after close")
            assert a.stats.discarded_frames >= 0

    run(main)


def test_drain_holds_the_sender_at_the_high_water_mark_and_loses_nothing(scheme: str) -> None:
    high = 256 * 1024
    frame_size = 16 * 1024
    count = 600  # 9.6 MiB, far above the mark

    async def main() -> None:
        inbox = Inbox()

        def slow(link: Link, frame: bytes) -> None:
            if number_of(frame) % 16 == 0:
                time.sleep(0.001)  # a busy receiver (blocks its loop like real work would)

        inbox.hook = slow
        options = TransportOptions(high_water_bytes=high, batch_bytes=64 * 1024)
        async with Nodes() as nodes:
            a = await nodes.start(scheme, "a", Inbox(), options)
            b = await nodes.start(scheme, "b", inbox, options)
            a.add_peer("b", b.address)
            for seq in range(count):
                a.send("b", numbered(seq, frame_size))
            assert a.buffered("b") > high  # nothing can have left yet: no loop turn passed
            await a.drain()
            assert a.buffered("b") <= high
            more = 0
            for seq in range(count, 2 * count):
                a.send("b", numbered(seq, frame_size))
                if a.buffered("b") > high:
                    more += 1
                    await a.drain("b")
                    assert a.buffered("b") <= high
            assert more > 0
            await inbox.wait_until(lambda: len(inbox.got("a")) >= 2 * count, "every frame")
            assert inbox.got("a") == list(range(2 * count))
            assert inbox.corrupt == 0

    run(main)


async def _pair(nodes: Nodes, scheme: str, inbox: Inbox) -> tuple[Transport, Transport]:
    """Nodes a and b started, b a peer of a; b's frames go to `inbox`."""
    a = await nodes.start(scheme, "a", Inbox())
    b = await nodes.start(scheme, "b", inbox)
    a.add_peer("b", b.address)
    return a, b


def _has_all(inbox: Inbox, senders: list[str], count: int) -> Callable[[], bool]:
    return lambda: all(len(inbox.got(s)) >= count for s in senders)


async def _probe(sender: Transport, inbox: Inbox, first: int) -> None:
    """Send numbers first, first+1, ... to b until one arrives: a connection is up."""
    for seq in range(first, first + 2000):
        if inbox.got("a") and inbox.got("a")[-1] >= first:
            return
        sender.send("b", numbered(seq))
        await asyncio.sleep(0.01)
    raise AssertionError(f"no probe arrived; last frames: {inbox.got('a')[-5:]}")


def test_close_waits_for_a_start_or_a_close_under_way(scheme: str) -> None:
    """close() while start() or another close() is under way returns only once that is
    over, and the transport ends closed: nothing still listening, nothing left running."""

    async def main() -> None:
        async with Nodes() as nodes:
            a = transport_from_url(bind_url(scheme), options_for(scheme))
            nodes.started.append(a)
            starting = asyncio.ensure_future(a.start("a", Inbox()))
            await asyncio.sleep(0)  # start() is under way (done already, where it never waits)
            await a.close()
            assert starting.done(), "close() returned while start() was still binding"
            if starting.exception() is not None:
                assert isinstance(starting.exception(), LocalProtocolError)
            assert isinstance(a, QueuedTransport)
            assert not a.is_open, "start() opened the transport after close() returned"
            with pytest.raises(LocalProtocolError):
                a.add_peer("b", bind_url(scheme))

            b = await nodes.start(scheme, "b", Inbox())
            c = await nodes.start(scheme, "c", Inbox())
            b.add_peer("c", c.address)
            b.send("c", numbered(0))
            first = asyncio.ensure_future(b.close())
            await asyncio.sleep(0)  # the first close() is under way
            await b.close()
            assert first.done(), "a second close() returned before the first was over"

    run(main)


def test_a_peer_removed_and_added_again_is_heard_again(scheme: str) -> None:
    """remove_peer then add_peer of the same node (it left the view and came back) opens
    a connection that the receiver takes as newer than every earlier one from this
    sender, even one it has not yet seen close: a connection number restarting at 1
    read as a late old connection there, and everything sent on it was discarded."""

    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            a, b = await _pair(nodes, scheme, inbox)
            await _probe(a, inbox, 0)
            a.add_peer("b", b.address)  # a second connection
            await _probe(a, inbox, 1000)
            a.remove_peer("b")
            a.add_peer("b", b.address)
            await _probe(a, inbox, 5000)
            got = inbox.got("a")
            assert strictly_increasing(got), "frames were reordered or duplicated"

    run(main)
