"""Machinery every concrete transport shares: lifecycle, per-peer queues, backpressure,
delivery to the frame handler, admission of inbound connections, and reconnect backoff.

Rules: `QueuedTransport` implements the public contract of base.py once (argument checks,
states, `send` queueing, `buffered`/`drain`, stats, drop logging); a concrete transport
supplies only the wire: bind, open/replace/close a peer's channel, move queued frames
to it, close an inbound connection. Everything here runs on the transport's loop
thread; thread-based transports hop onto it with `call_soon_threadsafe` before touching
anything here.

Busy polling (`TransportOptions.busy_poll_us`): every read and write restarts a window
in which a callback re-schedules itself on each loop turn, so the loop polls its sockets
without blocking; each turn yields the CPU (`sched_yield`) so that a poller never holds
off a task that has work, which on a machine with fewer cores than busy processes would
cost more than the sleep it saves.

The hello every connection starts with, the frame bound and the supersede rule that
decide whom `admit` lets in live in _hello.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import os
import random
import secrets
import time
from abc import abstractmethod
from collections import deque
from collections.abc import Callable
from typing import Any, ClassVar

from abcast.errors import ConfigError, DecodeError, LocalProtocolError, RemoteProtocolError
from abcast.ids import NodeId
from abcast.transport._framing import split_frames
from abcast.transport._hello import Hello, Refusals, Sessions, hello_refusal
from abcast.transport.base import (
    FrameHandler,
    Link,
    Transport,
    TransportOptions,
    TransportStats,
    TransportUrl,
    parse_url,
)


class Backoff:
    """Exponential reconnect delays with jitter, capped; `reset` after a success, and
    `connected` when a connection is up: a connection that ends within `maximum` seconds
    (a peer that refuses our hello, a name it cannot accept) is a failure like any
    other, so the delay keeps growing — only one that lasted resets it (a refused
    connection once made a tight reconnect loop, 55,597 log lines in 30 s). `failures`
    counts the delays asked for since then, and `reported` says a lost connection of
    this run of failures was logged at INFO (`QueuedTransport.lost`): the rest go to
    DEBUG."""

    __slots__ = ("_current", "_initial", "_maximum", "_rng", "_up_since", "failures",
                 "reported")

    def __init__(self, initial: float, maximum: float) -> None:
        self._initial = initial
        self._maximum = maximum
        self._current = initial
        self._up_since: float | None = None
        self.failures = 0
        self.reported = False
        # Jitter only spreads reconnect storms; it never decides protocol behaviour.
        self._rng = random.Random(secrets.randbits(64))

    def connected(self) -> None:
        self._up_since = time.monotonic()

    def next(self) -> float:
        up_since, self._up_since = self._up_since, None
        if up_since is not None and time.monotonic() - up_since >= self._maximum:
            self.reset()
        self.failures += 1
        delay = min(self._maximum, self._current * self._rng.uniform(0.75, 1.25))
        self._current = min(self._maximum, self._current * 2)
        return delay

    def reset(self) -> None:
        self._current = self._initial
        self.failures = 0
        self.reported = False


class Progress:
    """Wakes `drain()` waiters whenever buffered bytes may have gone down."""

    __slots__ = ("_waiters",)

    def __init__(self) -> None:
        self._waiters: list[asyncio.Future[None]] = []

    def notify(self) -> None:
        if self._waiters:
            waiters, self._waiters = self._waiters, []
            for fut in waiters:
                if not fut.done():
                    fut.set_result(None)

    async def wait(self) -> None:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        await fut


class PeerState:
    """One peer as every transport sees it: its address and its queue of unsent frames."""

    __slots__ = (
        "address",
        "backoff",
        "connected_before",
        "inflight_bytes",
        "node",
        "queue",
        "queued_bytes",
    )

    def __init__(self, node: NodeId, address: TransportUrl, backoff: Backoff) -> None:
        self.node = node
        self.address = address
        self.backoff = backoff
        self.queue: deque[bytes] = deque()
        self.queued_bytes = 0
        self.inflight_bytes = 0  # taken from the queue, not yet accepted by the wire
        self.connected_before = False

    def take(self, limit: int) -> tuple[list[bytes], int]:
        """Pop frames up to `limit` bytes (always at least one if any is queued)."""
        queue = self.queue
        batch: list[bytes] = []
        size = 0
        while queue and (not batch or size + len(queue[0]) <= limit):
            frame = queue.popleft()
            batch.append(frame)
            size += len(frame)
        self.queued_bytes -= size
        return batch, size

    def discard(self) -> int:
        count = len(self.queue)
        self.queue.clear()
        self.queued_bytes = 0
        self.inflight_bytes = 0
        return count


class BusyPoll:
    """Keeps a loop polling, not sleeping, for `budget_us` after each `touch`."""

    __slots__ = ("_armed", "_budget_ns", "_loop", "_until")

    def __init__(self, loop: asyncio.AbstractEventLoop, budget_us: int) -> None:
        self._loop = loop
        self._budget_ns = budget_us * 1000
        self._until = 0
        self._armed = False

    def touch(self) -> None:
        self._until = time.perf_counter_ns() + self._budget_ns
        if not self._armed:
            self._armed = True
            self._loop.call_soon(self._poll)

    def stop(self) -> None:
        self._until = 0

    def _poll(self) -> None:
        # A pending callback makes the loop poll with a zero timeout on its next turn.
        if time.perf_counter_ns() < self._until:
            os.sched_yield()
            self._loop.call_soon(self._poll)
        else:
            self._armed = False


#: pump(connection, data, node) -> bool: a read's frames handled (True), or nothing done
#: (False: the caller's own path runs); abcast._lane.pump, see lane_pump.c
FramePump = Callable[[Any, bytes, Any], bool]


class QueuedTransport(Transport):
    """The shared half of every transport; subclasses implement the `_wire` hooks."""

    #: whether this transport runs the link handshake and seals frames with a secret
    secures_links: ClassVar[bool] = False
    #: whether `tls=1` means something to it
    speaks_tls: ClassVar[bool] = False

    def __init__(self, url: str | TransportUrl, options: TransportOptions | None = None) -> None:
        self._url = url if isinstance(url, TransportUrl) else parse_url(url)
        if self._url.scheme != self.scheme:
            raise ConfigError(f"{type(self).__name__} speaks {self.scheme}://, not {self._url}")
        self.options = (options or TransportOptions()).with_query(self._url.query)
        if self.options.secret is not None and not self.secures_links:
            raise ConfigError(
                f"{self.scheme}:// does not authenticate links: a group secret needs "
                "tcp://, tcps://, zmq:// or udp:// (frames would otherwise go unprotected)")
        if self.options.tls and not self.speaks_tls:
            raise ConfigError(f"{self.scheme}:// has no TLS option (tcps:// and tcp:// do)")
        self.stats = TransportStats()
        #: the concrete transport's module logger (abcast.transport.tcp, …)
        self.log = logging.getLogger(type(self).__module__)
        self.incarnation = secrets.randbits(61)
        self.sessions = Sessions()
        self.refusals = Refusals()
        #: conn_seq of the hellos of this transport's outbound connections (next_hello);
        #: next() on it is atomic, so sender threads may take numbers too
        self._conn_seqs = itertools.count(1)
        self._state = "new"  # new → starting → open → closing → closed
        #: set once closed: a close() (or start()) racing the one under way waits for it
        self._done_closing = asyncio.Event()
        self._node: NodeId | None = None
        self._address: str | None = None
        self._on_frame: FrameHandler | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._peers: dict[NodeId, PeerState] = {}
        self._progress = Progress()
        self._busy: BusyPoll | None = None  # see BusyPoll; set once started
        #: (pump, node): set by the node that handles this transport's frames when the
        #: native lane is on; tcp://'s admitted plain connections offer each read to
        #: `pump(connection, data, node)` first (abcast._lane.pump, FramePump)
        self.frame_pump: tuple[FramePump, Any] | None = None

    # ----------------------------------------------------------- public contract

    @property
    def node(self) -> NodeId:
        if self._node is None:
            raise LocalProtocolError(f"{self.scheme} transport not started")
        return self._node

    @property
    def address(self) -> str:
        if self._address is None:
            raise LocalProtocolError(f"{self.scheme} transport not started")
        return self._address

    @property
    def peers(self) -> tuple[NodeId, ...]:
        return tuple(self._peers)

    @property
    def max_frame_bytes(self) -> int:
        return self.options.max_frame_bytes  # `send` refuses longer frames

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        if self._loop is None:
            raise LocalProtocolError(f"{self.scheme} transport not started")
        return self._loop

    @property
    def is_open(self) -> bool:
        return self._state == "open"

    async def start(self, node: NodeId, on_frame: FrameHandler) -> str:
        if self._state != "new":
            raise LocalProtocolError(
                f"{self.scheme} transport already {self._state}: make a new one to restart"
            )
        if not isinstance(node, str) or not 1 <= len(node) <= 64:
            raise LocalProtocolError(f"node id must be a 1..64 char string, got {node!r}")
        self._node = node
        self._on_frame = on_frame
        self._loop = asyncio.get_running_loop()
        if self.options.busy_poll_us:
            self._busy = BusyPoll(self._loop, self.options.busy_poll_us)
        self._state = "starting"
        try:
            self._address = await self._bind()
        except BaseException:
            await self._close_after_start()
            raise
        if self._state != "starting":  # close() came while binding, and waits for us
            await self._close_after_start()
            raise LocalProtocolError(f"{self.scheme} transport closed while starting")
        self._state = "open"
        return self._address

    async def _close_after_start(self) -> None:
        """Shut down what a failed or overtaken `start` bound (close() leaves it to us:
        shutting down what is still binding is not safe, grpc's server crashes)."""
        self._state = "closing"
        try:
            await self._shutdown()
        finally:
            self._state = "closed"
            self._done_closing.set()

    def add_peer(self, node: NodeId, address: str) -> None:
        self._check_open("add_peer")
        parsed = parse_url(address, expect_scheme=self.scheme)
        peer = self._peers.get(node)
        if peer is None:
            peer = PeerState(
                node,
                parsed,
                Backoff(self.options.reconnect_initial_s, self.options.reconnect_max_s),
            )
            self._peers[node] = peer
            self._peer_added(peer)
        else:
            peer.address = parsed
            peer.backoff.reset()
            self._peer_readdressed(peer)

    def remove_peer(self, node: NodeId) -> None:
        if self._state != "open":
            return
        peer = self._peers.pop(node, None)
        if peer is None:
            return
        self.stats.discarded_frames += peer.discard()
        self._peer_removed(peer)
        self._progress.notify()

    def send(self, node: NodeId, data: bytes) -> None:
        if self._state != "open":
            raise LocalProtocolError(f"send to {node!r} on a {self._state} {self.scheme} transport")
        peer = self._peers.get(node)
        if peer is None:
            raise LocalProtocolError(f"send to unknown peer {node!r}: call add_peer first")
        if type(data) is not bytes:
            data = bytes(data)  # the queue keeps a reference; a mutable buffer could change
        size = len(data)
        if size > self.options.max_frame_bytes:
            raise LocalProtocolError(
                f"frame of {size} bytes to {node!r} exceeds max_frame_bytes "
                f"{self.options.max_frame_bytes}"
            )
        peer.queue.append(data)
        peer.queued_bytes += size
        self._frames_queued(peer)

    def buffered(self, node: NodeId | None = None) -> int:
        if node is not None:
            peer = self._peers.get(node)
            return 0 if peer is None else peer.queued_bytes + self._inflight(peer)
        return max((p.queued_bytes + self._inflight(p) for p in self._peers.values()), default=0)

    async def drain(self, node: NodeId | None = None) -> None:
        high = self.options.high_water_bytes
        while self._state == "open" and self.buffered(node) > high:
            await self._progress.wait()

    async def close(self) -> None:
        if self._state == "new":
            self._state = "closed"
            self._done_closing.set()
        if self._state == "starting":
            self._state = "closing"  # start() shuts down what it bound, then sets _done_closing
        if self._state in ("closing", "closed"):
            await self._done_closing.wait()  # the close under way (or start) is over
            return
        self._state = "closing"
        if self._busy is not None:
            self._busy.stop()
        for peer in self._peers.values():
            self.stats.discarded_frames += peer.discard()
        try:
            await self._shutdown()
        finally:
            self._peers.clear()
            self._state = "closed"
            self._done_closing.set()
            self._progress.notify()

    # ----------------------------------------------------------- helpers for subclasses

    def deliver(self, link: Link, frame: bytes) -> bool:
        """Hand one inbound frame to on_frame; False once that link can take no more."""
        if self._state != "open" or not link.alive or self._on_frame is None:
            return False
        if self._busy is not None:
            self._busy.touch()
        self.stats.frames_in += 1
        self.stats.bytes_in += len(frame)
        try:
            self._on_frame(link, frame)
        except RemoteProtocolError as exc:
            link.drop(f"{type(exc).__name__}: {exc}")
        except Exception:
            self.log.exception(
                "%s: frame handler raised on a frame from %s; frame discarded", self.label,
                link.peer,
            )
        return link.alive and self._state == "open"

    def deliver_batch(self, link: Link, batch: bytes) -> bool:
        """`deliver_all` for the frames of one batch message (the tcp framing, as grpc://
        and zmq:// carry them); a batch that is not whole frames drops the link. False
        once that link can take no more."""
        try:
            frames = split_frames(batch, self.options.max_frame_bytes)
        except DecodeError as exc:
            link.drop(str(exc))
            return False
        return not frames or self.deliver_all(link, frames)

    def deliver_all(self, link: Link, frames: list[bytes]) -> bool:
        """`deliver` for every frame of one read, in order; False (and the rest of them
        left undelivered) once that link can take no more."""
        on_frame = self._on_frame
        if self._state != "open" or not link.alive or on_frame is None:
            return False
        if self._busy is not None:
            self._busy.touch()
        stats = self.stats
        for frame in frames:
            stats.frames_in += 1
            stats.bytes_in += len(frame)
            try:
                on_frame(link, frame)
            except Exception as exc:
                self.handler_failed(link, exc)
            # The handler may have dropped the link or closed the transport.
            if not link.alive or self._state != "open":
                return False
        return True

    def handler_failed(self, link: Link, exc: Exception) -> None:
        """The frame handler raised on a frame from `link`: a peer's bad frame
        (RemoteProtocolError) drops the link; anything else is logged with its traceback
        and the frame discarded (also for `frame_pump`'s reads)."""
        if isinstance(exc, RemoteProtocolError):
            link.drop(f"{type(exc).__name__}: {exc}")
        else:
            self.log.error("%s: frame handler raised on a frame from %s; frame discarded",
                           self.label, link.peer, exc_info=exc)

    def report_drop(self, link: Link, reason: str) -> None:
        """The one log line and the counters of a dropped inbound connection (of a
        refused one: one WARNING per peer and reason, DEBUG for its reconnects)."""
        self.stats.dropped_connections += 1
        self.sessions.forget(link)
        peer = link.peer or "unidentified peer"
        if link.refused:
            self.stats.refused_links += 1
            level = logging.WARNING if self.refusals.first(link.peer, reason) else logging.DEBUG
            self.log.log(level, "%s: refused the connection from %s (%s): %s",
                         self.label, peer, link.remote, reason)
            return
        self.stats.bad_frames += 1
        self.log.warning("%s: dropped connection from %s (%s): %s",
                         self.label, peer, link.remote, reason)

    def reject_frame(self, link: Link, reason: str) -> None:
        """A sealed record (a batch of frames) of an authenticated link failed its MAC,
        tag or counter: one log line, counted, its frames dropped; the link and
        everything else go on."""
        self.stats.rejected_frames += 1
        self.log.warning(
            "%s: rejected a frame from %s (%s): %s; frame dropped",
            self.label, link.peer or "unidentified peer", link.remote, reason,
        )

    def next_hello(self, peer: PeerState) -> Hello:
        """The hello of a new outbound connection to `peer` (any thread). Its conn_seq
        comes from one counter of this transport, not of the peer: a peer removed and
        added again must not start again at 1, which its receiver, still holding the
        earlier connections' hellos, would take for a late old connection."""
        return Hello(self.node, self.incarnation, next(self._conn_seqs),
                     self.options.max_frame_bytes)

    def admit(self, hello: Hello, link: Link) -> tuple[bool, Link | None]:
        """Check the frame bound, then apply the supersede rule to a fresh inbound
        connection (see module rules). A refused link is dropped here (`Link.refuse`:
        logged, counted, closed by the transport's drop), and (False, None) returned."""
        link.peer = hello.node
        refusal = hello_refusal(self.node, self.options.max_frame_bytes, hello)
        if refusal is not None:
            link.refuse(refusal)
            return False, None
        self.refusals.admitted(hello.node)
        return self.sessions.admit(hello, link)

    def connected(self, peer: PeerState) -> None:
        """An outbound connection to `peer` is up: count reconnects; the backoff resets
        once it has lasted (see Backoff)."""
        if peer.connected_before:
            self.stats.reconnects += 1
        peer.connected_before = True
        peer.backoff.connected()

    def lost(self, peer: PeerState, why: str, *, backoff: bool = True) -> float:
        """An outbound connection ended unasked: count, log, return the retry delay
        (backoff=False: the library reconnects by itself; nothing to wait for here).
        Logged at INFO once per run of failures (a peer that refuses every connection
        is one line, not one per attempt), at DEBUG until a connection lasts again."""
        self.stats.lost_connections += 1
        delay = 0.0
        first = True
        if backoff:
            delay = peer.backoff.next()
            first, peer.backoff.reported = not peer.backoff.reported, True
        self.log.log(
            logging.INFO if first else logging.DEBUG,
            "%s: connection to %s (%s) lost: %s%s",
            self.label, peer.node, peer.address, why,
            f"; reconnecting in {delay:.2f}s" if backoff else "",
        )
        return delay

    def sent(self, frames: int, size: int) -> None:
        # Thread-based transports report writes from the loop, maybe after close began.
        if self._busy is not None and self._state == "open":
            self._busy.touch()
        self.stats.frames_out += frames
        self.stats.bytes_out += size
        self._progress.notify()

    def progressed(self) -> None:
        self._progress.notify()

    @property
    def label(self) -> str:
        return f"{self.scheme} {self._node or '?'}"

    def _check_open(self, what: str) -> None:
        if self._state != "open":
            raise LocalProtocolError(f"{what} on a {self._state} {self.scheme} transport")

    # ----------------------------------------------------------- the wire (subclasses)

    @abstractmethod
    async def _bind(self) -> str:
        """Listen on self._url; return the bound URL."""

    @abstractmethod
    def _peer_added(self, peer: PeerState) -> None:
        """Open a channel to a new peer (connecting in the background)."""

    @abstractmethod
    def _peer_readdressed(self, peer: PeerState) -> None:
        """add_peer again: replace the peer's connection by a fresh one to peer.address."""

    @abstractmethod
    def _peer_removed(self, peer: PeerState) -> None:
        """Close the peer's channel; its queue is already discarded."""

    @abstractmethod
    def _frames_queued(self, peer: PeerState) -> None:
        """Frames were appended to peer.queue: arrange for them to go out (not now)."""

    def _inflight(self, peer: PeerState) -> int:
        """Bytes handed to the peer's channel but not yet accepted by the wire."""
        return peer.inflight_bytes

    @abstractmethod
    async def _shutdown(self) -> None:
        """Close the listener, every channel and every inbound connection; idempotent,
        and safe after a failed _bind."""
