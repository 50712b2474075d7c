"""The transport conformance suite: the checks every transport must pass, for anyone's
transport (the built-in ones run them in tests/transport/test_transport_conformance.py).

Use (docs/transports.md, "Writing your own transport")::

    from abcast.testing.transport_conformance import check_transport
    from abcast.testing.transport_harness import UrlMaker

    check_transport(UrlMaker("mine://127.0.0.1:0"))   # after register_scheme("mine", …)

A maker (`TransportMaker`: one method, `make(url=None, options=None)`, returning an
unstarted transport) is all a check needs. Each `check_*` function takes a maker, runs
on a fresh event loop (`transport_harness.run`) and raises AssertionError when the
transport breaks the contract of abcast.transport.base; `check_transport` runs them all
(`CHECKS`, in order), except those named in `skip` with a reason.

Properties: per-link FIFO with no loss on a healthy link and no duplicates ever; large
frames arrive intact; six nodes all-to-all keep every link's order; a step's run of
frames (`send_run`) arrives as its sends would; after a peer
restarts (same or new address) and add_peer is called again, traffic resumes and stays
in order; reconnecting to a live peer never reorders; a restarted sender is heard
again; every frame send accepted is sent, discarded or still buffered, never silently
lost; a dropped link is counted once and the sender comes back; close stops callbacks
at once and makes the API refuse; drain holds the sender at the high-water mark and
nothing is lost; close waits for a start or a close under way; a peer removed and added
again is heard again. Waits are bounded, never timed (transport_harness.WAIT_S). The
node ids the checks use are `NODE_IDS` (a maker that maps nodes to something, such as
the WAN emulator's sites, needs them).
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Callable, Mapping
from typing import Final

from abcast.errors import ConfigError, LocalProtocolError
from abcast.testing.transport_harness import (
    Inbox,
    Nodes,
    TransportMaker,
    number_of,
    numbered,
    raises,
    run,
    strictly_increasing,
)
from abcast.transport import Link, Transport, TransportOptions

MiB: Final = 1024 * 1024
#: every node id a check starts a transport as
NODE_IDS: Final = ("a", "b", "c", "gone", "down", "down2", "n1", "n2", "n3", "n4", "n5", "n6")

Check = Callable[[TransportMaker], None]


def check_frames_on_one_link_arrive_in_order(maker: TransportMaker) -> None:
    """2,000 frames of mixed sizes on one healthy link arrive all, once, in order,
    intact; the stats count each frame and byte once on each side."""
    count = 2000

    async def main() -> None:
        inbox = Inbox()
        async with Nodes(maker) as nodes:
            a, b = await _pair(nodes, inbox)
            sizes = [8 + (seq * 37) % 3000 for seq in range(count)]
            for seq in range(count):
                a.send("b", numbered(seq, sizes[seq]))
                if seq % 250 == 249:
                    await a.drain()  # several loop turns: several batches
            # FIFO and no loss: once the last frame is there, every frame is.
            await inbox.wait_until(lambda: inbox.has("a", count - 1), "the last frame")
            got = inbox.got("a")
            want = list(range(count))
            assert got == want, f"lost, reordered or duplicated: {_first_difference(got, want)}"
            # Threaded senders learn of success after the receiver has the frames.
            await inbox.wait_until(lambda: a.stats.frames_out >= count, "the sender's count")
            assert inbox.sizes["a"] == sizes
            assert inbox.corrupt == 0
            assert a.stats.frames_out == count and b.stats.frames_in == count
            assert a.stats.bytes_out == sum(sizes) == b.stats.bytes_in
            assert b.stats.bad_frames == 0

    run(main)


def check_large_frames_arrive_intact(maker: TransportMaker) -> None:
    """Frames of 4 MiB (and one byte less) between small ones arrive whole, in order."""

    async def main() -> None:
        inbox = Inbox()
        async with Nodes(maker) as nodes:
            a, _b = await _pair(nodes, inbox)
            plan = [(0, 4 * MiB), (1, 10), (2, 4 * MiB), (3, 4 * MiB - 1), (4, 100)]
            for seq, size in plan:
                a.send("b", numbered(seq, size))
            await inbox.wait_until(lambda: inbox.has("a", len(plan) - 1), "large frames")
            assert inbox.got("a") == [seq for seq, _ in plan]
            assert inbox.sizes["a"] == [size for _, size in plan]
            assert inbox.corrupt == 0

    run(main)


def check_six_nodes_all_to_all_keep_each_link_in_order(maker: TransportMaker) -> None:
    """Six nodes each send 300 frames to each other: all 30 links complete, in order,
    each naming its sender (`link.peer`)."""
    names = [f"n{i}" for i in range(1, 7)]
    per_link = 300

    async def main() -> None:
        inboxes = {name: Inbox() for name in names}
        async with Nodes(maker) as nodes:
            transports = {name: await nodes.start(name, inboxes[name]) for name in names}
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
                await inbox.wait_until(_has_last(inbox, senders, per_link - 1),
                                       f"all frames at {name}")
                for sender in senders:
                    assert inbox.got(sender) == list(range(per_link)), (sender, name)
                assert set(inbox.seqs) == set(senders)  # every link names its sender

    run(main)


def check_runs_arrive_as_their_sends_would(maker: TransportMaker) -> None:
    """`send_run`: 600 runs of one step's frames to b and c (one frame, several peers,
    a peer more than once, some inside a `cork`), mixed with plain sends over many loop
    turns, arrive all, once, each link in order; the stats count each frame once."""
    steps = 600
    rng = random.Random(23)

    async def main() -> None:
        inboxes = {"b": Inbox(), "c": Inbox()}
        async with Nodes(maker) as nodes:
            a = await nodes.start("a", Inbox())
            for name, inbox in inboxes.items():
                a.add_peer(name, (await nodes.start(name, inbox)).address)
            sent = {"b": 0, "c": 0}

            def frame(node: str) -> tuple[str, bytes]:
                sent[node] += 1
                return node, numbered(sent[node] - 1, 8 + rng.randrange(200))

            for step in range(steps):
                corked = rng.random() < 0.2
                if corked:
                    a.cork()
                if rng.random() < 0.3:
                    node, data = frame(rng.choice("bc"))
                    a.send(node, data)
                a.send_run([frame(rng.choice("bc")) for _ in range(rng.choice((1, 1, 2, 3)))])
                if corked:
                    a.uncork()
                for _ in range(rng.choice((0, 1, 1, 2))):
                    await asyncio.sleep(0)
                if step % 200 == 199:
                    await a.drain()
            for name, inbox in inboxes.items():
                await inbox.wait_until(_has_last(inbox, ["a"], sent[name] - 1), f"{name}'s run")
                got, want = inbox.got("a"), list(range(sent[name]))
                assert got == want, f"{name}: {_first_difference(got, want)}"
                assert inbox.corrupt == 0
            total = sum(sent.values())
            await inbox.wait_until(lambda: a.stats.frames_out >= total, "the sender's count")
            assert a.stats.frames_out == total

    run(main)


def check_traffic_resumes_in_order_after_peer_restart_same_address(
    maker: TransportMaker,
) -> None:
    """The peer restarts at the address it had; add_peer again; traffic resumes."""
    _restart(maker, same_address=True)


def check_traffic_resumes_in_order_after_peer_restart_new_address(
    maker: TransportMaker,
) -> None:
    """The peer restarts at a new address; add_peer with it; traffic resumes."""
    _restart(maker, same_address=False)


def _restart(maker: TransportMaker, *, same_address: bool) -> None:
    """Frames sent while the peer is down may be lost, never reordered; once a probe
    arrives on the new connection, every later frame arrives, in order."""

    async def main() -> None:
        first, second = Inbox(), Inbox()
        async with Nodes(maker) as nodes:
            a = await nodes.start("a", Inbox())
            b = await nodes.start("b", first)
            a.add_peer("b", b.address)
            for seq in range(100):
                a.send("b", numbered(seq))
            await first.wait_until(lambda: first.has("a", 99), "first epoch")
            old_address = b.address
            await b.close()
            for seq in range(100, 150):  # sent while b is down: may be lost, never reordered
                a.send("b", numbered(seq))
            await a.drain()
            b2 = await nodes.start("b", second, url=old_address if same_address else None)
            if same_address:
                assert b2.address == old_address
            a.add_peer("b", b2.address)
            # Probe until the new connection carries frames, then every later frame counts.
            await _probe(a, second, 1000)
            await _block_arrives_last(a, second, range(5000, 5200), "second epoch")
            assert first.got("a") == list(range(100))
            assert a.stats.reconnects >= 1

    run(main)


def check_reconnecting_to_a_live_peer_never_reorders(maker: TransportMaker) -> None:
    """add_peer again (a fresh connection) while frames are in flight, five times:
    frames may be lost at each switch, never reordered or duplicated."""

    async def main() -> None:
        inbox = Inbox()
        async with Nodes(maker) as nodes:
            a, b = await _pair(nodes, inbox)
            seq = 0
            for round_ in range(5):
                for _ in range(400):
                    a.send("b", numbered(seq, 64))
                    seq += 1
                await asyncio.sleep(0)
                a.add_peer("b", b.address)  # a fresh connection while frames are in flight
                await asyncio.sleep(0.005 * round_)  # switch at different points of the flow
            await _probe(a, inbox, 10_000)
            await _block_arrives_last(a, inbox, range(20_000, 20_300), "the last block")
            assert b.stats.bad_frames == 0

    run(main)


def check_a_restarted_sender_is_heard_again(maker: TransportMaker) -> None:
    """The sender closes and a new transport starts as the same node id: the receiver
    takes its frames (a new incarnation is not a stale connection)."""

    async def main() -> None:
        inbox = Inbox()
        async with Nodes(maker) as nodes:
            b = await nodes.start("b", inbox)
            a = await nodes.start("a", Inbox())
            a.add_peer("b", b.address)
            for seq in range(100):
                a.send("b", numbered(seq))
            await inbox.wait_until(lambda: inbox.has("a", 99), "the first incarnation")
            await a.close()
            a2 = await nodes.start("a", Inbox())  # same node id, new incarnation
            a2.add_peer("b", b.address)
            for seq in range(1000, 1100):
                a2.send("b", numbered(seq))
            await inbox.wait_until(lambda: inbox.has("a", 1099), "the second incarnation")
            assert inbox.got("a") == list(range(100)) + list(range(1000, 1100))

    run(main)


def check_every_frame_is_sent_or_discarded_never_silently_lost(maker: TransportMaker) -> None:
    """frames_out + discarded_frames + still queued == accepted by send(), always: for a
    peer that is down and then removed, and for one that is down when the sender closes."""

    async def main() -> None:
        async with Nodes(maker) as nodes:
            gone = await nodes.start("gone", Inbox())
            dead_address = gone.address
            await gone.close()
            a = await nodes.start("a", Inbox())
            a.add_peer("down", dead_address)
            for seq in range(50):
                a.send("down", numbered(seq))
            await asyncio.sleep(0.2)  # a few failed connection attempts (asserts no timing)
            assert a.buffered("down") + a.stats.frames_out * 16 >= 50 * 16
            a.remove_peer("down")
            a.remove_peer("down")  # a no-op
            assert a.buffered("down") == 0
            with raises(LocalProtocolError, "send to a removed peer"):
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


def check_dropped_link_is_counted_and_the_sender_comes_back(maker: TransportMaker) -> None:
    """The receiver drops the link on frame 50 (Link.drop, twice): nothing more is
    delivered from that connection, the drop is counted once, the sender reconnects and
    what it still had queued goes out on the new connection, in order."""
    poison = 50

    async def main() -> None:
        inbox = Inbox()
        dropped: list[Link] = []
        late: list[int] = []  # frames delivered from the dropped connection after the drop

        def drop_poison(link: Link, frame: bytes) -> None:
            if any(link is d for d in dropped):
                late.append(number_of(frame))
            if number_of(frame) == poison:
                dropped.append(link)
                link.drop("planted bad frame")
                link.drop("second call is a no-op")

        inbox.hook = drop_poison
        async with Nodes(maker) as nodes:
            a, b = await _pair(nodes, inbox)
            for seq in range(100):
                a.send("b", numbered(seq))
            await inbox.wait_until(lambda: inbox.has("a", poison), "the poison frame")
            await _probe(a, inbox, 1000)
            got = await _block_arrives_last(a, inbox, range(5000, 5100),
                                            "frames after the drop")
            assert got[: poison + 1] == list(range(poison + 1))
            assert not late, f"frames from the dropped connection after the drop: {late[:5]}"
            assert b.stats.bad_frames == 1 and b.stats.dropped_connections == 1
            assert a.stats.reconnects >= 1

    run(main)


def check_close_stops_callbacks_and_refuses_the_api(maker: TransportMaker) -> None:
    """send before start, to an unknown peer, of a frame above max_frame_bytes, and after
    close raise LocalProtocolError; a second start too; a bad address is a ConfigError;
    no on_frame call once close began; drain and close after close return at once."""

    async def main() -> None:
        inbox = Inbox()
        async with Nodes(maker) as nodes:
            unstarted = nodes.make()
            with raises(LocalProtocolError, "send before start"):
                unstarted.send("b", b"x")
            a = await nodes.start("a", Inbox())
            b = await nodes.start("b", inbox)
            with raises(LocalProtocolError, "send to a peer never added"):
                a.send("b", b"unknown peer")
            with raises(LocalProtocolError, "a second start"):
                await b.start("b", inbox)
            a.add_peer("b", b.address)
            with raises(ConfigError, "add_peer with an address of no known scheme"):
                a.add_peer("c", "nope://x")
            if a.max_frame_bytes is not None:
                with raises(LocalProtocolError, "send of a frame above max_frame_bytes"):
                    a.send("b", bytes(a.max_frame_bytes + 1))
            for seq in range(3000):
                a.send("b", numbered(seq, 200))
            await inbox.wait_until(lambda: len(inbox.got("a")) >= 10, "some frames")
            inbox.closing = True
            await b.close()
            for seq in range(3000, 3100):  # the peer is gone: a still queues without error
                a.send("b", numbered(seq))
            await asyncio.sleep(0.3)  # room for a late callback to show (asserts no timing)
            assert inbox.calls_after_close == 0, "on_frame was called after close"
            with raises(LocalProtocolError, "send after close"):
                b.send("a", b"after close")
            with raises(LocalProtocolError, "add_peer after close"):
                b.add_peer("a", a.address)
            await b.drain()  # returns at once
            await b.close()  # idempotent
            assert strictly_increasing(inbox.got("a"))
            await a.close()
            with raises(LocalProtocolError, "send after close"):
                a.send("b", b"after close")

    run(main)


def check_drain_holds_the_sender_at_the_high_water_mark_and_loses_nothing(
    maker: TransportMaker,
) -> None:
    """With high_water_bytes 256 KiB and a slow receiver, drain() returns only at or
    below the mark, and all 1,200 frames of 16 KiB arrive in order."""
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
        async with Nodes(maker) as nodes:
            a = await nodes.start("a", Inbox(), options)
            b = await nodes.start("b", inbox, options)
            a.add_peer("b", b.address)
            for seq in range(count):
                a.send("b", numbered(seq, frame_size))
            assert a.buffered("b") > high  # nothing can have left yet: no loop turn passed
            await a.drain()
            assert a.buffered("b") <= high, "drain returned above the high-water mark"
            more = 0
            for seq in range(count, 2 * count):
                a.send("b", numbered(seq, frame_size))
                if a.buffered("b") > high:
                    more += 1
                    await a.drain("b")
                    assert a.buffered("b") <= high, "drain returned above the high-water mark"
            assert more > 0
            await inbox.wait_until(lambda: inbox.has("a", 2 * count - 1), "every frame")
            assert inbox.got("a") == list(range(2 * count))
            assert inbox.corrupt == 0

    run(main)


def check_close_waits_for_a_start_or_a_close_under_way(maker: TransportMaker) -> None:
    """close() while start() or another close() is under way returns only once that is
    over, and the transport ends closed: nothing still listening, nothing left running."""

    async def main() -> None:
        async with Nodes(maker) as nodes:
            b = await nodes.start("b", Inbox())
            c = await nodes.start("c", Inbox())
            a = nodes.make()
            starting = asyncio.ensure_future(a.start("a", Inbox()))
            await asyncio.sleep(0)  # start() is under way (done already, where it never waits)
            await a.close()
            assert starting.done(), "close() returned while start() was still binding"
            if starting.exception() is not None:
                assert isinstance(starting.exception(), LocalProtocolError)
            assert not _is_open(a), "start() opened the transport after close() returned"
            with raises(LocalProtocolError, "add_peer after close"):
                a.add_peer("c", c.address)

            b.add_peer("c", c.address)
            b.send("c", numbered(0))
            first = asyncio.ensure_future(b.close())
            await asyncio.sleep(0)  # the first close() is under way
            await b.close()
            assert first.done(), "a second close() returned before the first was over"

    run(main)


def check_a_peer_removed_and_added_again_is_heard_again(maker: TransportMaker) -> None:
    """remove_peer then add_peer of the same node (it left the view and came back) opens
    a connection that the receiver takes as newer than every earlier one from this
    sender, even one it has not yet seen close: a connection number restarting at 1
    read as a late old connection there, and everything sent on it was discarded."""

    async def main() -> None:
        inbox = Inbox()
        async with Nodes(maker) as nodes:
            a, b = await _pair(nodes, inbox)
            await _probe(a, inbox, 0)
            a.add_peer("b", b.address)  # a second connection
            await _probe(a, inbox, 1000)
            a.remove_peer("b")
            a.add_peer("b", b.address)
            await _probe(a, inbox, 5000)
            got = inbox.got("a")
            assert strictly_increasing(got), "frames were reordered or duplicated"

    run(main)


#: every check, in the order check_transport runs them (cheap and basic first)
CHECKS: Final[tuple[Check, ...]] = (
    check_frames_on_one_link_arrive_in_order,
    check_large_frames_arrive_intact,
    check_six_nodes_all_to_all_keep_each_link_in_order,
    check_runs_arrive_as_their_sends_would,
    check_traffic_resumes_in_order_after_peer_restart_same_address,
    check_traffic_resumes_in_order_after_peer_restart_new_address,
    check_reconnecting_to_a_live_peer_never_reorders,
    check_a_restarted_sender_is_heard_again,
    check_every_frame_is_sent_or_discarded_never_silently_lost,
    check_dropped_link_is_counted_and_the_sender_comes_back,
    check_close_stops_callbacks_and_refuses_the_api,
    check_drain_holds_the_sender_at_the_high_water_mark_and_loses_nothing,
    check_close_waits_for_a_start_or_a_close_under_way,
    check_a_peer_removed_and_added_again_is_heard_again,
)


def check_transport(maker: TransportMaker, *, skip: Mapping[str, str] | None = None) -> None:
    """Run every check of `CHECKS` on transports from `maker`; the first that fails
    raises its AssertionError. `skip` names checks (by function name) the transport
    cannot pass by design, each with the reason; an unknown name is an error, so a
    renamed check cannot silently run nowhere."""
    skip = dict(skip or {})
    unknown = set(skip) - {check.__name__ for check in CHECKS}
    if unknown:
        raise ValueError(f"skip names no check: {sorted(unknown)}")
    for name, reason in skip.items():
        if not reason.strip():
            raise ValueError(f"skipping {name} needs a reason")
    for check in CHECKS:
        if check.__name__ not in skip:
            check(maker)


# ------------------------------------------------------------------ helpers


async def _pair(nodes: Nodes, inbox: Inbox) -> tuple[Transport, Transport]:
    """Nodes a and b started, b a peer of a; b's frames go to `inbox`."""
    a = await nodes.start("a", Inbox())
    b = await nodes.start("b", inbox)
    a.add_peer("b", b.address)
    return a, b


