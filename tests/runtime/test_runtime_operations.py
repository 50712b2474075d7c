"""Operating a live group: `/metrics` scraped during a run agrees with the trace, and
`abcast probe --json` returns every layer's snapshot of every node of a 3-node group."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from abcast import Group, Node
from abcast.testing.polling import until
from abcast.trace.recorder import TraceRecorder

pytestmark = pytest.mark.timeout(60)

IDS = ("n1", "n2", "n3")


_until = functools.partial(until, timeout_s=15.0)


async def _cluster(ordering: str, recorder: TraceRecorder | None = None, **node_kw: object
                   ) -> tuple[list[Node], list[Group]]:
    nodes = [Node("tcp://127.0.0.1:0", node=n, recorder=recorder, **node_kw)  # type: ignore[arg-type]
             for n in IDS]
    for node in nodes:
        await node.start()
    groups = []
    for node in nodes:
        peers = {other.id: other.address for other in nodes if other is not node}
        groups.append(Group("g", ordering=ordering, host=node, peers=peers,
                            on_deliver=lambda d: None))
    await asyncio.gather(*(g.open() for g in groups))
    return nodes, groups


async def _close(nodes: list[Node], groups: list[Group]) -> None:
    for group in groups:
        await group.close()
    for node in nodes:
        await node.close()


async def _scrape(url: str) -> str:
    host, _, rest = url.removeprefix("http://").partition(":")
    port = int(rest.split("/", 1)[0])
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n")
    await writer.drain()
    data = await reader.read()
    writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    return body.decode()


def _samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    from prometheus_client.parser import text_string_to_metric_families

    out: dict[tuple[tuple[str, str], ...], float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                out[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def test_metrics_scraped_during_a_run_count_what_the_trace_holds() -> None:
    recorder = TraceRecorder("ops-metrics")
    per_node = 40

    async def main() -> tuple[str, str]:
        nodes, groups = await _cluster("sequencer", recorder, metrics_port=0)
        try:
            assert all(n.metrics_url for n in nodes)
            for k in range(per_node):
                for g in groups:
                    await g.broadcast(f"{k}".encode())
            total = per_node * len(groups)
            await _until(lambda: all(g.driver.delivered == total for g in groups))
            mid_run = await _scrape(nodes[0].metrics_url or "")
            return mid_run, await _scrape(nodes[2].metrics_url or "")
        finally:
            await _close(nodes, groups)

    first, third = asyncio.run(main())
    rows = Counter(r.node for r in recorder.rows() if r.kind == "deliver")
    for node, text in (("n1", first), ("n3", third)):
        delivered = _samples(text, "abcast_messages_delivered_total")
        key = (("group", "g"), ("node", node), ("stage", "final"))
        assert delivered[key] == rows[node] == per_node * 3
        sent = _samples(text, "abcast_messages_broadcast_total")
        assert sent[(("group", "g"), ("node", node))] == per_node
        assert _samples(text, "abcast_view_members")[(("group", "g"), ("node", node))] == 3
        latency = _samples(text, "abcast_delivery_latency_seconds_count")
        assert latency[(("group", "g"), ("node", node))] >= 1
        frames = _samples(text, "abcast_peer_frames_total")
        assert {dict(k)["peer"] for k in frames} == set(IDS) - {node}
        layers = {dict(k)["layer"] for k in _samples(text, "abcast_holdback_messages")}
        assert {"open-channel", "open-fd", "membership", "sequencer"} == layers


def test_peer_traffic_counts_a_multicast_frame_once_for_each_of_its_peers() -> None:
    """One frame to several peers (Node.transmit_many, the path of every ordered batch)
    counts as one frame and its bytes for each destination, beside what went to a peer
    alone; with metrics off nothing is counted at all."""
    from abcast.runtime.status import peer_traffic

    async def main() -> tuple[dict[str, tuple[int, int]], dict[str, object]]:
        # Peers that never answer: the frames wait in the transport, nobody refuses them.
        node = await Node("mem://", node="n1", metrics_port=0).start()
        quiet = await Node("mem://", node="n9").start()
        try:
            for each in (node, quiet):
                each.add_peers({"n2": "mem://ops-nowhere-2", "n3": "mem://ops-nowhere-3"})
                each.transmit_many(("n2", "n3"), b"x" * 100)
                each.transmit_many(("n2", "n3"), b"y" * 10)
                each.transmit("n2", b"z" * 7)
            counted = {peer: (t.frames_out, t.bytes_out)
                       for peer, t in peer_traffic(node).items()}
            return counted, peer_traffic(quiet)  # type: ignore[return-value]
        finally:
            await node.close()
            await quiet.close()

    counted, off = asyncio.run(main())
    assert counted == {"n2": (3, 117), "n3": (2, 110)}
    assert off == {}


def test_node_ids_a_remote_claims_do_not_become_peer_labels_one_by_one() -> None:
    """Every node id a remote claims (a connection each, no secret needed) got its own
    entry in the traffic table, so its own `peer` label on abcast_peer_frames_total and
    abcast_peer_bytes_total: memory and series without bound. Peers the node has no
    address of count together under OTHER_PEERS; a peer it knows keeps its own."""
    from abcast.codec import encode_frame
    from abcast.runtime.node import OTHER_PEERS
    from abcast.runtime.status import peer_traffic
    from abcast.stack import Packet
    from abcast.transport import TransportOptions, transport_from_url

    async def main() -> dict[str, tuple[int, int]]:
        node = await Node("mem://", node="n1", metrics_port=0).start()
        claimed = []
        try:
            for i in range(20):
                fake = transport_from_url("mem://", TransportOptions())
                await fake.start(f"fake{i}", lambda link, data: None)
                fake.add_peer("n1", node.address)
                fake.send("n1", encode_frame("nosuchgroup", f"fake{i}", Packet((), b"")))
                claimed.append(fake)
            await _until(lambda: node.stats.unknown_group_frames == 20)
            node.add_peers({"fake0": claimed[0].address})  # now a peer it knows
            claimed[0].send("n1", encode_frame("nosuchgroup", "fake0", Packet((), b"")))
            await _until(lambda: node.stats.unknown_group_frames == 21)
            return {peer: (t.frames_in, t.frames_out)
                    for peer, t in peer_traffic(node).items()}
        finally:
            for fake in claimed:
                await fake.close()
            await node.close()

    assert asyncio.run(main()) == {OTHER_PEERS: (20, 0), "fake0": (1, 0)}


def test_the_naks_family_counts_the_nak_channels_naks_too() -> None:
    """abcast_naks_total summed the ack channel's `gap_acks` only: over udp:// (the NAK
    channel, whose counter is `naks_sent`) it stayed 0 while the channel NAKed (43-54
    NAKs, 0 counted, in /tmp/runfix/h_naks_metric.py's runs at loss=0.3)."""
    from abcast.runtime.metrics import families
    from abcast.runtime.status import GroupStatus, NodeStatus
    from abcast.snapshot import LayerSnapshot

    def naks(*layers: LayerSnapshot) -> float:
        counters = dict.fromkeys(("broadcasts", "delivered", "opt_delivered",
                                  "protocol_packets", "control_packets", "retransmissions",
                                  "bad_batches", "app_errors", "snapshots", "views"), 0)
        group = GroupStatus(name="g", view_id=1, members=["n1"], leader="n1", closed=False,
                            layers=list(layers), counters=counters)
        status = NodeStatus(node="n1", address="udp://x", pid=1, groups=[group],
                            counters={}, config={})
        family = next(f for f in families(status, {}) if f.name == "abcast_naks")
        return sum(sample.value for sample in family.samples)

    assert naks(LayerSnapshot(layer="nak", counters={"naks_sent": 7})) == 7
    assert naks(LayerSnapshot(layer="reliable", counters={"gap_acks": 3}),
                LayerSnapshot(layer="fifo", counters={"naks_received": 5})) == 3


def test_a_leave_is_one_flush_in_the_flush_duration_histogram() -> None:
    """n3 leaves: n1 and n2 each count one flush, as long as the flush really took, in
    `abcast_flush_duration_seconds` (and nothing before it: the first view is no flush)."""

    async def main() -> tuple[str, str, list[int]]:
        nodes, groups = await _cluster("sequencer", metrics_port=0)
        try:
            before = await _scrape(nodes[0].metrics_url or "")
            await groups[2].leave()
            await _until(lambda: all(len(g.driver.stack.view.members) == 2
                                     for g in groups[:2]))
            after = await _scrape(nodes[0].metrics_url or "")
            return before, after, [g.driver.views for g in groups[:2]]
        finally:
            await _close(nodes, groups)

    before, after, views = asyncio.run(main())
    key = (("group", "g"), ("node", "n1"))
    assert _samples(before, "abcast_flush_duration_seconds_count")[key] == 0
    assert _samples(after, "abcast_flush_duration_seconds_count")[key] == 1
    assert views[0] == 2  # the first view and the one without n3
    assert _samples(after, "abcast_flush_duration_seconds_sum")[key] > 0


def test_probe_json_returns_every_layer_snapshot_of_a_live_three_node_group(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "probe"

    async def main() -> list[dict[str, object]]:
        os.environ["ABCAST_PROBE_DIR"] = str(folder)
        try:
            nodes, groups = await _cluster("sequencer", probe=True)
        finally:
            del os.environ["ABCAST_PROBE_DIR"]
        try:
            for g in groups:
                await g.broadcast(b"x")
            await _until(lambda: all(g.driver.delivered == 3 for g in groups))
            # The CLI in another process, while this loop keeps the nodes answering.
            proc = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "abcast.cli", "probe", "--json", "--dir", str(folder),
                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            out, err = await proc.communicate()
            assert proc.returncode == 0, err.decode()
            statuses: list[dict[str, object]] = json.loads(out.decode().splitlines()[-1])
            return statuses
        finally:
            await _close(nodes, groups)

    statuses = asyncio.run(main())
    assert sorted(s["node"] for s in statuses) == list(IDS)
    expected_layers: list[str] | None = None
    for status in statuses:
        (group,) = status["groups"]  # type: ignore[misc]
        assert group["name"] == "g" and group["members"] == list(IDS)
        assert group["leader"] == "n1" and group["view_id"] == 1
        assert group["config"]["ordering"] == "sequencer"
        layers = [layer["layer"] for layer in group["layers"]]
        expected_layers = expected_layers or layers
        assert layers == expected_layers == ["open-fd", "open-channel", "membership", "sequencer"]
        assert group["counters"]["delivered"] == 3
        channel = next(layer for layer in group["layers"] if layer["layer"] == "open-channel")
        assert set(channel["clock"]["out"]) == set(IDS) - {status["node"]}
    assert not list(folder.glob("*.sock"))  # closed nodes take their sockets with them


def test_json_logs_are_one_object_per_line_with_node_group_view_and_event() -> None:
    import io
    import logging

    from abcast.logs import CONTEXT_FIELDS, JsonFormatter

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(JsonFormatter())
    root = logging.getLogger("abcast")
    old_level = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)

    async def main() -> None:
        nodes, groups = await _cluster("fifo")
        await _close(nodes, groups)

    try:
        asyncio.run(main())
    finally:
        root.removeHandler(handler)
        root.setLevel(old_level)
    entries = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert entries and all(set(CONTEXT_FIELDS) <= set(e) for e in entries)
    assert all(e["logger"].startswith("abcast.") for e in entries)
    views = [e for e in entries if e["event"] == "view"]
    assert sorted(e["node"] for e in views) == list(IDS)
    assert all(e["group"] == "g" and e["view"] == 1 for e in views)
    assert {e["logger"] for e in views} == {"abcast.runtime.driver"}


def test_a_probe_request_line_past_the_readers_limit_gets_an_answer_not_a_traceback(
    tmp_path: Path, caplog: pytest.LogCaptureFixture,
) -> None:
    """A request line longer than the stream reader's limit (64 KiB) made readline raise
    ValueError, which the probe server did not catch: asyncio logged an unhandled
    exception with its traceback and the client got no answer. Now it is an unknown
    request like any other."""

    async def main() -> bytes:
        path = tmp_path / "n1.sock"
        async with Node("mem://", node="n1", probe=str(path)) as node:
            assert node.running
            reader, writer = await asyncio.open_unix_connection(str(path))
            writer.write(b"s" * (100 * 1024) + b"\n")
            async with asyncio.timeout(10):
                answer = await reader.read()
            writer.close()
            return answer

    with caplog.at_level("ERROR"):
        answer = asyncio.run(main())
    assert json.loads(answer) == {"error": "unknown request"}
    assert [r for r in caplog.records if r.levelname == "ERROR"] == []
