"""Prometheus metrics of a node: `Node(..., metrics_port=9464)` serves `/metrics`.

Rules: off by default, and then nothing here is imported or run. On, almost everything
is read at scrape time from what the node keeps anyway (`abcast.runtime.status`: the
drivers' and transports' counters, `Stack.inspect()` per group) by one custom collector,
so the hot path pays nothing for it. Four things are counted only while metrics are on,
in plain ints and dicts, never through prometheus_client's own metric objects: frames
and bytes per peer (abcast.runtime.node, once per frame; a multicast frame once under
its destination set; both tables made bounded by the server: status.PeerCounts,
MulticastTraffic),
back-pressure waits, and per
group a `GroupMeter`, once per ordered batch — the batch sizes, the latency from
broadcast to delivery at the origin (sampled: one batch followed at a time), and how
long view-change flushes take (the ordering's phase, looked at after a frame or timer at
most once a millisecond). The HTTP endpoint runs on the node's own asyncio loop (no
thread), so a scrape reads a consistent instant; a scraper that does not read its reply
within status.WRITE_TIMEOUT_S is reset (status.answer_once).

Names follow Prometheus conventions (`abcast_…_total` counters, `_seconds`/`_bytes` in
base units, labels `node`, `group`, `peer`, `layer`); docs/operations.md lists them.
prometheus_client is imported only when a node is first scraped.
"""

from __future__ import annotations

import asyncio
import logging
from bisect import bisect_left
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Final, Protocol

from abcast.runtime.status import (
    MulticastTraffic,
    NodeStatus,
    ObservedGroup,
    ObservedNode,
    PeerCounts,
    answer_once,
    node_status,
)

log: Final = logging.getLogger(__name__)

#: delivery latency buckets, seconds (loopback µs to WAN seconds)
LATENCY_BUCKETS_S: Final = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025,
                            0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)
#: batch size buckets, messages
BATCH_BUCKETS: Final = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 4096)
#: view-change flush buckets, seconds (a loopback flush to a slow WAN one)
FLUSH_BUCKETS_S: Final = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5,
                          5.0, 10.0, 30.0)
#: a latency sample whose delivery has not come after this long (µs) is given up (its
#: batch was lost with a view, or numbering restarted on a rejoin) and a new one taken
SAMPLE_GIVEN_UP_US: Final = 10_000_000
#: the ordering's phase is looked at after a frame or timer at most this often (µs): a
#: flush's start is known to within it, and most frames and timers skip the look
WATCH_EVERY_US: Final = 1_000


class Buckets:
    """A histogram's counts (per bucket, not cumulative), sum and count: plain ints and
    floats, cumulated only when scraped."""

    __slots__ = ("bounds", "count", "counts", "total")

    def __init__(self, bounds: Sequence[float]) -> None:
        self.bounds = tuple(bounds)
        self.counts = [0] * (len(self.bounds) + 1)
        self.total = 0.0
        self.count = 0

    @classmethod
    def of(cls, bounds: Sequence[float], times: Mapping[int, int]) -> Buckets:
        """The histogram of values seen `times[value]` times each."""
        made = cls(bounds)
        for value, n in times.items():
            made.counts[bisect_left(made.bounds, value)] += n
            made.total += value * n
            made.count += n
        return made

    def observe(self, value: float) -> None:
        self.counts[bisect_left(self.bounds, value)] += 1
        self.total += value
        self.count += 1

    def cumulative(self) -> list[tuple[str, float]]:
        out: list[tuple[str, float]] = []
        running = 0
        for bound, n in zip((*map(_le, self.bounds), "+Inf"), self.counts, strict=True):
            running += n
            out.append((bound, running))
        return out


def _le(bound: float) -> str:
    return repr(float(bound))


class Clock(Protocol):
    def now_us(self) -> int: ...


