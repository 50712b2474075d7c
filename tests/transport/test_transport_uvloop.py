"""Every transport on uvloop (the runtime's fast loop): order on a link, a dropped link
that comes back, and a restarted peer, in one compact scenario per scheme. uvloop's
transports are not subclasses of asyncio's, so this catches isinstance assumptions.
"""

from __future__ import annotations

import pytest
import uvloop
from transport_harness import SCHEMES, Inbox, Nodes, number_of, numbered, strictly_increasing

from abcast.transport import Link

pytestmark = [pytest.mark.timeout(60), pytest.mark.parametrize("scheme", SCHEMES)]


def test_scenario_on_uvloop(scheme: str) -> None:
    async def main() -> None:
        first, second = Inbox(), Inbox()

        def drop_poison(link: Link, frame: bytes) -> None:
            if number_of(frame) == 500:
                link.drop("planted")

        first.hook = drop_poison
        async with Nodes() as nodes:
            a = await nodes.start(scheme, "a", Inbox())
            b = await nodes.start(scheme, "b", first)
            a.add_peer("b", b.address)
            for seq in range(1000):
                a.send("b", numbered(seq, 100))
            await first.wait_until(lambda: 500 in first.got("a"), "the poison frame")
            assert first.got("a")[:501] == list(range(501))
            assert b.stats.bad_frames == 1
            await b.close()
            b2 = await nodes.start(scheme, "b", second)
            a.add_peer("b", b2.address)
            for seq in range(2000, 2500):
                a.send("b", numbered(seq, 100))
            await second.wait_until(lambda: second.got("a")[-1:] == [2499], "the new peer")
            assert strictly_increasing(second.got("a"))
            assert second.got("a")[-500:] == list(range(2000, 2500))

    uvloop.run(main())
