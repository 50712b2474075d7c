"""Batching in the runtime (abcast.batching through the group driver): a burst of
broadcasts made in one loop turn travels as few ordered messages, and every node still
delivers every message once, numbered per origin, with the ordering's guarantees intact
(checked on the trace the run writes)."""

from __future__ import annotations

import asyncio
import functools

import pytest

from abcast import Delivery, Group, Node
from abcast.ordering.registry import get_ordering
from abcast.testing import check_events
from abcast.testing.polling import until
from abcast.trace.recorder import TraceRecorder

pytestmark = pytest.mark.timeout(60)

IDS = ("n1", "n2", "n3")
BURST = 700  # over one batch's message limit (512): a burst becomes two batches


_until = functools.partial(until, timeout_s=30.0)


@pytest.mark.parametrize("ordering", ["sequencer", "skeen", "chandra-toueg", "causal"])
def test_a_burst_of_broadcasts_is_few_ordered_messages_and_every_delivery_is_checked(
    ordering: str,
) -> None:
    recorder = TraceRecorder(f"batching-{ordering}")
    got: dict[str, list[Delivery]] = {n: [] for n in IDS}

    async def main() -> list[int]:
        nodes = [await Node("mem://", node=n, recorder=recorder).start() for n in IDS]
        groups = []
        for node in nodes:
            peers = {o.id: o.address for o in nodes if o is not node}
            groups.append(await Group("g", ordering=ordering, host=node, peers=peers,
                                      on_deliver=got[node.id].append).open())
        for group in groups:  # all in this one loop turn
            for k in range(BURST):
                group.broadcast_nowait(b"%s-%d" % (group.node.encode(), k))
        await _until(lambda: all(len(g) == BURST * len(IDS) for g in got.values()))
        ordered = [group.driver.stack.broadcasts for group in groups]
        for group in groups:
            await group.close()
        for node in nodes:
            await node.close()
        return ordered

    ordered = asyncio.run(main())
    assert ordered == [2, 2, 2]  # 700 broadcasts per node: one full batch and the rest
    for node, deliveries in got.items():
        for origin in IDS:
            own = [d for d in deliveries if d.origin == origin]
            assert [d.seq for d in own] == list(range(1, BURST + 1)), (node, origin)
            assert [d.payload for d in own] == [b"%s-%d" % (origin.encode(), k)
                                                for k in range(BURST)]
    if "total_order" in get_ordering(ordering).guarantees:
        sequences = [[(d.origin, d.seq) for d in got[n]] for n in IDS]
        assert sequences[0] == sequences[1] == sequences[2]
    rows = recorder.rows()
    assert check_events(rows, get_ordering(ordering).guarantees, recorder.run_id) == []
    assert sum(r.kind == "send" for r in rows) == BURST * len(IDS)
