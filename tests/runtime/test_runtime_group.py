"""The Group API and the node runtime over real transports (mem and tcp, in one process):
what each node delivers, the trace it writes, several groups on one transport, and bad
input that must cost one connection and nothing else."""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable

import msgspec
import pytest

from abcast import ConfigError, Delivery, Group, LocalProtocolError, Node, RegistryServer
from abcast.codec import Packet, encode_frame
from abcast.ids import NodeId
from abcast.ordering.registry import ORDERINGS, get_ordering
from abcast.ordering.unordered import UData
from abcast.reliability.channel import RData
from abcast.testing import check_events, count_by_code
from abcast.testing.polling import until
from abcast.trace.recorder import TraceRecorder
from abcast.transport import transport_from_url

pytestmark = pytest.mark.timeout(30)

IDS = ("n1", "n2", "n3")


_until = functools.partial(until, timeout_s=10.0)


async def _static_cluster(
    scheme: str, ordering: str, recorder: TraceRecorder | None = None, group: str = "g",
) -> tuple[list[Node], list[Group]]:
    nodes = [Node(f"{scheme}://127.0.0.1:0" if scheme != "mem" else "mem://", node=n,
                  recorder=recorder) for n in IDS]
    for node in nodes:
        await node.start()
    groups = []
    for node in nodes:
        peers = {other.id: other.address for other in nodes if other is not node}
        groups.append(await Group(group, ordering=ordering, host=node, peers=peers).open())
    return nodes, groups


async def _collect(group: Group, count: int) -> list[Delivery]:
    got: list[Delivery] = []
    async for delivery in group.deliveries():
        got.append(delivery)
        if len(got) == count:
            break
    return got


async def _close(nodes: list[Node], groups: list[Group]) -> None:
    for group in groups:
        await group.close()
    for node in nodes:
        await node.close()


@pytest.mark.parametrize("scheme", ["mem", "tcp"])
def test_every_node_delivers_every_message_in_fifo_order_and_the_trace_checks_clean(
    scheme: str,
) -> None:
    recorder = TraceRecorder("rt-fifo")
    per_node = 15

    async def main() -> list[list[Delivery]]:
        nodes, groups = await _static_cluster(scheme, "fifo", recorder)
        try:
            for k in range(per_node):
                for g in groups:
                    await g.broadcast(f"{g.node}:{k}".encode())
            return list(await asyncio.gather(*(_collect(g, per_node * 3) for g in groups)))
        finally:
            await _close(nodes, groups)

    delivered = asyncio.run(main())
    for got in delivered:
        assert sorted((d.origin, d.seq) for d in got) == sorted(
            (o, s) for o in IDS for s in range(1, per_node + 1))
        for origin in IDS:
            seqs = [d.seq for d in got if d.origin == origin]
            assert seqs == sorted(seqs)
            assert next(d.payload for d in got if d.origin == origin) == f"{origin}:0".encode()
    rows = recorder.rows()
    assert {r.kind for r in rows} == {"view", "send", "deliver"}
    assert check_events(rows, get_ordering("fifo").guarantees, "rt-fifo") == []


@pytest.mark.skipif("sequencer" not in ORDERINGS, reason="sequencer not registered yet")
def test_registry_groups_agree_on_one_total_order() -> None:
    async def main() -> list[list[tuple[str, int]]]:
        # The example, verbatim: the size of "bank" is declared at the registry.
        async with RegistryServer(sizes={"bank": 3}) as server:
            async def member(i: int) -> list[tuple[str, int]]:
                async with Group("bank", ordering="sequencer", transport="tcp://127.0.0.1:0",
                                 registry=server.url) as g:
                    assert g.members == IDS and g.leader == "n1"
                    for k in range(10):
                        await g.broadcast(b"deposit %d" % (i * 100 + k))
                    got = [(d.origin, d.seq) for d in await _collect(g, 30)]
                    await asyncio.sleep(0.2)  # let the last acks out before leaving
                    return got

            return list(await asyncio.gather(*(member(i) for i in range(3))))

    orders = asyncio.run(main())
    assert len(orders[0]) == 30 and orders[0] == orders[1] == orders[2]