class GroupMeter:
    """What a group's driver measures while metrics are on (see the rules above), at a
    cost per ordered batch of a dict update and a comparison or two:

    - batch sizes: how many batches of each size, bucketed when scraped;
    - delivery latency, sampled: one batch at a time is followed, the first one this
      node broadcasts while no sample awaits its own delivery, from its broadcast to the
      delivery of its first message here; its `_count` is the samples taken, not the
      messages (at saturation a few thousand a second, at low rates every batch);
    - view-change flushes: from the frame or timer after which the ordering's phase
      (`Layer.inspect()`'s, e.g. the membership layer's "member, flushing"; an evs
      merge counts as one) names a flush, to the view this node installs at its end. A
      flush given up without a view (the phase goes back without one) is not counted.
      The driver looks only once `look_at` has passed (WATCH_EVERY_US after the last
      look), so most frames pay one comparison."""

    __slots__ = ("_flush_began", "_sample_seq", "_sample_us", "_sizes", "flushes", "latency",
                 "look_at")

    def __init__(self) -> None:
        self.latency = Buckets(LATENCY_BUCKETS_S)
        self.flushes = Buckets(FLUSH_BUCKETS_S)
        self._sizes: dict[int, int] = {}  # batch size -> batches of that size
        self._sample_seq: int | None = None  # the followed batch's first message
        self._sample_us = 0  # ...and when it was broadcast
        self._flush_began: int | None = None
        #: node time (µs) from which the next frame or timer looks at the phase again
        self.look_at = 0

    @property
    def batches(self) -> Buckets:
        return Buckets.of(BATCH_BUCKETS, self._sizes)

    def sent(self, first_seq: int, size: int, now_us: int) -> None:
        sizes = self._sizes
        sizes[size] = sizes.get(size, 0) + 1
        if self._sample_seq is None or now_us - self._sample_us > SAMPLE_GIVEN_UP_US:
            self._sample_seq, self._sample_us = first_seq, now_us

    def delivered(self, first_seq: int, clock: Clock) -> None:
        """This node's own batch starting at `first_seq` was delivered (final) here."""
        sample = self._sample_seq
        if sample is not None and first_seq >= sample:  # own batches deliver in order
            if first_seq == sample:
                self.latency.observe((clock.now_us() - self._sample_us) / 1e6)
            self._sample_seq = None  # (past it: delivered inside another batch, unmeasured)

    def watch(self, top: object, now_us: int) -> None:
        """After a frame or a timer: note when the top layer's phase starts naming a
        flush, forget it when it stops naming one without a view."""
        self.look_at = now_us + WATCH_EVERY_US
        flushing = "flush" in getattr(top, "phase", "")
        if flushing:
            if self._flush_began is None:
                self._flush_began = now_us
        elif self._flush_began is not None:
            self._flush_began = None

    def view_installed(self, now_us: int) -> None:
        """A view installed: the end of the flush under way, if one was."""
        began, self._flush_began = self._flush_began, None
        if began is not None:
            self.flushes.observe((now_us - began) / 1e6)


class MeteredGroup(ObservedGroup, Protocol):
    """A group's driver as the collector reads it: its status and its meter."""

    @property
    def meter(self) -> GroupMeter | None: ...


class MeteredNode(ObservedNode, Protocol):
    """A node as the collector reads it (abcast.runtime.node.Node), and its traffic
    tables, which the metrics server makes (bounded ones: PeerCounts, MulticastTraffic)."""

    traffic: dict[str, list[int]] | None
    multicast_traffic: dict[tuple[str, ...], list[int]] | None

    def drivers(self) -> Sequence[MeteredGroup]: ...
    def peer_url(self, peer: str) -> str | None: ...


# ------------------------------------------------------------------------ the collector

_GROUP_COUNTERS: Final = {
    # driver counter -> (metric, help)
    "broadcasts": ("abcast_messages_broadcast", "Messages broadcast by this node."),
    "protocol_packets": ("abcast_protocol_packets_sent",
                         "Protocol packets sent (per destination)."),
    "control_packets": ("abcast_control_packets_sent",
                        "Control packets sent: acks, retransmissions, heartbeats."),
    "retransmissions": ("abcast_retransmissions", "Packets sent again by the reliable channel."),
    "bad_batches": ("abcast_decode_errors",
                    "Delivered messages whose batch did not decode (skipped)."),
    "app_errors": ("abcast_application_errors",
                   "Application callbacks (deliveries, views, states) that raised."),
    "snapshots": ("abcast_state_transfers", "States handed to joiners."),
    "views": ("abcast_view_changes", "Views installed on this node."),
}
#: families summed across layers from the layers' own counters: family -> (metric, help,
#: the counters it sums); NAKs are the ack channel's gap acks or the NAK channel's NAKs
_LAYER_SUMS: Final = {
    "suspicions": ("abcast_suspicions", "Peers suspected by the failure detector.",
                   ("suspicions",)),
    "naks": ("abcast_naks", "NAKs sent by the channel: the reliable channel's acks naming "
             "packets above a gap, or the NAK channel's NAKs (udp://).",
             ("gap_acks", "naks_sent")),
}
#: layer counter -> the _LAYER_SUMS family it counts in
_SUMMED: Final = {counter: family for family, (_, _, counters) in _LAYER_SUMS.items()
                  for counter in counters}


