"""mem:// — an in-process hub: transports in one process reach each other by name.

Rules: same semantics as the network transports, without bytes on a wire, so tests and
one-process clusters exercise the same contract. `start` binds the name in a
process-wide hub (`mem://` alone picks a fresh name); a peer is reached by looking its
name up when connecting, so a node that restarts under the same name is found again.
A connection is a `_MemConn` object: the sender posts batches of frames to the
receiver's loop (one post per peer and loop turn: coalesced like tcp), and the
receiver posts back "batch done", which is what `buffered()` and `drain()` count: at
most about high_water_bytes are in flight per connection, the rest waits in the queue.
Closing or dropping a connection is posted to the other side like a FIN or RST; frames
posted before it are still delivered (or, after a drop, discarded). Receivers on other
threads' loops are reached with call_soon_threadsafe.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import threading
from collections.abc import Callable
from typing import Any, ClassVar, Final

from abcast.errors import ConfigError
from abcast.ids import NodeId
from abcast.transport._common import PeerState, QueuedTransport
from abcast.transport._hello import Hello
from abcast.transport.base import Link, TransportOptions, TransportUrl

logger = logging.getLogger(__name__)

_hub_lock: Final = threading.Lock()
_hub: dict[str, MemoryTransport] = {}
_auto_names: Final = itertools.count(1)


def bound_names() -> tuple[str, ...]:
    """Names currently bound in this process (tests use it to check for leaks)."""
    with _hub_lock:
        return tuple(_hub)


class MemoryTransport(QueuedTransport):
    scheme: ClassVar[str] = "mem"

    def __init__(self, url: str | TransportUrl, options: TransportOptions | None = None) -> None:
        super().__init__(url, options)
        self._name: str | None = None
        self._thread: int | None = None
        self._channels: dict[NodeId, _MemChannel] = {}
        self._inbound: dict[Link, _MemConn] = {}

    async def _bind(self) -> str:
        self._thread = threading.get_ident()
        with _hub_lock:
            name = self._url.name
            while not name or (name in _hub and not self._url.name):
                name = f"auto-{next(_auto_names)}"
            if name in _hub:
                raise ConfigError(f"mem://{name} is already bound in this process")
            _hub[name] = self
        self._name = name
        return f"mem://{name}"

    def post(self, callback: Callable[..., None], *args: Any) -> None:
        """Run callback(*args) on this transport's loop, soon, in posting order."""
        loop = self.loop
        if threading.get_ident() == self._thread:
            loop.call_soon(callback, *args)
        else:
            with contextlib.suppress(RuntimeError):  # that loop is already closed
                loop.call_soon_threadsafe(callback, *args)

    # ------------------------------------------------------------------ outbound

    def _peer_added(self, peer: PeerState) -> None:
        channel = _MemChannel(self, peer)
        self._channels[peer.node] = channel
        channel.connect_now()

    def _peer_readdressed(self, peer: PeerState) -> None:
        self._channels[peer.node].connect_now()

    def _peer_removed(self, peer: PeerState) -> None:
        channel = self._channels.pop(peer.node, None)
        if channel is not None:
            channel.close()

    def _frames_queued(self, peer: PeerState) -> None:
        self._channels[peer.node].schedule_flush()

    def _inflight(self, peer: PeerState) -> int:
        channel = self._channels.get(peer.node)
        return 0 if channel is None else channel.inflight()

    # ------------------------------------------------------------------ inbound

    def accept(self, conn: _MemConn, hello: Hello) -> None:
        if not self.is_open:
            conn.sender_lost("peer is closed")
            return
        accepted, superseded = self.admit(hello, conn.link)
        if superseded is not None:
            self._inbound.pop(superseded, None)
        if not accepted:
            conn.link.retire()
            conn.sender_lost("stale connection")
            return
        self._inbound[conn.link] = conn

    def receive(self, conn: _MemConn, frames: list[bytes], size: int) -> None:
        if frames:
            self.deliver_all(conn.link, frames)  # stops early if the link is dropped
        conn.sender.owner.post(conn.sender.batch_done, conn, size)

    def conn_closed(self, conn: _MemConn) -> None:
        """The sender closed or replaced this connection (a FIN)."""
        self._inbound.pop(conn.link, None)
        self.sessions.forget(conn.link)
        conn.link.retire()

    def link_dropped(self, conn: _MemConn, reason: str) -> None:
        self.report_drop(conn.link, reason)
        self._inbound.pop(conn.link, None)
        conn.sender_lost(f"dropped by {self.node}: {reason}")

    async def _shutdown(self) -> None:
        with _hub_lock:
            if self._name is not None and _hub.get(self._name) is self:
                del _hub[self._name]
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
        for link, conn in list(self._inbound.items()):
            link.retire()
            conn.sender_lost("peer closed")
        self._inbound.clear()


