"""`Node`: one abcast node on an asyncio loop — one transport carrying every group it hosts.

Rules: a node owns its transport (started under its node id, which the registry assigns
when none is given), a monotonic µs clock shared by all its groups, and the routing of
inbound frames to groups by the envelope's group name. Bad input is refused here:
garbage bytes, a frame whose claimed sender is not the connection's, and anything the
group's stack refuses each make one `Link.drop` (the transport writes the one log line
and closes that connection), count in `stats`, and leave every group's state as it was.
Frames for a group that is still joining are held (up to a bound) and handed over once
it starts; frames for a group closed here (one of the last MAX_CLOSED_GROUPS) are
ignored quietly (peers still retransmit and ack while a run winds down). A well-formed
frame for a group this node does not host is dropped as a frame — counted, one log line
per (sender, group) — and the link kept: a link carries every group two nodes share,
and on IP multicast every node bound to the group address hears every group's traffic
on it, so dropping the link would reset a healthy sender for a frame that was never
wrong, only not ours.

Addresses: a node with a registry registers its transport URL there once it is up, and
a frame for a peer whose address it does not know yet (a member that joined a group
after this node opened it, or one a welcome named) is queued (up to a bound) while the
peer's address is asked of the registry (`locate`), then sent (or dropped, counted in
`unresolved_frames`, when none comes within RESOLVE_FOR_S or the lookup fails; the
peer's next frame asks again). So a joiner needs to
announce itself to no one: whoever must reach it finds it. Without a registry every
peer must be added by hand (`add_peers`); a frame for one it does not hold is dropped,
counted in `unresolved_frames` and logged once per peer. `prune_peers` lets go of peers no
hosted group talks to any more (a removed or crashed member, once its group's channel
let go of it too: under evs the nodes the merge probes for, the other side of a
partition, are kept for as long as it probes them — for ever, at most MAX_LOST of them:
abcast.membership.discovery).

Endpoints: `open_endpoint(name, handler)` routes frames named `name` (instead of a
group) to `handler(link, envelope)` — how clients and servers of abcast.rpc talk
without a client being a group member. The handler raises RemoteProtocolError for a
frame it refuses (the link is dropped, as for a group's).

Garbage collection: `gc=` ("tuned" unless ABCAST_GC says otherwise) sets the process's
thresholds when the node starts (abcast.runtime.loop); a node process then freezes what
it built (`freeze_gc`, the bench's worker does).

Secrets: `secret=` (abcast.security) goes to the transport it builds (every link
authenticated, every frame sealed) and to the registry client (every change to its
groups and its id proven); a transport or registry client passed in ready-made must
hold the same secret (ConfigError otherwise). One node, one secret, for all its groups.

What it does not know: orderings (GroupDriver and build_stack), the application API
(abcast.runtime.group), or how transports move bytes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, Protocol

from abcast.codec import Envelope, decode_envelope
from abcast.effects import Transmit
from abcast.errors import AbcastError, ConfigError, LocalProtocolError, RemoteProtocolError
from abcast.ids import NodeId
from abcast.registry.client import RegistryClient
from abcast.runtime import lane
from abcast.runtime.driver import GroupDriver
from abcast.runtime.loop import MonotonicClock, gc_mode, tune_gc
from abcast.runtime.status import OTHER_PEERS
from abcast.security import load_secret
from abcast.stack import Stack
from abcast.trace.recorder import TraceRecorder
from abcast.transport import Link, Transport, TransportOptions, transport_from_url
from abcast.transport._common import QueuedTransport

log: Final = logging.getLogger(__name__)

#: frames held per group that is still joining; beyond it they are dropped (and later
#: retransmitted by the sender's reliable channel)
MAX_HELD_FRAMES: Final = 100_000
#: frames queued for one peer whose address is still being looked up
MAX_UNRESOLVED_FRAMES: Final = 10_000
#: how long, and how often, the registry is asked for an address it does not know yet
RESOLVE_FOR_S: Final = 10.0
RESOLVE_EVERY_S: Final = 0.1
#: (sender, group) pairs whose frames for a group not hosted here were logged; beyond
#: this many, such frames are only counted
MAX_UNKNOWN_LOGGED: Final = 1024
#: a removed member's address is kept this long after a view (its last frames may need
#: resending), and looked at again as often while a group's channel still keeps it
PRUNE_AFTER_S: Final = 15.0
#: groups closed here whose late frames are ignored quietly (the most recently closed);
#: a frame for one closed before them counts as for a group not hosted
MAX_CLOSED_GROUPS: Final = 1024


class Service(Protocol):
    """Something a node runs beside its groups (a metrics or probe server)."""

    async def stop(self) -> None: ...


@dataclass(slots=True)
class NodeStats:
    bad_frames: int = 0  # frames refused (the link that sent each was dropped)
    unknown_group_frames: int = 0  # frames for a group not hosted here (dropped, link kept)
    late_frames: int = 0  # frames for a group already closed here (ignored)
    held_frames: int = 0  # frames kept for a group that was still joining
    overflow_frames: int = 0  # frames dropped because that hold was full
    resolved_peers: int = 0  # peers whose address came from the registry
    unresolved_frames: int = 0  # frames dropped: their peer's address was never found
    backpressure_waits: int = 0  # broadcasts that waited for the transport (metrics on)
    backpressure_us: int = 0  # how long they waited in all


def wrap_wan(transport: Transport, matrix_file: str | os.PathLike[str]) -> Transport:
    """`transport` behind the WAN emulator (abcast.transport.wan): each frame waits its
    link's one-way latency from the matrix file (JSON or CSV, RTTs between sites)."""
    from abcast.transport.wan import WanTransport, load_matrix

    return WanTransport(transport, load_matrix(Path(matrix_file)))


