"""What a running node says about itself: one typed status, read by `abcast probe` and
by the Prometheus collector alike.

Rules: `node_status(node)` only reads (counters, views, `Stack.inspect()`), never changes
anything and runs on the node's loop, so it sees a consistent instant. It returns plain
msgspec Structs; `abcast.runtime.probe` sends them as JSON and
`abcast.runtime.metrics` turns them into metric families at scrape time. Nothing here
costs anything between two calls.

Counters per group (`GroupStatus.counters`) are the driver's: `broadcasts`, `delivered`
(final deliveries), `opt_delivered` (optimistic ones), `protocol_packets`,
`control_packets`, `retransmissions`, `bad_batches`, `app_errors` (application
callbacks that raised), `snapshots`, `rejoins`, `views` (views installed here). Per
node (`NodeStatus.counters`): the node's refusals (`node_*`,
abcast.runtime.node.NodeStats) and the transport's frames, bytes and connection events
(`transport_*`, abcast.transport.TransportStats).

Also here, what the probe socket and the metrics endpoint share: their exchange, one
request and its reply, each under a deadline (`answer_once`), and the node's multicast
traffic tables, bounded (`PeerCounts`, `MulticastTraffic`, read by `peer_traffic`).

What it reads is typed by two Protocols, `ObservedGroup` (a group's driver) and
`ObservedNode` (the node), so this module, the probe and the metrics sit below
abcast.runtime.node and abcast.runtime.driver, which start them, and import neither.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import socket
import struct
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Final, Protocol

import msgspec

from abcast.snapshot import LayerSnapshot

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    from abcast.stack import Stack
    from abcast.transport.base import Transport


#: the most distinct multicast destination sets counted apart (see MulticastTraffic)
MAX_DESTINATION_SETS: Final = 256
#: the traffic table's entry for every peer the node has no address of (the node's
#: `_new_peer` counts them there)
OTHER_PEERS: Final = "(other)"
#: traffic entries held before those of peers the node has let go are forgotten (see
#: PeerCounts)
MAX_PEER_ENTRIES: Final = 1024
#: how long a client of the probe socket or the metrics endpoint has to send its
#: request, and to read the whole reply: then its connection is reset (`answer_once`)
READ_TIMEOUT_S: Final = 5.0
WRITE_TIMEOUT_S: Final = 5.0


class ObservedGroup(Protocol):
    """What a status reads of one hosted group (abcast.runtime.driver.GroupDriver)."""

    @property
    def name(self) -> str: ...
    @property
    def stack(self) -> Stack: ...
    @property
    def closed(self) -> bool: ...
    @property
    def config(self) -> Mapping[str, object]: ...
    @property
    def broadcasts(self) -> int: ...
    @property
    def delivered(self) -> int: ...
    @property
    def opt_delivered(self) -> int: ...
    @property
    def protocol_packets(self) -> int: ...
    @property
    def control_packets(self) -> int: ...
    @property
    def retransmissions(self) -> int: ...
    @property
    def bad_batches(self) -> int: ...
    @property
    def app_errors(self) -> int: ...
    @property
    def snapshots(self) -> int: ...
    @property
    def rejoins(self) -> int: ...
    @property
    def views(self) -> int: ...


class ObservedNode(Protocol):
    """What a status reads of a node (abcast.runtime.node.Node)."""

    @property
    def id(self) -> str: ...
    @property
    def address(self) -> str: ...
    @property
    def running(self) -> bool: ...
    @property
    def transport(self) -> Transport: ...
    @property
    def stats(self) -> DataclassInstance: ...
    @property
    def traffic(self) -> Mapping[str, Sequence[int]] | None: ...
    @property
    def multicast_traffic(self) -> Mapping[tuple[str, ...], Sequence[int]] | None: ...
    @property
    def metrics_url(self) -> str | None: ...

    def drivers(self) -> Sequence[ObservedGroup]: ...


class GroupStatus(msgspec.Struct, frozen=True, kw_only=True):
    """One hosted group at one instant."""

    name: str
    view_id: int
    members: list[str]
    #: the view's lowest member: sequencer, coordinator and leader by convention
    leader: str
    closed: bool
    #: `Stack.inspect()`, bottom first
    layers: list[LayerSnapshot]
    counters: dict[str, int]
    #: the ordering and its options, as the group was opened with them
    config: dict[str, Any] = {}


class PeerTraffic(msgspec.Struct, frozen=True, kw_only=True, gc=False):
    frames_out: int
    bytes_out: int
    frames_in: int
    bytes_in: int


class NodeStatus(msgspec.Struct, frozen=True, kw_only=True):
    """One node at one instant (`abcast probe --json` prints a list of these)."""

    node: str
    address: str
    pid: int
    groups: list[GroupStatus]
    counters: dict[str, int]
    config: dict[str, Any]
    #: frames and bytes per peer (only while metrics are on: counting them costs a little)
    peers: dict[str, PeerTraffic] = {}
    #: where /metrics is served ("" when off)
    metrics: str = ""


def group_status(driver: ObservedGroup) -> GroupStatus:
    view = driver.stack.view
    counters = {
        "broadcasts": driver.broadcasts, "delivered": driver.delivered,
        "opt_delivered": driver.opt_delivered, "protocol_packets": driver.protocol_packets,
        "control_packets": driver.control_packets, "retransmissions": driver.retransmissions,
        "bad_batches": driver.bad_batches, "app_errors": driver.app_errors,
        "snapshots": driver.snapshots,
        "rejoins": driver.rejoins, "views": driver.views,
    }
    return GroupStatus(
        name=driver.name, view_id=view.view_id, members=list(view.members),
        leader=view.leader, closed=driver.closed, layers=driver.stack.inspect(),
        counters=counters, config=dict(driver.config))


def node_status(node: ObservedNode) -> NodeStatus:
    transport = node.transport
    counters = {f"node_{k}": v for k, v in dataclasses.asdict(node.stats).items()}
    counters.update({f"transport_{k}": v
                     for k, v in dataclasses.asdict(transport.stats).items()})
    options = getattr(transport, "options", None)
    config: dict[str, Any] = {"transport": type(transport).__name__}
    if options is not None and dataclasses.is_dataclass(options):
        config.update(msgspec.to_builtins(options))
    return NodeStatus(
        node=node.id, address=node.address, pid=os.getpid(),
        groups=[group_status(d) for d in node.drivers()], counters=counters,
        config=config, peers=peer_traffic(node), metrics=node.metrics_url or "")


def peer_traffic(node: ObservedNode) -> dict[str, PeerTraffic]:
    """Frames and bytes per peer (empty while metrics are off): what went to or came from
    it alone, plus every multicast frame it was among the destinations of."""
    traffic = node.traffic
    if traffic is None:
        return {}
    counts = {peer: list(c) for peer, c in traffic.items()}
    multicasts = node.multicast_traffic or {}
    spread(multicasts.items(), counts)
    if isinstance(multicasts, MulticastTraffic):
        spread((((peer,), c) for peer, c in multicasts.folded.items()), counts)
    return {peer: PeerTraffic(frames_out=c[0], bytes_out=c[1], frames_in=c[2], bytes_in=c[3])
            for peer, c in sorted(counts.items())}


def spread(multicasts: Iterable[tuple[Iterable[str], Sequence[int]]],
           into: dict[str, list[int]]) -> None:
    """Add each entry's frames and bytes (the first two counts) to each of its peers'."""
    for peers, (frames, size, *_) in multicasts:
        for peer in peers:
            c = into.get(peer)
            if c is None:
                c = into[peer] = [0, 0, 0, 0]
            c[0] += frames
            c[1] += size


class MulticastTraffic(dict[tuple[str, ...], list[int]]):
    """The node's multicast counts while metrics are on: a frame's destinations ->
    [frames, bytes], one update per frame whatever its fan-out (abcast.runtime.node).
    One entry per distinct destination set grew without bound under churn (every view a
    new set); at MAX_DESTINATION_SETS, a new set first folds them all into `folded`,
    peer -> [frames, bytes, 0, 0], and starts again. The per-peer sums stay exact; what a
    frame costs does not change (only a new set's insertion does the work)."""

    __slots__ = ("folded",)

    def __init__(self) -> None:
        super().__init__()
        self.folded: dict[str, list[int]] = {}

    def __setitem__(self, destinations: tuple[str, ...], counts: list[int]) -> None:
        if len(self) >= MAX_DESTINATION_SETS and destinations not in self:
            spread(self.items(), self.folded)
            self.clear()
        super().__setitem__(destinations, counts)


class PeerCounts(dict[str, list[int]]):
    """The node's traffic table while metrics are on: peer -> [frames out, bytes out,
    frames in, bytes in], one entry per peer it has an address of and one (OTHER_PEERS)
    for all others. Every peer that ever had an address kept its entry, and so its
    `peer` label, for as long as the node ran: under churn, without bound. Once
    MAX_PEER_ENTRIES are held, a new peer's entry first forgets those of the peers the
    node has let go (no address now): their series end, as a departed target's do; if it
    comes back it counts from 0 (a counter reset). The work is done at a new peer's
    insertion, never per frame; the entries of current peers and OTHER_PEERS stay."""

    __slots__ = ("_known",)

    def __init__(self, known: Callable[[str], bool]) -> None:
        super().__init__()
        self._known = known  # whether the node has the peer's address

    def __setitem__(self, peer: str, counts: list[int]) -> None:
        if len(self) >= MAX_PEER_ENTRIES and peer not in self:
            known = self._known
            for gone in [p for p in self if p != OTHER_PEERS and not known(p)]:
                del self[gone]
        super().__setitem__(peer, counts)


async def answer_once(writer: asyncio.StreamWriter, request: Awaitable[bytes],
                      reply: Callable[[bytes], bytes]) -> None:
    """One request, one reply, then close: the exchange of the probe socket and of the
    metrics endpoint. The request has READ_TIMEOUT_S to come, the whole reply
    WRITE_TIMEOUT_S to be read (the close waits for that too); otherwise, or if the
    client goes, the connection is reset, so a client that never reads holds neither
    the handler nor the reply."""
    replied = False
    try:
        async with asyncio.timeout(READ_TIMEOUT_S):
            received = await request
        answer = reply(received)
        async with asyncio.timeout(WRITE_TIMEOUT_S):
            writer.write(answer)
            await writer.drain()
            writer.close()
            await writer.wait_closed()
        replied = True
    except (TimeoutError, asyncio.IncompleteReadError, asyncio.LimitOverrunError,
            ConnectionError):
        pass
    finally:
        if not replied:
            _reset(writer)


def _reset(writer: asyncio.StreamWriter) -> None:
    """Abort the connection: what it holds is freed now, not flushed, here and in the
    kernel (linger 0: a reset, not a FIN queued behind bytes the client never reads)."""
    sock = writer.get_extra_info("socket")
    if sock is not None and sock.family != socket.AF_UNIX:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()
