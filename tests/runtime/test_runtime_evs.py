"""Extended virtual synchrony on the real runtime: four nodes in one process over mem://
transports that can be cut in two. During the cut each side keeps ordering its own
broadcasts; after the heal every node installs one merge view holding all four and the
state the application's `merge_state` made of the two sides — so every replica ends
equal and holds both sides' partition-time messages."""

from __future__ import annotations

import asyncio

import pytest

import abcast.ordering.registry as registry_module
import abcast.runtime.node as node_module
from abcast import Delivery, Group, Node
from abcast.group.failure_detector import DetectorConfig
from abcast.ids import NodeId, View
from abcast.membership import MembershipConfig
from abcast.ordering.registry import OrderingOptions
from abcast.testing.polling import until
from abcast.transport.memory import MemoryTransport

pytestmark = pytest.mark.timeout(90)

IDS = ("n1", "n2", "n3", "n4")
LEFT, RIGHT = {"n1", "n2"}, {"n3", "n4"}
# a prompt detector: the cut is noticed in about half a second
DETECTOR = DetectorConfig(period_us=50_000, timeout_us=500_000, timeout_increment_us=250_000)


class CuttableMemory(MemoryTransport):
    """mem:// whose frames to the nodes in `blocked` are lost (a partition)."""

    def __init__(self) -> None:
        super().__init__("mem://")
        self.blocked: set[NodeId] = set()

    def send(self, node: NodeId, data: bytes) -> None:
        if node not in self.blocked:
            super().send(node, data)


class Replica:
    """A replicated set of lines: delivered payloads; its state is the sorted lines."""

    def __init__(self) -> None:
        self.lines: set[bytes] = set()
        self.views: list[View] = []

    def on_deliver(self, d: Delivery) -> None:
        self.lines.add(d.payload)

    def get_state(self) -> bytes:
        return b"\n".join(sorted(self.lines))

    def set_state(self, state: bytes) -> None:
        self.lines = set(state.split(b"\n")) if state else set()

    @staticmethod
    def merge_state(states: list[bytes]) -> bytes:
        union: set[bytes] = set()
        for state in states:
            union |= set(state.split(b"\n")) if state else set()
        return b"\n".join(sorted(union))


@pytest.mark.parametrize("prune_after_s", [None, 0.05])
def test_both_sides_of_a_partition_go_on_and_merge_into_one_state(
        prune_after_s: float | None, monkeypatch: pytest.MonkeyPatch) -> None:
    """With `prune_after_s`, each node lets go of unneeded peers' addresses that soon
    after a view (15 s otherwise: a partition that long), and the cut lasts past it: the
    other side must still be reachable at the heal. Node.prune_peers used to keep only
    the current view's members, so a merge probe to the other side raised "send to
    unknown peer" in a timer callback and the sides never merged."""
    replicas = {n: Replica() for n in IDS}
    transports = {n: CuttableMemory() for n in IDS}
    prunes: dict[NodeId, int] = dict.fromkeys(IDS, 0)
    if prune_after_s is not None:
        monkeypatch.setattr(node_module, "PRUNE_AFTER_S", prune_after_s)
        prune = Node.prune_peers

        def counted(self: Node) -> None:
            prune(self)
            prunes[self.id] += 1

        monkeypatch.setattr(Node, "prune_peers", counted)

    async def main() -> None:
        nodes = [await Node(transports[n], node=n).start() for n in IDS]
        groups = []
        for node in nodes:
            r = replicas[node.id]
            peers = {o.id: o.address for o in nodes if o is not node}
            groups.append(await Group(
                "g", ordering="sequencer", host=node, peers=peers,
                options=OrderingOptions(detector=DETECTOR), partitions="evs",
                on_deliver=r.on_deliver, get_state=r.get_state, set_state=r.set_state,
                on_view=r.views.append, merge_state=Replica.merge_state,
            ).open())
        by_id = {g.node: g for g in groups}
        for g in groups:
            await g.broadcast(b"before " + g.node.encode())
        await until(lambda: all(len(r.lines) == 4 for r in replicas.values()), 20)

        for n in IDS:  # cut {n1, n2} | {n3, n4}
            transports[n].blocked = RIGHT if n in LEFT else LEFT
        pruned = dict(prunes)
        await until(lambda: all(
            r.views and set(r.views[-1].members) == (LEFT if n in LEFT else RIGHT)
            for n, r in replicas.items()), 20)
        for n in IDS:  # each side orders its own broadcasts while cut
            await by_id[n].broadcast(b"during " + n.encode())
        await until(lambda: all(len(r.lines) == 6 for r in replicas.values()), 20)
        if prune_after_s is not None:  # every node pruned after its side's view
            await until(lambda: all(prunes[n] > pruned[n] for n in IDS), 20)
            for node in nodes:  # ...and kept the other side's addresses
                assert all(node.peer_url(o) is not None for o in IDS if o != node.id)

        for n in IDS:
            transports[n].blocked = set()
        await until(lambda: all(
            r.views and set(r.views[-1].members) == set(IDS) and len(r.lines) == 8
            for r in replicas.values()), 40)
        for g in groups:
            await g.broadcast(b"after " + g.node.encode())
        await until(lambda: all(len(r.lines) == 12 for r in replicas.values()), 20)
        for g in groups:
            await g.close()
        for node in nodes:
            await node.close()

    asyncio.run(main())
    states = {n: r.get_state() for n, r in replicas.items()}
    assert len(set(states.values())) == 1, states
    expected = {b"%s %s" % (when, n.encode()) for n in IDS
                for when in (b"before", b"during", b"after")}
    assert replicas["n1"].lines == expected
    merge_views = {r.views[-1] for r in replicas.values()}
    assert len(merge_views) == 1  # the same merge view everywhere


THREE = ("n1", "n2", "n3")


def test_a_removed_members_address_goes_once_the_channel_forgot_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A runtime node lets go of a removed member's address once its group's channel let
    go of it (abcast.runtime.node, `prune_peers`: "a removed or crashed member, once its
    group's channel let go of it too"). Under evs the channel keeps a removed member for the
    merge's probing time plus a linger (70 s by default), longer than the prune that follows
    a view (PRUNE_AFTER_S, 15 s): that prune keeps it, and no later one comes until the next
    view — so in a group that stays as it is, a crashed member's address is kept for good.
    Here the times are shrunk keeping their order (prune 0.05 s after a view, merge probes
    for 0.2 s, the removed linger 0.3 s)."""
    monkeypatch.setattr(node_module, "PRUNE_AFTER_S", 0.05)
    monkeypatch.setattr(registry_module, "removed_linger_us", lambda opts: 300_000)
    monkeypatch.setattr(registry_module, "MembershipConfig",
                        lambda **kw: MembershipConfig(probe_for_us=200_000, **kw))
    transports = {n: CuttableMemory() for n in THREE}

    async def main() -> tuple[bool, str | None]:
        nodes = [await Node(transports[n], node=n).start() for n in THREE]
        groups = []
        for node in nodes:
            peers = {o.id: o.address for o in nodes if o is not node}
            groups.append(await Group(
                "g", ordering="sequencer", host=node, peers=peers,
                options=OrderingOptions(detector=DETECTOR), partitions="evs").open())
        n1 = nodes[0]
        stack = n1._groups["g"].stack
        await until(lambda: set(stack.view.members) == set(THREE), 20)
        for n in THREE:  # n3 goes silent (crashed, as far as the others can tell)
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
