"""The hold/release filter on its own: what it holds, in which order it lets go, and that
everything else passes untouched — checked against a planted filter that releases in
the wrong order."""

from __future__ import annotations

import asyncio

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abcast.apps.chat.holding import HoldingTransport
from abcast.codec import EMPTY, Packet, encode_frame
from abcast.ids import NodeId
from abcast.transport.base import FrameHandler, Link
from abcast.transport.memory import MemoryTransport

LINK = Link("n2", "test", lambda _link, _reason: None)


class _Inner(MemoryTransport):
    """A transport whose inbound side the test drives by hand."""

    def __init__(self) -> None:
        super().__init__("mem://")
        self.handler: FrameHandler | None = None

    async def start(self, node: NodeId, on_frame: FrameHandler) -> str:
        self.handler = on_frame
        return "mem://test"


class _WrongOrder(HoldingTransport):
    """Planted: releases the newest held frame first."""

    def release(self, group: str, member: str) -> int:
        queue = self._queues.get((group, member))
        if queue:
            queue.reverse()
        return super().release(group, member)


def _frame(group: str, sender: str, n: int) -> bytes:
    return encode_frame(group, sender, Packet((), n.to_bytes(4, "big")) if n else EMPTY)


# each step: (group, sender, n) arrives, or ("hold"/"release", member)
steps = st.lists(st.one_of(
    st.tuples(st.sampled_from(["g", "h"]), st.sampled_from(["n1", "n2"])),
    st.tuples(st.sampled_from(["hold", "release"]), st.sampled_from(["n1", "n2"])),
), max_size=40)


def _run(cls: type[HoldingTransport], script: list[tuple[str, str]]) -> tuple[
        list[bytes], list[bytes]]:
    """What the node got, and what it should have got: frames of a held (g, member)
    come after the release, in arrival order; everything else at once."""

    async def main() -> tuple[list[bytes], list[bytes]]:
        inner = _Inner()
        holding = cls(inner)
        got: list[bytes] = []
        await holding.start("n0", lambda _link, data: got.append(data))
        assert inner.handler is not None
        expected: list[bytes] = []
        held: dict[str, list[bytes]] = {}
        for n, (a, b) in enumerate(script, 1):
            if a == "hold":
                holding.hold("g", b)
                held.setdefault(b, [])
            elif a == "release":
                holding.release("g", b)
                expected += held.pop(b, [])
            else:
                data = _frame(a, b, n)
                inner.handler(LINK, data)
                if a == "g" and b in held:
                    held[b].append(data)
                else:
                    expected.append(data)
        inner.handler(LINK, b"not a frame")  # passes through: the node refuses it
        expected.append(b"not a frame")
        return got, expected

    return asyncio.run(main())


@settings(max_examples=60, deadline=None)
@given(steps)
def test_held_frames_are_let_go_in_arrival_order_and_nothing_else_waits(
        script: list[tuple[str, str]]) -> None:
    got, expected = _run(HoldingTransport, script)
    assert got == expected


def test_the_planted_wrong_order_release_is_caught() -> None:
    script = [("hold", "n1"), ("g", "n1"), ("g", "n1"), ("release", "n1")]
    assert _run(HoldingTransport, script)[0] == _run(HoldingTransport, script)[1]
    got, expected = _run(_WrongOrder, script)
    assert got != expected


def test_a_negative_delay_is_refused() -> None:
    from abcast.errors import LocalProtocolError

    with pytest.raises(LocalProtocolError):
        HoldingTransport(_Inner()).hold("g", "n1", delay_ms=-1)


def test_frames_held_then_put_on_a_delay_go_through_once_it_has_passed() -> None:
    """Turning a hold into a delay applies the delay to what the hold kept: each frame goes
    through `delay_ms` after it arrived (here: at once, or soon), not only after a release."""

    async def main() -> None:
        inner = _Inner()
        holding = HoldingTransport(inner)
        got: list[bytes] = []
        await holding.start("n0", lambda _link, data: got.append(data))
        assert inner.handler is not None
        holding.hold("g", "n1")
        frames = [_frame("g", "n1", n) for n in (1, 2)]
        for data in frames:
            inner.handler(LINK, data)
        assert got == [] and holding.held("g") == {"n1": 2}
        holding.hold("g", "n1", delay_ms=20)
        async with asyncio.timeout(30):
            while got != frames:
                await asyncio.sleep(0.01)
        assert holding.held("g") == {}
        later = _frame("g", "n1", 3)  # still delayed: waits, then goes through
        inner.handler(LINK, later)
        assert got == frames
        async with asyncio.timeout(30):
            while got != [*frames, later]:
                await asyncio.sleep(0.01)

    asyncio.run(main())