def families(status: NodeStatus, meters: dict[str, GroupMeter]) -> Iterator[Any]:
    """The metric families of one node's status (and its groups' meters)."""
    from prometheus_client.core import (
        CounterMetricFamily,
        GaugeMetricFamily,
        HistogramMetricFamily,
    )

    node = status.node
    delivered = CounterMetricFamily("abcast_messages_delivered", "Messages delivered, by stage.",
                                    labels=["node", "group", "stage"])
    named = {key: CounterMetricFamily(name, doc, labels=["node", "group"])
             for key, (name, doc) in _GROUP_COUNTERS.items()}
    sums = {key: CounterMetricFamily(name, doc, labels=["node", "group"])
            for key, (name, doc, _) in _LAYER_SUMS.items()}
    layer_counts = CounterMetricFamily("abcast_layer_events", "Every layer's own counters.",
                                       labels=["node", "group", "layer", "counter"])
    holdback = GaugeMetricFamily("abcast_holdback_messages",
                                 "Messages held back by a layer, waiting to be delivered.",
                                 labels=["node", "group", "layer"])
    view_id = GaugeMetricFamily("abcast_view_id", "The installed view's id.",
                                labels=["node", "group"])
    view_size = GaugeMetricFamily("abcast_view_members", "Members of the installed view.",
                                  labels=["node", "group"])
    leader = GaugeMetricFamily("abcast_is_leader", "1 on the view's leader (lowest member).",
                               labels=["node", "group"])
    latency = HistogramMetricFamily(
        "abcast_delivery_latency_seconds",
        "Broadcast to delivery at the origin, sampled: the first message of one batch "
        "followed at a time (its _count: the samples).",
        labels=["node", "group"])
    batch = HistogramMetricFamily("abcast_batch_messages", "Messages per ordered batch.",
                                  labels=["node", "group"])
    flush = HistogramMetricFamily(
        "abcast_flush_duration_seconds",
        "View-change flushes on this node, from its ordering entering the flush to the view "
        "it installs (its _count: the flushes).", labels=["node", "group"])
    for g in status.groups:
        labels = [node, g.name]
        delivered.add_metric([*labels, "final"], g.counters["delivered"])
        delivered.add_metric([*labels, "optimistic"], g.counters["opt_delivered"])
        for key, family in named.items():
            family.add_metric(labels, g.counters[key])
        totals = dict.fromkeys(_LAYER_SUMS, 0)
        for layer in g.layers:
            holdback.add_metric([*labels, layer.layer], len(layer.holdback))
            for counter, value in layer.counters.items():
                layer_counts.add_metric([*labels, layer.layer, counter], value)
                summed = _SUMMED.get(counter)
                if summed is not None:
                    totals[summed] += value
        for key, family in sums.items():
            family.add_metric(labels, totals[key])
        view_id.add_metric(labels, g.view_id)
        view_size.add_metric(labels, len(g.members))
        leader.add_metric(labels, 1 if g.leader == node else 0)
        meter = meters.get(g.name)
        if meter is not None:
            latency.add_metric(labels, meter.latency.cumulative(), meter.latency.total)
            sizes = meter.batches
            batch.add_metric(labels, sizes.cumulative(), sizes.total)
            flush.add_metric(labels, meter.flushes.cumulative(), meter.flushes.total)
    yield delivered
    yield from named.values()
    yield from sums.values()
    yield from (layer_counts, holdback, view_id, view_size, leader, latency, batch, flush)
    yield from _node_families(status)


