"""Groups over udp:// with IP multicast on loopback and the NAK channel (its default).

Properties: with 5 % of datagrams lost at every receiver, a sequencer group delivers
every message in one total order with every trace check clean, repairing the loss with
NAKs; a 10 MB broadcast arrives identical at every member; the sequencer's data and
order packets each leave as one datagram write for the whole group; a node on the same
group address hosting no group drops the frames it hears, never the senders' links.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from abcast import Group, Node
from abcast.codec import Envelope
from abcast.ordering.registry import get_ordering
from abcast.reliability.nak import NakChannel
from abcast.testing import check_events
from abcast.testing.polling import until
from abcast.trace.recorder import TraceRecorder
from abcast.transport import Link
from abcast.transport.udp import UdpTransport

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "transport"))
from udp_group import fresh_group, require_multicast

pytestmark = pytest.mark.timeout(120)
IDS = ("n1", "n2", "n3")


_until = functools.partial(until, timeout_s=60.0)


def _run_group(messages: int, payload: Callable[[str, int], bytes], loss: float,
               recorder: TraceRecorder) -> dict[str, list[bytes]]:
    require_multicast()
    group = fresh_group()
    got: dict[str, list[bytes]] = {n: [] for n in IDS}

    async def main() -> None:
        url = f"udp://{group}?ttl=0&loss={loss}"
        nodes = [await Node(url, node=n, recorder=recorder).start() for n in IDS]
        groups = []
        for node in nodes:
            peers = {o.id: o.address for o in nodes if o is not node}
            groups.append(await Group("g", ordering="sequencer", host=node, peers=peers,
                                      on_deliver=lambda d, n=node.id: got[n].append(d.payload)
                                      ).open())
        for k in range(messages):
            for group_ in groups:
                await group_.broadcast(payload(group_.node, k))
            if k % 50 == 49:
                await _until(lambda k=k: all(len(g) >= 3 * (k - 40) for g in got.values()))
        await _until(lambda: all(len(g) == messages * len(IDS) for g in got.values()))
        channels = [layer for g in groups for layer in g.driver.stack.layers
                    if isinstance(layer, NakChannel)]
        assert len(channels) == len(IDS)  # the NAK channel is udp's default
        if loss:
            # loss happened (everything was delivered all the same: repaired). Not that
            # NAKs were sent: when the few datagrams a batched run needs lose only
            # digests, none is (0.95^k of the time: it failed that way once in six).
            assert sum(n.transport.udp_stats.injected_losses for n in nodes
                       if isinstance(n.transport, UdpTransport)) > 0
        for group_ in groups:
            await group_.close()
        for node in nodes:
            assert isinstance(node.transport, UdpTransport)
            assert node.transport.udp_stats.multicast_frames_out > 0
            await node.close()

    asyncio.run(main())
    return got


def test_a_sequencer_group_over_lossy_multicast_delivers_everything_in_one_order() -> None:
    recorder = TraceRecorder("udp-lossy")
    got = _run_group(300, lambda node, k: b"%s-%d" % (node.encode(), k), 0.05, recorder)
    assert got["n1"] == got["n2"] == got["n3"]
    assert len(got["n1"]) == 900
    spec = get_ordering("sequencer")
    assert check_events(recorder.rows(), spec.guarantees, recorder.run_id) == []


def test_a_10_mb_broadcast_arrives_identical_at_every_member_under_5_percent_loss() -> None:
    recorder = TraceRecorder("udp-10mb")
    big = bytes(range(256)) * (10_000_000 // 256)

    def payload(node: str, k: int) -> bytes:
        return node.encode() + big if node == "n2" else b"small"

    got = _run_group(1, payload, 0.05, recorder)
    for node in IDS:
        assert sorted(got[node], key=len)[-1] == b"n2" + big
    assert got["n1"] == got["n2"] == got["n3"]


def _refuse_the_link(node: Node, link: Link, env: Envelope) -> None:
    """The planted bug (the rule before): a frame for a group not hosted drops its link."""
    node.stats.unknown_group_frames += 1
    node._refuse(link, f"frame for unknown group {env.group!r}")


async def _bank_beside_a_bystander(messages: int) -> tuple[list[Node], Node]:
    """Group "bank" on n1..n3 and a node x9 hosting no group, all on one udp:// group
    address: x9 hears every multicast of the bank. The nodes and x9, closed."""
    url = f"udp://{fresh_group()}?ttl=0"
    nodes = [await Node(url, node=n).start() for n in IDS]
    bystander = await Node(url, node="x9").start()
    got = dict.fromkeys(IDS, 0)
    groups = []
    for node in nodes:
        peers = {o.id: o.address for o in nodes if o is not node}
        groups.append(await Group("bank", ordering="sequencer", host=node, peers=peers,
                                  on_deliver=lambda d, n=node.id: got.__setitem__(n, got[n] + 1)
                                  ).open())
    for k in range(messages):
        for group in groups:
            await group.broadcast(b"m%d" % k)
    await _until(lambda: min(got.values()) == messages * len(IDS))
    for group in groups:
        await group.close()
    for node in [*nodes, bystander]:
        await node.close()
    return nodes, bystander


def test_a_node_hosting_another_group_on_the_address_drops_frames_not_links(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """IP multicast reaches every node bound to the address, whatever groups it hosts:
    the bystander counts and drops the bank's frames (one log line per sender) and
    never resets a sender, so no sender starts a new session."""
    require_multicast()
    with caplog.at_level(logging.INFO, logger="abcast.runtime.node"):
        nodes, bystander = asyncio.run(_bank_beside_a_bystander(200))
    assert bystander.stats.unknown_group_frames > 0 and bystander.stats.bad_frames == 0
    transports = [n.transport for n in [*nodes, bystander]]
    assert all(isinstance(t, UdpTransport) for t in transports)
    assert [t.udp_stats.resets_sent for t in transports] == [0] * 4  # type: ignore[attr-defined]
    assert [t.stats.reconnects for t in transports] == [0] * 4
    lines = [r.getMessage() for r in caplog.records if "does not host" in r.getMessage()]
    assert sorted(line.split(" from ")[1].split()[0] for line in lines) == list(IDS)


def test_the_bystander_check_catches_the_planted_drop_the_link_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    require_multicast()
    monkeypatch.setattr(Node, "_unknown_group", _refuse_the_link)
    nodes, bystander = asyncio.run(_bank_beside_a_bystander(200))
    assert bystander.transport.udp_stats.resets_sent > 0  # type: ignore[attr-defined]
    assert sum(n.transport.stats.reconnects for n in nodes) > 0
