"""A frame handler that raises, on every transport: one read's frames are handed over
in one pass (`deliver_all`), and that pass must keep the per-frame contract.

Properties: a handler that raises an ordinary exception loses only that frame — the
rest of the same read still arrives, in order, and the link stays up; one that raises
RemoteProtocolError drops the link at that frame — nothing after it on that connection
is handed over, the drop is counted once, and the sender comes back on a new connection.
"""

from __future__ import annotations

import asyncio
import logging

import pytest
from transport_harness import SCHEMES, Inbox, Nodes, number_of, numbered, run, strictly_increasing

from abcast.errors import RemoteProtocolError
from abcast.transport import Link, Transport

pytestmark = [pytest.mark.timeout(60), pytest.mark.parametrize("scheme", SCHEMES)]


def test_a_handler_bug_loses_one_frame_not_the_rest_of_the_read(
    scheme: str, caplog: pytest.LogCaptureFixture
) -> None:
    count, failing = 300, {10, 11, 150}

    def buggy(link: Link, frame: bytes) -> None:
        if number_of(frame) in failing:
            raise RuntimeError("planted handler bug")

    async def main() -> None:
        inbox = Inbox()
        inbox.hook = buggy
        async with Nodes() as nodes:
            a = await nodes.start(scheme, "a", Inbox())
            b = await nodes.start(scheme, "b", inbox)
            a.add_peer("b", b.address)
            for seq in range(count):  # queued in one turn: they travel in few reads
                a.send("b", numbered(seq))
            await inbox.wait_until(lambda: len(inbox.got("a")) >= count, f"{count} frames")
            assert inbox.got("a") == list(range(count))  # the handler saw each one once
            assert b.stats.frames_in == count
            assert b.stats.bad_frames == 0 and b.stats.dropped_connections == 0

    with caplog.at_level(logging.ERROR, logger="abcast.transport"):
        run(main)
    assert sum("frame handler raised" in r.getMessage() for r in caplog.records) == len(failing)


def test_a_protocol_error_drops_the_link_at_that_frame(scheme: str) -> None:
    poison = 40

    def strict(link: Link, frame: bytes) -> None:
        if number_of(frame) == poison:
            raise RemoteProtocolError("planted undecodable frame")

    async def main() -> None:
        inbox = Inbox()
        inbox.hook = strict
        async with Nodes() as nodes:
            a = await nodes.start(scheme, "a", Inbox())
            b = await nodes.start(scheme, "b", inbox)
            a.add_peer("b", b.address)
            for seq in range(100):
                a.send("b", numbered(seq))
            await inbox.wait_until(lambda: poison in inbox.got("a"), "the poison frame")
            await _probe(a, inbox, 1_000)
            got = inbox.got("a")
            assert got[: poison + 1] == list(range(poison + 1))
            assert not any(poison < s < 100 for s in got), "frames after the drop on that link"
            assert strictly_increasing(got)
            assert b.stats.bad_frames == 1 and b.stats.dropped_connections == 1

    run(main)


async def _probe(sender: Transport, inbox: Inbox, first: int) -> None:
    """Send first, first+1, ... until one arrives: the sender is connected again."""
    for seq in range(first, first + 2_000):
        if inbox.got("a") and inbox.got("a")[-1] >= first:
            return
        sender.send("b", numbered(seq))
        await asyncio.sleep(0.01)
    raise AssertionError(f"no probe arrived; last frames: {inbox.got('a')[-5:]}")
