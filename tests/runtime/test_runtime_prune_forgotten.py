"""A runtime node lets go of a removed member's address once its group's channel let
go of it (abcast.runtime.node, `prune_peers`: "a removed or crashed member, once its
group's channel let go of it too"). Under evs the channel keeps a removed member for the
merge's probing time plus a linger (70 s by default), longer than the prune that follows
a view (PRUNE_AFTER_S, 15 s): that prune keeps it, and no later one comes until the next
view — so in a group that stays as it is, a crashed member's address is kept for good.
Here the times are shrunk keeping their order (prune 0.05 s after a view, merge probes
for 0.2 s, the removed linger 0.3 s)."""

from __future__ import annotations

import asyncio

import pytest

import abcast.ordering.registry as registry_module
import abcast.runtime.node as node_module
from abcast import Group, Node
from abcast.group.failure_detector import DetectorConfig
from abcast.ids import NodeId
from abcast.membership import MembershipConfig
from abcast.ordering.registry import OrderingOptions
from abcast.testing.polling import until
from abcast.transport.memory import MemoryTransport

pytestmark = pytest.mark.timeout(60)

IDS = ("n1", "n2", "n3")
DETECTOR = DetectorConfig(period_us=50_000, timeout_us=500_000, timeout_increment_us=250_000)


class CuttableMemory(MemoryTransport):
    """mem:// whose frames to the nodes in `blocked` are lost."""

    def __init__(self) -> None:
        super().__init__("mem://")
        self.blocked: set[NodeId] = set()

    def send(self, node: NodeId, data: bytes) -> None:
        if node not in self.blocked:
            super().send(node, data)


def test_a_removed_members_address_goes_once_the_channel_forgot_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(node_module, "PRUNE_AFTER_S", 0.05)
    monkeypatch.setattr(registry_module, "removed_linger_us", lambda opts: 300_000)
    monkeypatch.setattr(registry_module, "MembershipConfig",
                        lambda **kw: MembershipConfig(probe_for_us=200_000, **kw))
    transports = {n: CuttableMemory() for n in IDS}

    async def main() -> tuple[bool, str | None]:
        nodes = [await Node(transports[n], node=n).start() for n in IDS]
        groups = []
        for node in nodes:
            peers = {o.id: o.address for o in nodes if o is not node}
            groups.append(await Group(
                "g", ordering="sequencer", host=node, peers=peers,
                options=OrderingOptions(detector=DETECTOR), partitions="evs").open())
        n1 = nodes[0]
        stack = n1._groups["g"].stack
        await until(lambda: set(stack.view.members) == set(IDS), 20)
        for n in IDS:  # n3 goes silent (crashed, as far as the others can tell)
            transports[n].blocked = {"n1", "n2"} if n == "n3" else {"n3"}
        await until(lambda: set(stack.view.members) == {"n1", "n2"}, 20)
        await until(lambda: "n3" not in stack.peers(), 20)  # the channel forgot it
        try:
            await until(lambda: n1.peer_url("n3") is None, 3)
            dropped = True
        except TimeoutError:
            dropped = False
        url = n1.peer_url("n3")
        for g in groups:
            await g.close()
        for node in nodes:
            await node.close()
        return dropped, url

    dropped, url = asyncio.run(main())
    assert dropped, f"n1 still holds n3's address {url!r} after its channel forgot n3"