def _has_last(inbox: Inbox, senders: list[str], last: int) -> Callable[[], bool]:
    return lambda: all(inbox.has(s, last) for s in senders)


async def _block_arrives_last(sender: Transport, inbox: Inbox, block: range,
                              what: str) -> list[int]:
    """Send `block` a → b, wait for its last frame; everything b got from a is in order,
    once each, and ends with the whole block. Returns what b got."""
    for seq in block:
        sender.send("b", numbered(seq))
    await inbox.wait_until(lambda: inbox.has("a", block[-1]), what)
    got = inbox.got("a")
    assert strictly_increasing(got), f"{what}: frames were reordered or duplicated"
    assert got[-len(block) :] == list(block), f"{what}: the block did not arrive whole"
    return got


async def _probe(sender: Transport, inbox: Inbox, first: int) -> None:
    """Send numbers first, first+1, ... to b until one arrives: a connection is up."""
    for seq in range(first, first + 2000):
        got = inbox.got("a")
        if got and got[-1] >= first:
            return
        sender.send("b", numbered(seq))
        await asyncio.sleep(0.01)
    raise AssertionError(f"no probe arrived; last frames: {inbox.got('a')[-5:]}")


def _is_open(transport: Transport) -> bool:
    """Whether `transport` (or, through wrappers' `inner`, what it wraps) says it is
    open; a transport without an `is_open` property counts as closed here (its
    add_peer after close is checked anyway)."""
    current: object = transport
    while current is not None:
        is_open = getattr(current, "is_open", None)
        if isinstance(is_open, bool):
            return is_open
        current = getattr(current, "inner", None)
    return False


def _first_difference(got: list[int], want: list[int]) -> str:
    for index, (g, w) in enumerate(zip(got, want, strict=False)):
        if g != w:
            return f"at index {index}: got {got[index:index + 5]}, want {want[index:index + 5]}"
    return f"got {len(got)} frames, want {len(want)}"