def _check_secret(secret: bytes | None, transport: str | Transport,
                  registry: str | RegistryClient | None) -> None:
    """A transport or registry client made by the caller must hold the node's secret."""
    if not isinstance(transport, str):
        held = getattr(getattr(transport, "options", None), "secret", None)
        if held != secret:
            raise ConfigError("the transport given was built with another group secret than "
                              "the node's (TransportOptions(secret=...))")
    if isinstance(registry, RegistryClient) and registry.secret != secret:
        raise ConfigError("the registry client given holds another group secret than the "
                          "node's (RegistryClient(url, secret=...))")


class Node:
    """Usage: `node = Node("tcp://127.0.0.1:0", registry="tcp://127.0.0.1:7400")`,
    `await node.start()`, then host groups on it (`Group(..., host=node)`), then
    `await node.close()`. Without a registry, `node=` names it."""

    def __init__(
        self,
        transport: str | Transport = "tcp://127.0.0.1:0",
        *,
        node: NodeId | None = None,
        registry: str | RegistryClient | None = None,
        recorder: TraceRecorder | None = None,
        wan: str | os.PathLike[str] | None = None,
        metrics_port: int | None = None,
        metrics_host: str = "127.0.0.1",
        probe: bool | str = False,
        secret: bytes | str | None = None,
        gc: str | None = None,
    ) -> None:
        if registry is None and node is None:
            raise ConfigError("a node needs an id (node='n1') or a registry to assign one")
        #: the group secret (abcast.security): authenticates every link and, at the
        #: registry, every change to this node's groups; None: open links
        self.secret = load_secret(secret)
        _check_secret(self.secret, transport, registry)
        #: how the process's garbage collector runs (abcast.runtime.loop: "tuned" or
        #: "python"; None: ABCAST_GC, else "tuned"); applied when the node starts
        self.gc_mode = gc_mode(gc)
        self._transport_spec = transport
        self._claim = node
        self.registry = (RegistryClient(registry, secret=self.secret)
                         if isinstance(registry, str) else registry)
        self.recorder = recorder
        self._wan = wan
        self.clock = MonotonicClock()
        self.stats = NodeStats()
        self._id: NodeId | None = None
        self._transport: Transport | None = None
        self._address: str | None = None
        self._groups: dict[str, GroupDriver] = {}
        #: the groups whose frames the native lane may step (abcast.runtime.lane)
        self._lanes: dict[str, tuple[GroupDriver, Stack]] = {}
        self._endpoints: dict[str, Callable[[Link, Envelope], None]] = {}
        self._joining: dict[str, list[tuple[Link, Envelope]]] = {}
        #: group -> its Group's close(), awaited by close() (see reserve)
        self._closers: dict[str, Callable[[], Awaitable[None]]] = {}
        self._closed_groups: dict[str, None] = {}  # oldest first (MAX_CLOSED_GROUPS)
        self._unknown_logged: set[tuple[NodeId, str]] = set()  # (sender, group) logged
        self._unresolvable_logged: set[NodeId] = set()  # peers the registry would not find
        self._peer_urls: dict[NodeId, str] = {}
        self._pinned: set[NodeId] = set()  # peers outside every view (a ticket server)
        self._unresolved: dict[NodeId, list[bytes]] = {}
        self._resolvers: dict[NodeId, asyncio.Task[None]] = {}
        self._prune: asyncio.TimerHandle | None = None  # `prune_later`'s, pending
        self._state = "new"
        # Operating it (abcast.runtime.metrics, abcast.runtime.probe): both off unless asked.
        self._metrics_at = (metrics_host, metrics_port) if metrics_port is not None else None
        self._probe_at = probe
        self._services: list[Service] = []
        self.metrics_url: str | None = None
        #: peer -> [frames out, bytes out, frames in, bytes in], and a multicast's
        #: destinations -> [frames, bytes] (one count per frame, spread per peer when read:
        #: abcast.runtime.status); both None (not counted) while metrics are off
        self.traffic: dict[NodeId, list[int]] | None = None
        self.multicast_traffic: dict[tuple[NodeId, ...], list[int]] | None = None

    # ----------------------------------------------------------------- lifecycle

    @property
    def id(self) -> NodeId:
        if self._id is None:
            raise LocalProtocolError("node not started")
        return self._id

    @property
    def address(self) -> str:
        if self._address is None:
            raise LocalProtocolError("node not started")
        return self._address

    @property
    def transport(self) -> Transport:
        if self._transport is None:
            raise LocalProtocolError("node not started")
        return self._transport

    @property
    def groups(self) -> tuple[str, ...]:
        return tuple(self._groups)

    @property
    def running(self) -> bool:
        return self._state == "open"

    async def start(self) -> Node:
        if self._state != "new":
            raise LocalProtocolError(f"node already {self._state}")
        self._state = "starting"
        tune_gc(self.gc_mode)
        spec = self._transport_spec
        transport = (transport_from_url(spec, TransportOptions(secret=self.secret))
                     if isinstance(spec, str) else spec)
        if self._wan is not None:
            transport = wrap_wan(transport, self._wan)
        try:
            if self.registry is not None:
                self._id = await self.registry.register(self._claim)
            else:
                self._id = self._claim
            self._transport = transport
            if lane.PUMP is not None and isinstance(transport, QueuedTransport):
                transport.frame_pump = (lane.PUMP, self)  # tcp:// reads to the lane first
            self._address = await transport.start(self.id, self._on_frame)
            if self.registry is not None:
                await self.registry.register(self._id, self._address)
            await self._start_services()
            if self._state != "starting":  # close() came meanwhile: undo what started since
                raise LocalProtocolError(f"node {self._id} was closed while starting")
        except BaseException:
            self._state = "closed"
            await self._stop_services()
            await transport.close()
            if self.registry is not None:
                await self.registry.close()
            raise
        self._state = "open"
        log.info("node %s up at %s", self._id, self._address,
                 extra={"node": self._id, "event": "up"})
        return self

    async def close(self) -> None:
        """Close every group hosted here (each as its own `close()` would: a group still
        opening fails, deliveries() end, the registry's record lets go of this node), then
        the transport and the registry client. The groups close together: each may wait
        for the registry (its Leave, up to LEAVE_TIMEOUT_S), and a node of k groups
        waited k times that one after another under a silent registry."""
        if self._state in ("closing", "closed"):
            return
        self._state = "closing"
        closers = list(self._closers.items())
        outcomes = await asyncio.gather(*(closer() for _, closer in closers),
                                        return_exceptions=True)
        for (group, _), outcome in zip(closers, outcomes, strict=True):
            if isinstance(outcome, Exception):
                log.error("%s: closing group %r raised", self._id, group,
                          exc_info=outcome)
            elif isinstance(outcome, BaseException):
                raise outcome  # as before: only an Exception is logged and passed over
        self._closers.clear()
        for task in self._resolvers.values():
            task.cancel()
        self._resolvers.clear()
        self._unresolved.clear()
        if self._prune is not None:
            self._prune.cancel()
            self._prune = None
        for driver in self._groups.values():
            driver.close()
        self._closed_groups.update(dict.fromkeys(self._groups))
        self._groups.clear()
        self._lanes.clear()
        self._joining.clear()
        await self._stop_services()
        try:
            if self._transport is not None:
                await self._transport.close()
        finally:
            if self.registry is not None:
                await self.registry.close()
            self._state = "closed"

    async def _start_services(self) -> None:
        if self._metrics_at is not None:
            from abcast.runtime.metrics import MetricsServer

            server = MetricsServer(self, *self._metrics_at)  # sets the traffic tables
            self.metrics_url = await server.start()
            self._services.append(server)  # once up (a close() meanwhile: start stops it)
        if self._probe_at:
            from abcast.runtime.probe import ProbeServer

            path = None if self._probe_at is True else str(self._probe_at)
            probe_server = ProbeServer(self, path)
            try:
                await probe_server.start()
            except OSError as exc:  # the node runs on; only `abcast probe` cannot reach it
                log.warning("%s: no probe socket: %s", self._id, exc,
                            extra={"node": self._id, "event": "probe"})
            else:
                self._services.append(probe_server)

    async def _stop_services(self) -> None:
        services, self._services = self._services, []
        for service in services:
            await service.stop()

    def drivers(self) -> list[GroupDriver]:
        """The hosted groups' drivers (for status and metrics: read, do not drive)."""
        return list(self._groups.values())

    async def drain(self) -> None:
        """Wait for the transport's backpressure; counted (waits, seconds) while metrics
        are on."""
        transport = self.transport
        if self.traffic is None:
            await transport.drain()
            return
        options = getattr(transport, "options", None)
        high = getattr(options, "high_water_bytes", None)
        if high is None or transport.buffered() <= high:
            await transport.drain()
            return
        started = time.perf_counter()
        await transport.drain()
        self.stats.backpressure_waits += 1
        self.stats.backpressure_us += int((time.perf_counter() - started) * 1e6)

    async def __aenter__(self) -> Node:
        if self._state == "new":
            await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ----------------------------------------------------------------- groups (for Group)

    def reserve(self, group: str, closer: Callable[[], Awaitable[None]] | None = None) -> None:
        """`group` is being joined: hold its frames until `attach` (a no-op if it already
        is; reserving before a join starts keeps what peers send in the meantime).
        `closer` (the Group's close) is awaited by `close()` until the group is detached
        or unreserved."""
        self._require_open()
        if group in self._groups or group in self._closers:
            raise LocalProtocolError(f"node {self.id} already hosts group {group!r}")
        self._closed_groups.pop(group, None)
        self._joining.setdefault(group, [])
        if closer is not None:
            self._closers[group] = closer

    def unreserve(self, group: str) -> None:
        """A join that failed: forget the group and what was held for it."""
        self._joining.pop(group, None)
        self._closers.pop(group, None)

    def attach(self, driver: GroupDriver) -> None:
        """Start `driver`'s stack and hand it the frames held while it was joining."""
        self._require_open()
        name = driver.name
        if name in self._groups:
            raise LocalProtocolError(f"node {self.id} already hosts group {name!r}")
        held = self._joining.pop(name, [])
        self._groups[name] = driver
        if lane.RECEIVE is not None and lane.eligible(driver.stack):
            self._lanes[name] = (driver, driver.stack)
            driver.lane_broadcast = lane.BROADCAST
            driver.lane_carry_out = lane.CARRY_OUT
            driver.lane_backpressured = lane.BACKPRESSURED
        if self.traffic is not None:  # metrics on
            from abcast.runtime.metrics import GroupMeter

            driver.meter = GroupMeter()
        driver.start()
        for link, env in held:
            self._deliver(driver, link, env)

    def detach(self, group: str) -> None:
        """Stop hosting `group`; peers that no other group needs are let go."""
        driver = self._groups.pop(group, None)
        self._lanes.pop(group, None)
        self._joining.pop(group, None)
        self._closers.pop(group, None)
        if driver is None:
            return
        driver.close()
        closed = self._closed_groups
        closed.pop(group, None)
        closed[group] = None
        if len(closed) > MAX_CLOSED_GROUPS:
            del closed[next(iter(closed))]
        self.prune_peers()

    def open_endpoint(self, name: str, handler: Callable[[Link, Envelope], None]) -> None:
        """Frames named `name` go to `handler` (see the module rules)."""
        self._require_open()
        if name in self._groups or name in self._endpoints:
            raise LocalProtocolError(f"node already routes {name!r}")
        self._endpoints[name] = handler

    def close_endpoint(self, name: str) -> None:
        self._endpoints.pop(name, None)

    def prune_peers(self) -> None:
        """Let go of every peer that no hosted group talks to any more (`Stack.peers`: not
        in its view, no link kept by its channel, not probed by its membership); while a
        group still keeps a node outside its view (a removed member lingering, a node
        probed under evs), look again later."""
        if self._state != "open":
            return
        needed = set(self._pinned)
        beyond_views = False
        for driver in self._groups.values():
            peers = driver.stack.peers()
            needed |= peers
            beyond_views = beyond_views or len(peers) > len(driver.stack.view.members)
        for peer in [p for p in self._peer_urls if p not in needed]:
            del self._peer_urls[peer]
            self.transport.remove_peer(peer)
        if beyond_views:
            self.prune_later()

    def prune_later(self) -> None:
        """`prune_peers` in PRUNE_AFTER_S (a group calls it when it installs a view: a
        removed member's last frames may still need resending), unless one is due."""
        if self._prune is None and self._state == "open":
            self._prune = asyncio.get_running_loop().call_later(PRUNE_AFTER_S,
                                                                 self._pruned_later)

    def _pruned_later(self) -> None:
        self._prune = None
        self.prune_peers()

    def add_peers(self, members: Mapping[NodeId, str]) -> None:
        """Make every member (but this node) reachable at its URL."""
        self._require_open()
        for peer, url in members.items():
            if peer == self.id or self._peer_urls.get(peer) == url:
                continue  # add_peer again would reconnect for no reason
            self.transport.add_peer(peer, url)
            self._peer_urls[peer] = url
            queued = self._unresolved.pop(peer, None)
            resolver = self._resolvers.pop(peer, None)
            if resolver is not None:
                resolver.cancel()
            for data in queued or ():
                self.transport.send(peer, data)

    def pin_peer(self, peer: NodeId, url: str) -> None:
        """Make `peer`, a node in no group's view (a ticket server), reachable at `url`
        and keep it so: `prune_peers` leaves it alone."""
        self.add_peers({peer: url})
        self._pinned.add(peer)

    def peer_url(self, peer: NodeId) -> str | None:
        """`peer`'s address, if frames for it go out at once."""
        return self._peer_urls.get(peer)

    def transmit(self, dst: NodeId, data: bytes) -> None:
        transport = self._transport
        if transport is None or self._state != "open":
            return  # shutting down: the frames would be discarded anyway
        traffic = self.traffic
        if traffic is not None:  # metrics on: plain ints, read at scrape time
            counts = traffic.get(dst) or self._new_peer(dst)
            counts[0] += 1
            counts[1] += len(data)
        if dst in self._peer_urls:
            transport.send(dst, data)
            return
        if self.registry is None:  # no address, nowhere to ask: see `_no_address`
            self._no_address(dst)
            return
        queued = self._unresolved.get(dst)
        if queued is None:
            queued = self._unresolved[dst] = []
            self._resolvers[dst] = asyncio.get_running_loop().create_task(
                self._resolve(dst), name=f"resolve-{dst}")
        if len(queued) < MAX_UNRESOLVED_FRAMES:
            queued.append(data)
        else:
            self.stats.unresolved_frames += 1  # the reliable channel sends it again

    def transmit_run(self, run: list[Transmit]) -> int:
        """One step's run of protocol packets, in order: each peer's share leaves in one
        write (`Transport.send_run`). Returns the packets they cost on the wire."""
        transport = self._transport
        if transport is None or self._state != "open":
            return sum(len(transmit.to) for transmit in run)  # shutting down: discarded
        if self.traffic is None:  # the common case: each to one peer with an address
            urls = self._peer_urls
            frames: list[tuple[NodeId, bytes]] = []
            for transmit in run:
                to = transmit.to
                if len(to) != 1 or to[0] not in urls:
                    break
                frames.append((to[0], transmit.data))
            else:
                transport.send_run(frames)
                return len(frames)
        packets = 0
        transport.cork()
        try:
            for transmit in run:
                if len(transmit.to) == 1:
                    self.transmit(transmit.to[0], transmit.data)
                    packets += 1
                else:
                    packets += self.transmit_many(transmit.to, transmit.data)
        finally:
            transport.uncork()
        return packets

    def transmit_many(self, dsts: tuple[NodeId, ...], data: bytes) -> int:
        """One frame for several peers: one write where the transport can (udp://).
        Returns the packets it costs on the wire."""
        transport = self._transport
        if transport is None or self._state != "open":
            return len(dsts)
        urls = self._peer_urls
        for dst in dsts:  # a loop, not all(<generator>): this runs for every multicast
            if dst not in urls:
                for each in dsts:
                    self.transmit(each, data)
                return len(dsts)
        multicasts = self.multicast_traffic
        if multicasts is not None:  # metrics on: once per frame, whatever the fan-out
            counts = multicasts.get(dsts)
            if counts is None:
                counts = multicasts[dsts] = [0, 0]
            counts[0] += 1
            counts[1] += len(data)
        return transport.multicast(dsts, data)

    async def _resolve(self, peer: NodeId) -> None:
        registry = self.registry
        assert registry is not None
        try:
            async with asyncio.timeout(RESOLVE_FOR_S):
                while True:
                    address = await registry.locate(peer)
                    if address is not None:
                        break
                    await asyncio.sleep(RESOLVE_EVERY_S)
        except TimeoutError:
            self._unresolvable(peer, f"no address after {RESOLVE_FOR_S:.0f} s")
            return
        except LocalProtocolError:
            return  # the registry client was closed: the node is shutting down
        except AbcastError as exc:  # the registry refused, or the client would not ask
            # (at once: logged once per peer, or a frame a second would be a line a second)
            self._unresolvable(peer, str(exc), quiet=peer in self._unresolvable_logged)
            if len(self._unresolvable_logged) < MAX_UNKNOWN_LOGGED:
                self._unresolvable_logged.add(peer)
            return
        self._resolvers.pop(peer, None)
        if self._state == "open":
            self.stats.resolved_peers += 1
            log.info("%s found %s at %s through the registry", self._id, peer, address)
            with contextlib.suppress(LocalProtocolError):
                self.add_peers({peer: address})

    def _no_address(self, peer: NodeId) -> None:
        """A frame for a peer whose address this node without a registry does not hold
        (never added, or let go by `prune_peers`): dropped and counted in
        `unresolved_frames` (the reliable channel sends it again should the peer be added
        back), one log line per peer — not an exception out of a timer or a frame's
        handling."""
        self.stats.unresolved_frames += 1
        if (peer not in self._unresolvable_logged
                and len(self._unresolvable_logged) < MAX_UNKNOWN_LOGGED):
            self._unresolvable_logged.add(peer)
            log.warning("%s: no address for %s and no registry to ask (add_peers); "
                        "dropping its frames", self._id, peer)

    def _unresolvable(self, peer: NodeId, why: str, quiet: bool = False) -> None:
        """`peer`'s address was not found: its queued frames are dropped (counted; the
        reliable channel sends them again) and its next frame asks again."""
        dropped = self._unresolved.pop(peer, [])
        self._resolvers.pop(peer, None)
        self.stats.unresolved_frames += len(dropped)
        log.log(logging.DEBUG if quiet else logging.WARNING,
                "%s: no address for %s (%s); dropped %d frames", self._id, peer, why,
                len(dropped))

    # ----------------------------------------------------------------- inbound frames

    def _on_frame(self, link: Link, data: bytes) -> None:
        lanes = self._lanes
        if lanes and self.traffic is None:  # the native lane first (abcast.runtime.lane)
            now = self.clock.now_us()
            stepped = lane.RECEIVE(data, link.peer, lanes, now)  # type: ignore[misc]
            if stepped is not None:
                stepped[0].received(stepped[1], now)
                return
        try:
            env = decode_envelope(data)
            if link.peer is not None and env.sender != link.peer:
                raise RemoteProtocolError(
                    f"frame claims sender {env.sender!r} on a connection from {link.peer!r}"
                )
        except RemoteProtocolError as exc:
            self._refuse(link, str(exc))
            return
        traffic = self.traffic
        if traffic is not None:  # metrics on
            counts = traffic.get(env.sender) or self._new_peer(env.sender)
            counts[2] += 1
            counts[3] += len(data)
        driver = self._groups.get(env.group)
        if driver is not None:
            # `_deliver` inlined: this is the path of every frame
            try:
                driver.receive(env)
            except RemoteProtocolError as exc:
                self._refuse(link, f"group {driver.name!r}: {exc}")
            return
        endpoint = self._endpoints.get(env.group)
        if endpoint is not None:
            try:
                endpoint(link, env)
            except RemoteProtocolError as exc:
                self._refuse(link, f"endpoint {env.group!r}: {exc}")
            return
        held = self._joining.get(env.group)
        if held is not None:
            if len(held) < MAX_HELD_FRAMES:
                held.append((link, env))
                self.stats.held_frames += 1
            else:
                self.stats.overflow_frames += 1
            return
        if env.group in self._closed_groups:
            self.stats.late_frames += 1
            return
        self._unknown_group(link, env)

    def _unknown_group(self, link: Link, env: Envelope) -> None:
        """A well-formed frame for a group this node does not host: the frame is dropped,
        not the link (see the module rules); one log line per (sender, group)."""
        self.stats.unknown_group_frames += 1
        key = (env.sender, env.group)
        if key in self._unknown_logged or len(self._unknown_logged) >= MAX_UNKNOWN_LOGGED:
            return
        self._unknown_logged.add(key)
        log.info("%s: dropping frames from %s (%s) for group %r, which it does not host",
                 self._id, env.sender, link.remote, env.group)

    def _new_peer(self, peer: NodeId) -> list[int]:
        """Where a peer's traffic counts, the first time (called only while metrics are
        on): its own entry once the node has its address (a member of a hosted group's
        view, a pinned server), else the one OTHER_PEERS entry — so that a remote claiming
        a new node id per connection, or per frame where a link carries none, adds no
        entry and no `peer` label."""
        traffic = self.traffic
        assert traffic is not None
        if peer not in self._peer_urls:
            peer = OTHER_PEERS
            counts = traffic.get(peer)
            if counts is not None:
                return counts
        counts = traffic[peer] = [0, 0, 0, 0]
        return counts

    def _deliver(self, driver: GroupDriver, link: Link, env: Envelope) -> None:
        try:
            driver.receive(env)
        except RemoteProtocolError as exc:
            self._refuse(link, f"group {driver.name!r}: {exc}")

    def _refuse(self, link: Link, reason: str) -> None:
        self.stats.bad_frames += 1
        link.drop(reason)  # the transport writes the one log line and closes the connection

    def _require_open(self) -> None:
        if self._state != "open":
            raise LocalProtocolError(f"node is {self._state}, not running")
