"""The native lane in a running group (abcast.runtime.lane, abcast._lane).

Real nodes over tcp on loopback, one process: with the lane on, a message's frames and
its broadcast take it, and every node still delivers every message once, all in one
order, the same one with the lane off (a serial workload, so the order is the round
robin's). With metrics on no frame takes it (broadcasts still do); switched off, nothing
does. A build from other sources than the checkout's is refused, not run. (That the lane
gives exactly the Python path's outputs and state, step by step, is
tests/unit/test_native_lane.py.)

The pump (`_lane.pump`, lane_pump.c) takes tcp:// reads of whole frames to the lane
without the Python path's glue: with reads cut at random points (the pump takes the
whole-frame ones, the reader the rest), with a frame the lane declines put into the
middle of reads (it and the frames after it go the Python way, in order), with a driver
that raises once (logged as `deliver_all` logs it, the link kept), the group delivers
exactly as without the pump.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from abcast import Delivery, Group, Node
from abcast.codec import Packet, encode_frame
from abcast.effects import Transmit
from abcast.group.failure_detector import Fd
from abcast.ids import View
from abcast.ordering.registry import OrderingOptions, build_stack
from abcast.runtime import lane
from abcast.runtime.driver import GroupDriver
from abcast.runtime.stack_options import for_streams
from abcast.testing.polling import until
from abcast.transport._tcp_inbound import _Inbound

_lane = pytest.importorskip(
    "abcast._lane", reason="abcast._lane is not built here (no C compiler or Python "
    "headers at set-up: the pure-Python path runs; bench/build_native.py builds it in a "
    "checkout)")

pytestmark = pytest.mark.timeout(60)

IDS = ("n1", "n2", "n3")
ROUNDS = 30
_until = functools.partial(until, timeout_s=15.0)


@pytest.fixture
def counts() -> Iterator[None]:
    _lane.reset_counts()
    yield
    _lane.reset_counts()


async def _serial_run(*, metrics: bool = False, nodes_out: list[Node] | None = None,
                      ) -> dict[str, list[tuple[str, int]]]:
    """ROUNDS rounds of one message per node, each sent once the previous one is
    delivered everywhere: what each node delivered, in order (`nodes_out` gets the
    nodes, closed, for their counters)."""
    nodes = [await Node("tcp://127.0.0.1:0", node=n,
                        metrics_port=0 if metrics else None).start() for n in IDS]
    if nodes_out is not None:
        nodes_out.extend(nodes)
    seen: dict[str, list[tuple[str, int]]] = {n: [] for n in IDS}
    groups: list[Group] = []
    try:
        for node in nodes:
            peers = {other.id: other.address for other in nodes if other is not node}

            def record(d: Delivery, me: str = node.id) -> None:
                seen[me].append((d.origin, d.seq))

            groups.append(await Group("g", ordering="sequencer", host=node, peers=peers,
                                      on_deliver=record).open())
        sent = 0
        for _ in range(ROUNDS):
            for group in groups:
                await group.broadcast(f"m{sent}".encode())
                sent += 1
                await _until(lambda n=sent: all(len(s) >= n for s in seen.values()))
    finally:
        for group in groups:
            await group.close()
        for node in nodes:
            await node.close()
    return seen


def test_the_build_is_of_the_checked_out_sources() -> None:
    assert lane.STATUS == "on", lane.STATUS


def test_a_group_delivers_alike_with_the_lane_and_without(
    counts: None, monkeypatch: pytest.MonkeyPatch,
) -> None:
    with_lane = asyncio.run(_serial_run())
    taken = _lane.counts()
    monkeypatch.setattr(lane, "RECEIVE", None)  # (the broadcasts' step goes with it)
    _lane.reset_counts()
    without = asyncio.run(_serial_run())
    assert _lane.counts()["taken"] == _lane.counts()["declined"] == 0
    expected = [(IDS[i % 3], i // 3 + 1) for i in range(3 * ROUNDS)]
    for node in IDS:
        assert with_lane[node] == expected
        assert without[node] == expected
    # a message's four frames and its broadcast took the lane, bar the first frame on
    # each link (the channel learns of a link on the Python path) and any a tick's ack
    # made late
    assert taken["frames"] >= 4 * 3 * ROUNDS * 0.8, taken
    assert taken["broadcasts"] >= 3 * ROUNDS * 0.8, taken


def test_metrics_keep_every_frame_on_the_python_path(counts: None) -> None:
    """(The node counts each frame's sender; the broadcasts' step has nothing to count.)"""
    seen = asyncio.run(_serial_run(metrics=True))
    assert all(len(s) == 3 * ROUNDS for s in seen.values())
    taken = _lane.counts()
    assert taken["frames"] == 0
    assert taken["broadcasts"] >= 3 * ROUNDS * 0.8, taken


def test_a_stale_build_or_the_switch_keeps_the_lane_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert "rebuild it" in lane._stale("0" * 16)
    assert lane._stale(_lane.SOURCE_HASH) == ""
    monkeypatch.setenv(lane.SWITCH, "0")
    off = lane._load()
    assert off[:-1] == (None,) * (len(off) - 1) and lane.SWITCH in off.status


@pytest.mark.parametrize(("ordering", "options", "expected"), [
    ("sequencer", OrderingOptions(), True),
    ("sequencer", OrderingOptions(relay=True), False),
    ("sequencer", OrderingOptions(safe=True), False),
    ("causal-total", OrderingOptions(), False),
    ("skeen", OrderingOptions(), False),
])
def test_only_the_plain_sequencers_stack_is_offered(
    ordering: str, options: OrderingOptions, expected: bool,
) -> None:
    """The options the lane declines every frame of keep a group off it altogether."""
    stack = build_stack("n1", "g", ordering, View(1, IDS), for_streams(options))
    assert lane.eligible(stack) is expected


# ------------------------------------------------------------------------------ the pump


def _frames(data: bytes) -> list[bytes] | None:
    """The frames of a read that is whole frames, else None."""
    frames, pos = [], 0
    while pos < len(data):
        if len(data) - pos < 4:
            return None
        size = int.from_bytes(data[pos:pos + 4], "big")
        if len(data) - pos - 4 < size:
            return None
        frames.append(data[pos + 4:pos + 4 + size])
        pos += 4 + size
    return frames


def _reads_rewritten(monkeypatch: pytest.MonkeyPatch,
                     rewrite: Callable[[Any, bytes], list[bytes]]) -> None:
    """Every admitted tcp:// read goes to `rewrite(connection, data)`, and each piece it
    returns to the connection as a read of its own (the pump sees them first)."""
    original = _Inbound.data_received

    def data_received(self: _Inbound, data: bytes) -> None:
        if self._pump is None:  # the hello's reads, and the pump off
            original(self, data)
            return
        for piece in rewrite(self, data):
            original(self, piece)

    monkeypatch.setattr(_Inbound, "data_received", data_received)


def test_the_pump_takes_whole_reads_and_leaves_cut_ones_to_the_reader(
    counts: None, monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = random.Random(7)

    def cut(connection: Any, data: bytes) -> list[bytes]:
        if rng.random() < 0.5:
            return [data]
        at = sorted(rng.sample(range(1, len(data)), min(3, len(data) - 1)))
        return [data[i:j] for i, j in zip([0, *at], [*at, len(data)], strict=True)]

    _reads_rewritten(monkeypatch, cut)
    seen = asyncio.run(_serial_run())
    expected = [(IDS[i % 3], i // 3 + 1) for i in range(3 * ROUNDS)]
    assert all(seen[node] == expected for node in IDS)
    pumped = _lane.pump_counts()
    assert pumped["frames"] > 3 * ROUNDS, pumped
    assert pumped["passed"] > 3 * ROUNDS, pumped  # the cut reads went to the reader


def test_a_frame_the_lane_declines_takes_the_rest_of_its_read_the_python_way(
    counts: None, monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A frame for a group no node hosts goes into the middle of whole-frame reads: the
    lane declines it (no such group), so it and every frame after it in that read go to
    `deliver_all`: the node counts it as a stranger's, and delivers the rest in order."""
    injected = [0]

    def inject(connection: Any, data: bytes) -> list[bytes]:
        frames = _frames(data)
        if not frames or injected[0] >= 2 * ROUNDS:
            return [data]
        injected[0] += 1
        stranger = encode_frame("nobody-hosts-this", connection.link.peer,
                                Packet((Fd(),), b"x"))
        frames.insert(len(frames) // 2, stranger)  # first, or between two of them
        return [b"".join(len(f).to_bytes(4, "big") + f for f in frames)]

    _reads_rewritten(monkeypatch, inject)
    nodes: list[Node] = []
    seen = asyncio.run(_serial_run(nodes_out=nodes))
    expected = [(IDS[i % 3], i // 3 + 1) for i in range(3 * ROUNDS)]
    assert all(seen[node] == expected for node in IDS)
    assert sum(node.stats.unknown_group_frames for node in nodes) == injected[0] > ROUNDS
    assert _lane.pump_counts()["frames"] > 3 * ROUNDS  # the reads around them: pumped
    assert _lane.counts()["declined"] >= injected[0]  # each stranger: in a pumped read


def test_a_driver_that_raises_in_a_pumped_read_is_logged_and_the_link_kept(
    counts: None, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    """As in `deliver_all`: one ERROR line with the traceback, the frame discarded, the
    connection and the group go on. (Planted where nothing is lost: a member's data at
    another member, whose step has no outputs.)"""
    original = GroupDriver.received
    raised = [0]

    def received(self: GroupDriver, outputs: list[Any], now: int) -> None:
        if not raised[0] and not outputs and _lane.pump_counts()["frames"] > 10:
            raised[0] += 1
            raise RuntimeError("planted: the driver failed once")
        original(self, outputs, now)

    monkeypatch.setattr(GroupDriver, "received", received)
    nodes: list[Node] = []
    with caplog.at_level(logging.ERROR, logger="abcast"):
        seen = asyncio.run(_serial_run(nodes_out=nodes))
    assert raised[0] == 1
    assert all(len(seen[node]) == 3 * ROUNDS for node in IDS)
    failed = [r for r in caplog.records if "frame handler raised" in r.getMessage()]
    assert len(failed) == 1 and failed[0].exc_info is not None
    assert "planted: the driver failed once" in str(failed[0].exc_info[1])
    assert sum(node.transport.stats.dropped_connections for node in nodes) == 0


# ------------------------------------------------------------------------- carry_out


def test_carry_out_writes_a_run_at_once_as_send_run_would(counts: None) -> None:
    """`_lane.carry_out` writes a step's packets itself only where tcp:// would write them
    at once: on a fresh loop turn a run to an idle peer is on the wire when it returns
    (the frames counted once, the peer's channel then written for this turn, so a frame
    sent after it waits for the next turn); a peer's two frames in one run leave at once
    too (one write for both, as under the Python path's cork)."""

    async def main() -> tuple[int, int]:
        nodes = [await Node("tcp://127.0.0.1:0", node=n).start() for n in IDS[:2]]
        groups: list[Group] = []
        try:
            for node in nodes:
                peers = {o.id: o.address for o in nodes if o is not node}
                groups.append(await Group("g", ordering="sequencer", host=node,
                                          peers=peers).open())
            await groups[0].broadcast(b"warm")  # connections up both ways
            await _until(lambda: nodes[0].transport.stats.frames_out >= 1)
            await asyncio.sleep(0.05)
            driver, stats = groups[0].driver, nodes[0].transport.stats
            stranger = encode_frame("nobody-hosts-this", "n1", Packet((Fd(),), b"x"))
            before = stats.frames_out
            await asyncio.sleep(0)  # a fresh loop turn
            _lane.carry_out(driver, [Transmit(("n2",), stranger)], driver.host.clock.now_us())
            assert _lane.write_counts() == {"packets": 1, "runs": 1}
            assert stats.frames_out == before + 1  # written from inside carry_out
            nodes[0].transport.send("n2", stranger)
            assert stats.frames_out == before + 1  # the channel wrote in this turn: it waits
            await asyncio.sleep(0)
            assert stats.frames_out == before + 2
            await asyncio.sleep(0)
            twice = [Transmit(("n2",), stranger), Transmit(("n2",), stranger)]
            _lane.carry_out(driver, twice, driver.host.clock.now_us())
            assert _lane.write_counts() == {"packets": 3, "runs": 2}
            assert stats.frames_out == before + 4  # both at once, in one write
            await _until(lambda: nodes[1].stats.unknown_group_frames == 4)
            return stats.frames_out - before, nodes[1].stats.unknown_group_frames
        finally:
            for group in groups:
                await group.close()
            for node in nodes:
                await node.close()

    assert asyncio.run(main()) == (4, 4)


def test_a_serial_workload_has_its_packets_written_by_carry_out(counts: None) -> None:
    nodes: list[Node] = []
    seen = asyncio.run(_serial_run(nodes_out=nodes))
    expected = [(IDS[i % 3], i // 3 + 1) for i in range(3 * ROUNDS)]
    assert all(seen[node] == expected for node in IDS)
    written = _lane.write_counts()
    # of the 8 × ROUNDS packets of the members' broadcasts and the sequencer's orders of
    # them, those that found their channel idle (all but a few on a quiet machine; fewer
    # where a slower run coalesces more, as under the sanitizers)
    assert written["packets"] >= 2 * ROUNDS and written["runs"] >= ROUNDS, written


def test_deliveries_of_pumped_frames_run_inside_the_drivers_carry_out(counts: None) -> None:
    """The application's callback runs with the driver carrying out a step (`_applying`:
    `send_queued` from inside it waits for the turn's end, as `_apply` has it), also
    when carry_out hands a pumped frame's deliveries straight to `_carry_out_held`."""

    async def main() -> list[bool]:
        nodes = [await Node("tcp://127.0.0.1:0", node=n).start() for n in IDS[:2]]
        groups: list[Group] = []
        flags: list[bool] = []
        try:
            for node in nodes:
                peers = {o.id: o.address for o in nodes if o is not node}

                def record(d: Delivery, me: str = node.id) -> None:
                    if me == "n2":
                        flags.append(groups[1].driver._applying)

                groups.append(await Group("g", ordering="sequencer", host=node,
                                          peers=peers, on_deliver=record).open())
            for k in range(ROUNDS):
                await groups[0].broadcast(f"m{k}".encode())
                await _until(lambda n=k + 1: len(flags) >= n)
        finally:
            for group in groups:
                await group.close()
            for node in nodes:
                await node.close()
        return flags

    flags = asyncio.run(main())
    assert flags == [True] * ROUNDS
    assert _lane.pump_counts()["frames"] >= ROUNDS
