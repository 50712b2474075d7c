"""Ordering "optimistic" over the runtime (mem transport, one process): the tentative
deliveries reach `on_opt_deliver` and `deliveries(stage="optimistic")`, the final ones
`deliveries()`; the trace has both stages and is clean for every claim, LOCAL_ORDER
included."""

from __future__ import annotations

import asyncio

import pytest

from abcast import Group, LocalProtocolError, Node
from abcast.effects import Deliver, Stage
from abcast.ordering.registry import OrderingOptions, get_ordering
from abcast.testing import check_events
from abcast.trace.recorder import TraceRecorder

pytestmark = pytest.mark.timeout(30)

IDS = ("n1", "n2", "n3")
EACH = 5


def test_both_stages_reach_the_application_and_the_trace() -> None:
    recorder = TraceRecorder("optimistic-runtime")
    hooked: list[Deliver] = []

    async def main() -> tuple[list[Deliver], list[Deliver]]:
        nodes = [await Node("mem://", node=n, recorder=recorder).start() for n in IDS]
        groups = []
        for node in nodes:
            peers = {o.id: o.address for o in nodes if o is not node}
            hook = hooked.append if node.id == "n3" else None
            groups.append(await Group("g", ordering="optimistic", host=node, peers=peers,
                                      on_opt_deliver=hook).open())
        with pytest.raises(LocalProtocolError, match="on_opt_deliver"):
            await anext(groups[2].deliveries(stage="optimistic"))
        total = EACH * len(IDS)

        async def take(stage: str) -> list[Deliver]:
            got: list[Deliver] = []
            async for d in groups[1].deliveries(stage=stage):
                got.append(d)
                if len(got) == total:
                    break
            return got

        readers = [asyncio.create_task(take("optimistic")), asyncio.create_task(take("final"))]
        for k in range(EACH):
            for group in groups:
                await group.broadcast(b"m%d" % k)
        opt, final = await asyncio.wait_for(asyncio.gather(*readers), 20)
        async with asyncio.timeout(10):
            while len(hooked) < total:
                await asyncio.sleep(0.005)
        for group in groups:
            await group.close()
        for node in nodes:
            await node.close()
        return opt, final

    opt, final = asyncio.run(main())
    assert {d.stage for d in opt} == {Stage.OPTIMISTIC} and {d.stage for d in final} == {
        Stage.FINAL}
    assert sorted((d.origin, d.seq) for d in opt) == sorted((d.origin, d.seq) for d in final)
    assert len(hooked) == EACH * len(IDS)
    rows = recorder.rows()
    assert {r.kind for r in rows} >= {"opt_deliver", "deliver"}
    claims = get_ordering("optimistic").claimed(OrderingOptions())
    assert "local_order" in claims
    assert check_events(rows, claims, "optimistic-runtime") == []