def _node_families(status: NodeStatus) -> Iterator[Any]:
    from prometheus_client.core import CounterMetricFamily

    node, c = status.node, status.counters
    frames = CounterMetricFamily("abcast_peer_frames", "Frames to and from each peer.",
                                 labels=["node", "peer", "direction"])
    data = CounterMetricFamily("abcast_peer_bytes", "Frame bytes to and from each peer.",
                               labels=["node", "peer", "direction"])
    for peer, t in status.peers.items():
        frames.add_metric([node, peer, "out"], t.frames_out)
        frames.add_metric([node, peer, "in"], t.frames_in)
        data.add_metric([node, peer, "out"], t.bytes_out)
        data.add_metric([node, peer, "in"], t.bytes_in)
    yield frames
    yield data
    plain = {
        "abcast_transport_frames_sent": ("transport_frames_out", "Frames written."),
        "abcast_transport_frames_received": ("transport_frames_in", "Frames read."),
        "abcast_transport_bad_frames": ("transport_bad_frames",
                                        "Inbound connections dropped for bad framing."),
        "abcast_transport_refused_links": ("transport_refused_links",
                                           "Inbound connections refused for their hello "
                                           "(a peer with another max_frame_bytes)."),
        "abcast_transport_lost_connections": ("transport_lost_connections",
                                              "Outbound connections that broke."),
        "abcast_transport_reconnects": ("transport_reconnects", "Outbound reconnections."),
        "abcast_transport_discarded_frames": ("transport_discarded_frames",
                                              "Queued frames thrown away (peer removed)."),
        "abcast_refused_frames": ("node_bad_frames",
                                  "Frames refused by the node (undecodable or foreign)."),
        "abcast_unknown_group_frames": ("node_unknown_group_frames",
                                        "Frames for a group this node does not host "
                                        "(dropped; the link is kept)."),
        "abcast_backpressure_waits": ("node_backpressure_waits",
                                      "Broadcasts that waited for the transport's queue."),
    }
    for name, (key, doc) in plain.items():
        yield CounterMetricFamily(name, doc, value=c.get(key, 0), labels=None)
    yield CounterMetricFamily("abcast_transport_sent_bytes", "Frame bytes written.",
                              value=c.get("transport_bytes_out", 0))
    yield CounterMetricFamily("abcast_transport_received_bytes", "Frame bytes read.",
                              value=c.get("transport_bytes_in", 0))
    yield CounterMetricFamily("abcast_backpressure_wait_seconds",
                              "Time broadcasts waited for the transport's queue.",
                              value=c.get("node_backpressure_us", 0) / 1e6)


class NodeCollector:
    """A prometheus_client collector over one node (read at each scrape)."""

    def __init__(self, node: MeteredNode) -> None:
        self._node = node

    def collect(self) -> Iterator[Any]:
        node = self._node
        if not node.running:
            return
        meters = {d.name: d.meter for d in node.drivers() if d.meter is not None}
        yield from families(node_status(node), meters)


# ------------------------------------------------------------------------ the endpoint


class MetricsServer:
    """`GET /metrics` on (host, port), on the node's loop; port 0 picks a free port."""

    def __init__(self, node: MeteredNode, host: str, port: int) -> None:
        self._node = node
        # The node counts its traffic in these from now on: bounded tables
        node.traffic = PeerCounts(lambda peer: node.peer_url(peer) is not None)
        node.multicast_traffic = MulticastTraffic()
        self._host, self._port = host, port
        self._registry: Any = None  # made at the first scrape, with the first import
        self._server: asyncio.Server | None = None

    @property
    def registry(self) -> Any:
        """prometheus_client's registry of this node's collector; prometheus_client is
        imported here, at the first scrape (~30 ms of CPU a node never scraped saves)."""
        if self._registry is None:
            from prometheus_client import CollectorRegistry

            self._registry = CollectorRegistry(auto_describe=False)
            self._registry.register(NodeCollector(self._node))
        return self._registry

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, self._host, self._port)
        host, port = self._server.sockets[0].getsockname()[:2]
        url = f"http://{host}:{port}/metrics"
        log.info("metrics at %s", url)
        return url

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await answer_once(writer, reader.readuntil(b"\r\n\r\n"), self._reply)

    def _reply(self, request: bytes) -> bytes:
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        method, _, rest = request.partition(b" ")
        path = rest.split(b" ", 1)[0].split(b"?", 1)[0]
        if method != b"GET" or path not in (b"/metrics", b"/"):
            return (b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n"
                    b"Connection: close\r\n\r\n")
        body = generate_latest(self.registry)
        return (b"HTTP/1.1 200 OK\r\nContent-Type: " + CONTENT_TYPE_LATEST.encode()
                + b"\r\nContent-Length: " + str(len(body)).encode()
                + b"\r\nConnection: close\r\n\r\n" + body)
