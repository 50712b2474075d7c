"""Extended virtual synchrony on the real runtime: four nodes in one process over mem://
transports that can be cut in two. During the cut each side keeps ordering its own
broadcasts; after the heal every node installs one merge view holding all four and the
state the application's `merge_state` made of the two sides — so every replica ends
equal and holds both sides' partition-time messages."""

from __future__ import annotations

import asyncio
import contextlib

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


def _shrunk(monkeypatch: pytest.MonkeyPatch) -> None:
    """The times shrunk keeping their order: a prune 0.05 s after a view, merge probes
    every 0.05 s for 0.2 s and then every 0.25 s, a removed member's linger 0.3 s."""
    monkeypatch.setattr(node_module, "PRUNE_AFTER_S", 0.05)
    monkeypatch.setattr(registry_module, "removed_linger_us", lambda opts: 300_000)
    monkeypatch.setattr(registry_module, "MembershipConfig", lambda **kw: MembershipConfig(
        probe_us=50_000, probe_for_us=200_000, probe_slow_us=250_000, **kw))


async def _three(transports: dict[NodeId, CuttableMemory]) -> tuple[list[Node], list[Group]]:
    nodes = [await Node(transports[n], node=n).start() for n in THREE]
    groups = []
    for node in nodes:
        peers = {o.id: o.address for o in nodes if o is not node}
        groups.append(await Group(
            "g", ordering="sequencer", host=node, peers=peers,
            options=OrderingOptions(detector=DETECTOR), partitions="evs").open())
    stack = nodes[0]._groups["g"].stack
    await until(lambda: set(stack.view.members) == set(THREE), 20)
    return nodes, groups


def test_a_leavers_address_goes_once_the_channel_forgot_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A runtime node lets go of a member's address once no group talks to it
    (abcast.runtime.node, `prune_peers`). n3 leaves gracefully: n1's flush, which n2 and
    n3 answer, lets it go, each channel forgets it after its linger, and nobody probes it
    (a leaver is gone for good: abcast.membership.discovery), so n1 and n2 drop its
    address. (Crashed or cut off, it would be probed for ever, its address kept: the next
    test.)"""
    _shrunk(monkeypatch)
    transports = {n: CuttableMemory() for n in THREE}

    async def main() -> dict[NodeId, str | None]:
        nodes, groups = await _three(transports)
        stacks = [node._groups["g"].stack for node in nodes[:2]]
        await groups[2].leave()
        await until(lambda: all(set(s.view.members) == {"n1", "n2"} for s in stacks), 20)
        await until(lambda: all("n3" not in s.peers() for s in stacks), 20)  # forgotten
        with contextlib.suppress(TimeoutError):
            await until(lambda: all(node.peer_url("n3") is None for node in nodes[:2]), 3)
        urls = {node.id: node.peer_url("n3") for node in nodes[:2]}
        for g in groups:
            await g.close()
        for node in nodes:
            await node.close()
        return urls

    urls = asyncio.run(main())
    assert urls == {"n1": None, "n2": None}, "n3's address kept after its channel forgot it"


def test_a_member_cut_off_longer_than_the_fast_probing_merges_back_on_heal(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """n3 is cut off from n1 and n2 for longer than the merge's fast probing and the
    channel's linger (shrunk: 0.2 s, 0.3 s), and prunes follow: n1 keeps probing n3
    slowly, for ever, so it keeps n3's address (`Stack.peers` holds the nodes the
    membership probes), and on heal the three merge into one view. Probing used to stop
    after `probe_for_us`, the address went with the channel's link (the review's test,
    8e568ac), and the sides stayed apart for good."""
    _shrunk(monkeypatch)
    transports = {n: CuttableMemory() for n in THREE}

    async def main() -> tuple[set[NodeId], set[NodeId]]:
        nodes, groups = await _three(transports)
        n1, n3 = nodes[0], nodes[2]
        stacks = [node._groups["g"].stack for node in nodes]
        for n in THREE:  # n3 goes silent to the others (crashed, as far as they can tell)
            transports[n].blocked = {"n1", "n2"} if n == "n3" else {"n3"}
        await until(lambda: set(stacks[0].view.members) == {"n1", "n2"}, 20)
        await until(lambda: set(stacks[2].view.members) == {"n3"}, 20)
        await asyncio.sleep(1.0)  # past the fast probing and the linger; pruned since
        kept = {p for p in THREE if n1.peer_url(p) is not None or p == "n1"}
        kept |= {p for p in THREE if n3.peer_url(p) is not None and p != "n3"}
        for n in THREE:
            transports[n].blocked = set()
        await until(lambda: all(set(s.view.members) == set(THREE) for s in stacks), 20)
        views = {s.view for s in stacks}
        for g in groups:
            await g.close()
        for node in nodes:
            await node.close()
        return kept, {m for v in views for m in v.members}

    kept, merged = asyncio.run(main())
    assert kept == set(THREE)
    assert merged == set(THREE)