def test_one_transport_carries_two_groups_and_routes_frames_by_group() -> None:
    async def main() -> tuple[list[list[Delivery]], list[list[Delivery]], list[Node]]:
        nodes, fifo = await _static_cluster("mem", "fifo", group="a")
        other = "sequencer" if "sequencer" in ORDERINGS else "unordered"
        second = []
        for node in nodes:
            peers = {o.id: o.address for o in nodes if o is not node}
            second.append(await Group("b", ordering=other, host=node, peers=peers).open())
        try:
            for g in fifo:
                await g.broadcast(b"a-" + g.node.encode())
            for g in second:
                await g.broadcast(b"b-" + g.node.encode())
            got_a = list(await asyncio.gather(*(_collect(g, 3) for g in fifo)))
            got_b = list(await asyncio.gather(*(_collect(g, 3) for g in second)))
            assert all(sorted(n.groups) == ["a", "b"] for n in nodes)
            return got_a, got_b, nodes
        finally:
            await _close(nodes, [*fifo, *second])

    got_a, got_b, nodes = asyncio.run(main())
    assert all({d.payload for d in got} == {b"a-n1", b"a-n2", b"a-n3"} for got in got_a)
    assert all({d.payload for d in got} == {b"b-n1", b"b-n2", b"b-n3"} for got in got_b)
    assert all(n.stats.bad_frames == 0 for n in nodes)


def test_frames_for_a_group_still_joining_are_held_and_handed_over() -> None:
    async def main() -> tuple[list[Delivery], int]:
        a = await Node("mem://", node="n1").start()
        b = await Node("mem://", node="n2").start()
        gb = await Group("g", ordering="fifo", host=b, peers={"n1": a.address}).open()
        a.reserve("g")  # what Group.open does while it waits for the registry
        for k in range(5):
            await gb.broadcast(b"early %d" % k)  # one loop turn: they leave as one batch
        await _until(lambda: a.stats.held_frames >= 1)
        ga = await Group("g", ordering="fifo", host=a, peers={"n2": b.address}).open()
        got = await _collect(ga, 5)
        held = a.stats.held_frames
        await _close([a, b], [ga, gb])
        return got, held

    got, held = asyncio.run(main())
    assert [d.payload for d in got] == [b"early %d" % k for k in range(5)]
    assert held >= 1


def test_a_group_whose_size_nobody_declared_is_refused_and_leaves_no_trace() -> None:
    async def main() -> None:
        async with RegistryServer() as server:
            with pytest.raises(ConfigError, match="no declared size"):
                await Group("g", transport="mem://", registry=server.url).open()
            assert server.group_info("g").members == {}  # the failed join was undone

    asyncio.run(main())


# ---------------------------------------------------------------- bad input


def _frame_for(group: str, sender: str) -> bytes:
    return encode_frame(group, sender, Packet((RData(1), UData(1)), b"x"))


BAD_FRAMES: dict[str, tuple[Callable[[], bytes], str]] = {
    "garbage": (lambda: b"\xc1\x00 not msgpack", "not an abcast frame"),
    "unknown-message-type": (
        lambda: msgspec.msgpack.encode([1, "g", "x9", 0, [msgspec.msgpack.encode(["Bogus", 1])],
                                        b""]),
        "bad header",
    ),
    "spoofed-sender": (lambda: _frame_for("g", "n2"), "claims sender 'n2'"),
}


@pytest.mark.parametrize("case", sorted(BAD_FRAMES))
def test_a_bad_frame_drops_that_connection_and_the_group_keeps_working(
    case: str, caplog: pytest.LogCaptureFixture,
) -> None:
    make, reason = BAD_FRAMES[case]

    async def main() -> tuple[int, int, list[Delivery]]:
        nodes, groups = await _static_cluster("mem", "fifo")
        n1 = nodes[0]
        intruder = transport_from_url("mem://")
        await intruder.start("x9", lambda _link, _frame: None)
        try:
            await groups[1].broadcast(b"before")
            intruder.add_peer("n1", n1.address)
            intruder.send("n1", make())
            await _until(lambda: n1.transport.stats.dropped_connections == 1)
            await groups[1].broadcast(b"after")
            got = await _collect(groups[0], 2)
            return n1.stats.bad_frames, n1.transport.stats.bad_frames, got
        finally:
            await intruder.close()
            await _close(nodes, groups)

    with caplog.at_level(logging.WARNING, logger="abcast.transport"):
        runtime_bad, transport_bad, got = asyncio.run(main())
    assert runtime_bad == 1 and transport_bad == 1
    assert [(d.origin, d.payload) for d in got] == [("n2", b"before"), ("n2", b"after")]
    drops = [r.getMessage() for r in caplog.records if "dropped connection" in r.getMessage()]
    assert len(drops) == 1 and reason in drops[0]


