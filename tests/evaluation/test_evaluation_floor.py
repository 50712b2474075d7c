"""The floor (evaluation/floor.py) is a sequencer: three floor nodes on one loop, real TCP
on loopback and an in-process registry, driven by the bench's own workload and
handshake, deliver every message on every node in one order, each origin's in its
broadcast order. (Its figures are the bench's; nothing here is timed.)"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from abcast.effects import Deliver
from abcast.evaluation import floor
from abcast.evaluation.worker import LocalBarrier, LocalControl, WorkerConfig, WorkerOutcome, _Run
from abcast.registry.server import RegistryServer


class _Recorded(_Run):
    """The workload, keeping each node's delivery order."""

    orders: dict[str, list[tuple[str, int]]] = {}

    def on_deliver(self, d: Deliver) -> None:
        self.orders.setdefault(self.node.id, []).append((d.origin, d.seq))
        super().on_deliver(d)


async def _run(messages: int, **workload: Any) -> list[WorkerOutcome]:
    server = RegistryServer()
    url = await server.start()
    try:
        barrier = LocalBarrier(3)
        config = WorkerConfig(group="g", ordering="floor", transport="tcp://127.0.0.1:0",
                              size=3, messages=messages, registry=url, run_id="floor-test",
                              **workload)
        nodes = [asyncio.create_task(floor.run_floor_worker(config, LocalControl(barrier)))
                 for _ in range(3)]
        async with asyncio.timeout(30):
            await barrier.all_ready.wait()
            barrier.go.set()
            await barrier.all_done.wait()
        barrier.stop.set()
        return list(await asyncio.gather(*nodes))
    finally:
        await server.close()


@pytest.mark.parametrize("workload", [{}, {"rate": 20_000.0}, {"serial": True}],
                         ids=["closed", "open", "serial"])
def test_every_node_delivers_everything_in_one_order(
    monkeypatch: pytest.MonkeyPatch, workload: dict[str, Any],
) -> None:
    monkeypatch.setattr(floor, "_Run", _Recorded)
    _Recorded.orders = {}
    outcomes = asyncio.run(_run(90, **workload))
    assert all(o.complete and o.delivered == 90 for o in outcomes)
    orders = list(_Recorded.orders.values())
    assert len(orders) == 3 and orders[0] == orders[1] == orders[2]
    for origin in {o for o, _ in orders[0]}:
        assert [s for o, s in orders[0] if o == origin] == list(range(1, 31))
    assert sum(o.broadcasts for o in outcomes) == 90
