"""The shipped conformance suite catches broken transports (as trio tests its own
stream checks): mem:// behind a wrapper that swaps two frames now and then, one that
silently drops a frame now and then, one whose connections go on delivering after
on_frame dropped them, one whose drain() returns at once, one whose send_run sends a
run last to first, and tcp:// with its fast run path planted to write a frame and
queue it too. Each fails the check meant
for it with an AssertionError saying what broke (the first two fail `check_transport`
too, at its first check); plain mem:// passes those checks (the suite is not failing
everything). And `check_transport`'s skip list
must name real checks, each with a reason.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

import pytest

from abcast.ids import NodeId
from abcast.testing.transport_conformance import (
    check_drain_holds_the_sender_at_the_high_water_mark_and_loses_nothing,
    check_dropped_link_is_counted_and_the_sender_comes_back,
    check_frames_on_one_link_arrive_in_order,
    check_runs_arrive_as_their_sends_would,
    check_transport,
)
from abcast.testing.transport_harness import UrlMaker
from abcast.transport import Link, Transport
from abcast.transport.base import FrameHandler
from abcast.transport.wrapper import WrappingTransport

pytestmark = pytest.mark.timeout(60)

#: one frame in this many is swapped or dropped (the FIFO check sends 2,000 per link)
EVERY = 500


class Swapping(WrappingTransport):
    """Holds frame 250 of every 500 to a peer back and sends it after the next one."""

    def __init__(self, inner: Transport) -> None:
        super().__init__(inner)
        self._sent: dict[NodeId, int] = defaultdict(int)
        self._held: dict[NodeId, bytes] = {}

    def send(self, node: NodeId, data: bytes) -> None:
        self._sent[node] += 1
        if self._sent[node] % EVERY == EVERY // 2:
            self._held[node] = data
            return
        self.inner.send(node, data)
        held = self._held.pop(node, None)
        if held is not None:
            self.inner.send(node, held)


class Dropping(WrappingTransport):
    """Frame 250 of every 500 to a peer never reaches the wire, and no counter says so."""

    def __init__(self, inner: Transport) -> None:
        super().__init__(inner)
        self._sent: dict[NodeId, int] = defaultdict(int)

    def send(self, node: NodeId, data: bytes) -> None:
        self._sent[node] += 1
        if self._sent[node] % EVERY != EVERY // 2:
            self.inner.send(node, data)


class IgnoresDrop(WrappingTransport):
    """Hands on_frame a stand-in for each connection whose drop() does nothing: a
    dropped connection goes on delivering."""

    async def start(self, node: NodeId, on_frame: FrameHandler) -> str:
        stand_ins: dict[Link, Link] = {}

        def deliver(link: Link, frame: bytes) -> None:
            stand_in = stand_ins.setdefault(link, Link(link.peer, link.remote, _ignore))
            on_frame(stand_in, frame)

        return await self.inner.start(node, deliver)


def _ignore(link: Link, reason: str) -> None:
    pass


class NoBackpressure(WrappingTransport):
    """drain() returns at once, whatever is buffered."""

    async def drain(self, node: NodeId | None = None) -> None:
        return None


def test_plain_mem_passes_the_checks_the_planted_ones_fail() -> None:
    check_frames_on_one_link_arrive_in_order(UrlMaker("mem://"))
    check_dropped_link_is_counted_and_the_sender_comes_back(UrlMaker("mem://"))
    check_drain_holds_the_sender_at_the_high_water_mark_and_loses_nothing(UrlMaker("mem://"))


@pytest.mark.parametrize("broken", [Swapping, Dropping], ids=["swapping", "dropping"])
def test_a_transport_that_reorders_or_loses_frames_is_caught(
    broken: type[WrappingTransport],
) -> None:
    maker = UrlMaker("mem://", wrap=broken)
    with pytest.raises(AssertionError, match="lost, reordered or duplicated"):
        check_frames_on_one_link_arrive_in_order(maker)
    with pytest.raises(AssertionError):
        check_transport(maker)


def test_a_connection_that_delivers_after_its_drop_is_caught() -> None:
    maker = UrlMaker("mem://", wrap=IgnoresDrop)
    with pytest.raises(AssertionError, match="from the dropped connection after the drop"):
        check_dropped_link_is_counted_and_the_sender_comes_back(maker)


def test_a_drain_without_backpressure_is_caught() -> None:
    maker = UrlMaker("mem://", wrap=NoBackpressure)
    with pytest.raises(AssertionError, match="above the high-water mark"):
        check_drain_holds_the_sender_at_the_high_water_mark_and_loses_nothing(maker)


class RunReversed(WrappingTransport):
    """send_run sends a run's frames last to first: a peer named twice in one run gets
    its frames out of order."""

    def send_run(self, frames: Sequence[tuple[NodeId, bytes]]) -> None:
        for node, data in reversed(frames):
            self.inner.send(node, data)


def test_a_send_run_that_reorders_a_peers_frames_is_caught() -> None:
    with pytest.raises(AssertionError, match="at index"):
        check_runs_arrive_as_their_sends_would(UrlMaker("mem://", wrap=RunReversed))
    check_runs_arrive_as_their_sends_would(UrlMaker("mem://"))


def test_tcps_fast_run_that_writes_and_then_queues_too_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """tcp://'s send_run writes a frame for an idle peer at once (`_Channel.write_at_once`);
    planted: it writes it and says it did not, so `send` queues it again."""
    from abcast.transport import tcp

    write_at_once = tcp._Channel.write_at_once

    def twice(self: tcp._Channel, data: bytes) -> bool:
        write_at_once(self, data)
        return False

    monkeypatch.setattr(tcp._Channel, "write_at_once", twice)
    with pytest.raises(AssertionError, match="at index"):
        check_runs_arrive_as_their_sends_would(UrlMaker("tcp://127.0.0.1:0"))


def test_skipping_needs_a_real_check_and_a_reason() -> None:
    with pytest.raises(ValueError, match="names no check"):
        check_transport(UrlMaker("mem://"), skip={"check_teleportation": "no such check"})
    with pytest.raises(ValueError, match="needs a reason"):
        check_transport(UrlMaker("mem://"),
                        skip={"check_large_frames_arrive_intact": " "})