@pytest.mark.parametrize("scheme", ["mem", "tcp"])
def test_a_frame_for_a_group_not_hosted_here_is_dropped_and_the_link_kept(
    scheme: str, caplog: pytest.LogCaptureFixture,
) -> None:
    """A member's frames for a group n1 does not host, on the link that carries group g:
    each is counted and dropped, one log line, and g goes on over the same connection."""

    async def main() -> tuple[Node, Node, list[Delivery]]:
        nodes, groups = await _static_cluster(scheme, "fifo")
        n1, n2 = nodes[0], nodes[1]
        try:
            await groups[1].broadcast(b"before")
            for _ in range(3):
                n2.transport.send("n1", _frame_for("nope", "n2"))
            await _until(lambda: n1.stats.unknown_group_frames == 3)
            await groups[1].broadcast(b"after")
            return n1, n2, await _collect(groups[0], 2)
        finally:
            await _close(nodes, groups)

    with caplog.at_level(logging.INFO, logger="abcast"):
        n1, n2, got = asyncio.run(main())
    assert [(d.origin, d.payload) for d in got] == [("n2", b"before"), ("n2", b"after")]
    assert n1.stats.bad_frames == 0 and n1.transport.stats.dropped_connections == 0
    assert n2.transport.stats.reconnects == 0
    lines = [r.getMessage() for r in caplog.records if "does not host" in r.getMessage()]
    assert len(lines) == 1 and "'nope'" in lines[0]


# ---------------------------------------------------------------- a planted fault


def test_the_runtime_trace_exposes_a_planted_ordering_bug() -> None:
    """A 'fifo' that delivers each origin's messages pairwise swapped: the trace the
    runtime writes must show FIFO_ORDER violations, one per swapped pair."""
    from abcast.effects import Deliver, Effect
    from abcast.ordering.fifo import Fifo
    from abcast.reliability.channel import ReliableChannel
    from abcast.runtime.driver import GroupDriver
    from abcast.stack import Stack

    class SwappingFifo(Fifo):
        """Holds each odd message back until the even one after it is delivered."""

        held: Deliver | None = None

        def on_message(self, origin: NodeId, seq: int, payload: bytes) -> list[Effect]:
            if seq % 2:
                self.held = Deliver(origin, seq, payload)
                return []
            assert self.held is not None
            return [Deliver(origin, seq, payload), self.held]

    recorder = TraceRecorder("planted")

    async def main() -> None:
        from abcast.ids import View

        a = await Node("mem://", node="n1", recorder=recorder).start()
        b = await Node("mem://", node="n2", recorder=recorder).start()
        view = View(1, ("n1", "n2"))
        drivers = {}
        for node, peer in ((a, b), (b, a)):
            node.add_peers({peer.id: peer.address})
            stack = Stack(node.id, "g", [ReliableChannel(node.id), SwappingFifo(node.id)], view)
            drivers[node.id] = GroupDriver(node, stack)
            node.attach(drivers[node.id])
        for k in range(4):
            drivers["n1"].broadcast(b"m%d" % k)
            drivers["n1"].flush()  # one ordered message each, so the swap reorders them
        await _until(lambda: recorder.count("n2", "deliver") >= 4)
        await a.close()
        await b.close()

    asyncio.run(main())
    counts = count_by_code(check_events(recorder.rows(), ("integrity", "fifo"), "planted"))
    assert counts.get("FIFO_ORDER", 0) >= 2


# ---------------------------------------------------------------- API misuse


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Group("g", ordering="nope", node="n1", peers={}), "unknown ordering"),
        (lambda: Group("g", node="n1"), "needs peers"),
        (lambda: Group("g", peers={"n2": "mem://x"}), "needs node="),
        (lambda: Group("g", node="n1", peers={"n2": "mem://x"}, size=3), "size=3"),
        (lambda: Group("", node="n1", peers={}), "group name"),
    ],
)
def test_bad_group_configuration_is_refused_up_front(
    make: Callable[[], Group], message: str,
) -> None:
    with pytest.raises(ConfigError, match=message):
        make()


def test_using_a_group_outside_its_lifetime_is_a_local_error() -> None:
    async def main() -> None:
        seen: list[Delivery] = []
        group = Group("g", transport="mem://", node="n1", peers={}, on_deliver=seen.append)
        with pytest.raises(LocalProtocolError, match="not open"):
            await group.broadcast(b"x")
        async with group:
            await group.broadcast(b"solo")
            with pytest.raises(LocalProtocolError, match="on_deliver"):
                await anext(group.deliveries())
        assert [d.payload for d in seen] == [b"solo"]
        with pytest.raises(LocalProtocolError, match="closed"):
            group.broadcast_nowait(b"late")

    asyncio.run(main())