class _MemConn:
    """One connection from a sender's channel to a receiving transport."""

    __slots__ = ("inflight", "link", "receiver", "sender")

    def __init__(self, sender: _MemChannel, receiver: MemoryTransport) -> None:
        self.sender = sender
        self.receiver = receiver
        self.inflight = 0
        self.link = Link(sender.owner.node, f"mem://{sender.owner._name}", self._dropped)

    def _dropped(self, link: Link, reason: str) -> None:
        self.receiver.link_dropped(self, reason)

    def sender_lost(self, why: str) -> None:
        self.sender.owner.post(self.sender.lost, self, why)


class _MemChannel:
    """The outbound side for one peer: look the name up, connect, post batches."""

    __slots__ = ("_closed", "_conn", "_flush_scheduled", "_peer", "_retry", "owner")

    def __init__(self, owner: MemoryTransport, peer: PeerState) -> None:
        self.owner = owner
        self._peer = peer
        self._conn: _MemConn | None = None
        self._retry: asyncio.TimerHandle | None = None
        self._flush_scheduled = False
        self._closed = False

    def connect_now(self) -> None:
        if self._closed:
            return
        self._cancel_retry()
        self._hang_up()
        owner, peer = self.owner, self._peer
        with _hub_lock:
            receiver = _hub.get(peer.address.name)
        if receiver is None or not receiver.is_open:
            delay = peer.backoff.next()
            logger.debug(
                "%s: %s is not bound; retrying %s in %.2fs", owner.label, peer.address, peer.node,
                delay,
            )
            self._retry = owner.loop.call_later(delay, self.connect_now)
            return
        conn = _MemConn(self, receiver)
        receiver.post(receiver.accept, conn, owner.next_hello(peer))
        self._conn = conn
        owner.connected(peer)
        self.schedule_flush()

    def schedule_flush(self) -> None:
        if not self._flush_scheduled and self._conn is not None:
            self._flush_scheduled = True
            self.owner.loop.call_soon(self._flush)

    def _flush(self) -> None:
        self._flush_scheduled = False
        conn, peer = self._conn, self._peer
        if conn is None or not peer.queue:
            return
        room = self.owner.options.high_water_bytes - conn.inflight
        if room <= 0:
            return  # batch_done will flush again
        frames, size = peer.take(room)
        conn.inflight += size
        conn.receiver.post(conn.receiver.receive, conn, frames, size)
        self.owner.sent(len(frames), size)

    def batch_done(self, conn: _MemConn, size: int) -> None:
        if conn is not self._conn:
            return
        conn.inflight -= size
        self.owner.progressed()
        if self._peer.queue:
            self.schedule_flush()

    def lost(self, conn: _MemConn, why: str) -> None:
        if conn is not self._conn or self._closed or not self.owner.is_open:
            return
        self._conn = None
        delay = self.owner.lost(self._peer, why)
        self._cancel_retry()
        self._retry = self.owner.loop.call_later(delay, self.connect_now)
        self.owner.progressed()

    def inflight(self) -> int:
        return 0 if self._conn is None else self._conn.inflight

    def close(self) -> None:
        self._closed = True
        self._cancel_retry()
        self._hang_up()

    def _hang_up(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.receiver.post(conn.receiver.conn_closed, conn)

    def _cancel_retry(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
