"""tcp:// — asyncio Protocols over TCP, length-prefixed frames, one connection per
direction and peer.

Rules: every node listens; to send to a peer it opens its own outbound connection whose
first frame is a hello (see _hello), so each TCP connection carries one direction only.
Writes are coalesced: `send` queues, and at most two `transport.write`s per peer and
loop turn carry everything queued — the turn's first frame at once when the socket is
idle (a lone message does not wait a loop turn at every hop), everything after it in one
write at the next turn (one `call_soon` per transport and turn). Between `cork` and
`uncork`, and in one `send_run` (the runtime hands over the packets of one stack step
as a run), "the first frame" is all of the step's frames to that peer: a sequencer's own
message and its number leave in one write, so the member wakes up once for both, and
neither waits for the next turn. A run that names each peer once skips the queue for
every idle peer (`_Channel.write_at_once`: the same write, fewer steps).
TCP_NODELAY is on, since coalescing already batches. The asyncio write buffer is the
"handed to the wire" part of `buffered()`; its limits are set so that
`pause/resume_writing` wake `drain`. A lost outbound connection is retried with
exponential backoff; its queue waits. Any bytes on an outbound connection after the
handshake drop it (we never expect the peer to write back). The inbound side, which
cuts every read into frames and refuses what a peer must not send, is
abcast.transport._tcp_inbound.

With a group secret (options.secret, abcast.security) the hello is followed by the
link handshake on the same connection: the dialler sends a Challenge, the listener
writes back its Response (the one time it writes on a connection), the dialler
verifies it and sends its Confirm; only then is the connection admitted (the supersede
rule) and does the dialler's channel start writing frames (until then the connection is
the channel's all the same: remove_peer, close and add_peer again close it at once),
sealed (MAC or AEAD, and a counter) a batch at a time: each write's frames, up to
batch_bytes per sealed record, so the cost of a MAC is paid per batch, not per frame. A
failed handshake is one log line with the remote address and a closed connection; a
record that fails its MAC or counter is one log line and is dropped with its frames, the
link goes on. TLS (tcps://, or ?tls=1) wraps the connection below all this
(abcast.transport._tls).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import socket
import ssl
from collections.abc import Iterable, Iterator, Sequence
from typing import ClassVar, TypeVar, cast

from abcast.errors import ConfigError, RemoteProtocolError
from abcast.ids import NodeId
from abcast.security import Initiator, Responder, Sealer
from abcast.security.handshake import NONCE_BYTES
from abcast.transport._common import PeerState, QueuedTransport
from abcast.transport._framing import PREFIX, FrameReader, encode_frames
from abcast.transport._hello import Hello, encode_hello
from abcast.transport._tcp_inbound import _Inbound
from abcast.transport._tls import client_context, server_context
from abcast.transport.base import Link, TransportOptions, TransportUrl

logger = logging.getLogger(__name__)

_RESPONSE_ROOM = 512  # what a dialler reads of the listener: its handshake Response
_H = TypeVar("_H", Initiator, Responder)


def _set_nodelay(transport: asyncio.BaseTransport) -> None:
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class TcpTransport(QueuedTransport):
    scheme: ClassVar[str] = "tcp"
    secures_links: ClassVar[bool] = True
    speaks_tls: ClassVar[bool] = True

    def __init__(self, url: str | TransportUrl, options: TransportOptions | None = None) -> None:
        super().__init__(url, options)
        self._server: asyncio.Server | None = None
        self._channels: dict[NodeId, _Channel] = {}
        self._inbound: dict[Link, _Inbound] = {}
        #: channels with frames queued this loop turn; one callback flushes them all
        self._dirty: list[_Channel] = []
        self._corks = 0  # open `cork` calls
        #: channels that were sent frames while corked, flushed at the outermost uncork
        self._corked: list[_Channel] = []
        tls = self.options.tls or self.scheme == "tcps"
        self._server_ssl: ssl.SSLContext | None = server_context(self.options) if tls else None
        self._client_ssl: ssl.SSLContext | None = client_context(self.options) if tls else None

    def handshake(self, role: type[_H], peer: NodeId, hello: Hello) -> _H | None:
        """The handshake of a new connection with `peer`, as Initiator (outbound, `hello`
        ours) or Responder (inbound, `hello` the peer's, which named `peer`); None
        without a secret. It binds the hello's frame bound (abcast.security.handshake)."""
        secret = self.options.secret
        if secret is None:
            return None
        return role(secret, me=self.node, peer=peer, mode=self.options.link_mode,
                    nonce=secrets.token_bytes(NONCE_BYTES), frame_bytes=hello.max_frame_bytes)

    @property
    def client_ssl(self) -> ssl.SSLContext | None:
        """The TLS context of outbound connections (None: plain TCP)."""
        return self._client_ssl

    async def _bind(self) -> str:
        url = self._url
        if self.options.aead and self.options.secret is None:
            raise ConfigError("aead=1 encrypts under the group secret: give a secret")
        try:
            self._server = await self.loop.create_server(
                lambda: _Inbound(self), host=url.host, port=url.port, reuse_address=True,
                ssl=self._server_ssl,
                # the TLS handshake gets what the hello gets (asyncio's default: 60 s)
                ssl_handshake_timeout=(self.options.io_timeout_s if self._server_ssl
                                       is not None else None),
            )
        except OSError as exc:
            raise ConfigError(f"{self.scheme}: cannot listen on {url}: {exc}") from exc
        port = self._server.sockets[0].getsockname()[1]
        return str(TransportUrl(self.scheme, host=url.host, port=port))

    def _peer_added(self, peer: PeerState) -> None:
        channel = _Channel(self, peer)
        self._channels[peer.node] = channel
        channel.connect_now()

    def _peer_readdressed(self, peer: PeerState) -> None:
        self._channels[peer.node].connect_now()

    def _peer_removed(self, peer: PeerState) -> None:
        channel = self._channels.pop(peer.node, None)
        if channel is not None:
            channel.close()

    def _frames_queued(self, peer: PeerState) -> None:
        channel = self._channels[peer.node]
        if not self._corks:
            channel.schedule_flush()
        elif not channel.corked:
            channel.corked = True
            self._corked.append(channel)

    def send_run(self, frames: Sequence[tuple[NodeId, bytes]]) -> None:
        """`Transport.send_run`: a run that names each peer once and finds it idle (see
        `_Channel.write_at_once`) is written frame by frame at once, the same writes
        `cork`, `send` and `uncork` would make, without the queue."""
        if self._corks or self._state != "open" or (
                len(frames) > 1 and len({node for node, _ in frames}) < len(frames)):
            super().send_run(frames)  # nested in a cork, or a peer twice: one write each
            return
        channels, peers, limit = self._channels, self._peers, self.options.max_frame_bytes
        for node, data in frames:
            size = len(data)
            if (node in peers and type(data) is bytes and size <= limit
                    and channels[node].write_at_once(data)):
                self.sent(1, size)
            else:
                self.send(node, data)  # queued, or refused as `send` refuses it

    def cork(self) -> None:
        self._corks += 1

    def uncork(self) -> None:
        self._corks -= 1
        if self._corks or not self._corked:
            return
        corked, self._corked = self._corked, []
        for channel in corked:
            channel.corked = False
            channel.schedule_flush()

    def end_turn_later(self, channel: _Channel) -> None:
        """Call `channel.turn_ended` at the next loop turn, with every other channel that
        sent in this one: a multicast costs one loop callback, not one a peer."""
        dirty = self._dirty
        if not dirty:
            self.loop.call_soon(self._end_turn)
        dirty.append(channel)

    def _end_turn(self) -> None:
        dirty, self._dirty = self._dirty, []
        for channel in dirty:
            channel.turn_ended()

    def _inflight(self, peer: PeerState) -> int:
        channel = self._channels.get(peer.node)
        return 0 if channel is None else channel.write_buffer_size()

    async def _shutdown(self) -> None:
        if self._server is not None:
            self._server.close()
        for channel in self._channels.values():
            channel.close()
        self._channels.clear()
        for link, inbound in list(self._inbound.items()):
            link.retire()
            inbound.abort()
        self._inbound.clear()
        if self._server is not None:
            await self._server.wait_closed()
        # Let connection_lost callbacks run so every socket is released before we return.
        await asyncio.sleep(0)

    def close_inbound(self, link: Link) -> None:
        inbound = self._inbound.pop(link, None)
        if inbound is not None:
            inbound.abort()


class _Channel:
    """The outbound side for one peer: connects, reconnects, and writes its queue."""

    __slots__ = (
        "_attempt",
        "_closed",
        "_conn",
        "_connecting",
        "_flush_scheduled",
        "_handshaking",
        "_in_turn",
        "_owner",
        "_peer",
        "_retry",
        "corked",
    )

    def __init__(self, owner: TcpTransport, peer: PeerState) -> None:
        self._owner = owner
        self._peer = peer
        self._conn: _Outbound | None = None
        #: the current attempt's connection while it runs the link handshake (a secret)
        self._handshaking: _Outbound | None = None
        self._connecting: asyncio.Task[None] | None = None
        self._retry: asyncio.TimerHandle | None = None
        self._flush_scheduled = False
        self._in_turn = False  # this channel already wrote in this loop turn
        self.corked = False  # sent frames while the transport is corked (see uncork)
        self._closed = False
        self._attempt = 0  # a connection from an older attempt is stale when it completes

    def connect_now(self) -> None:
        """Open a fresh connection (replacing any current one) without waiting."""
        if self._closed:
            return
        self._cancel_pending()
        self._attempt += 1
        self._hang_up()
        self._connecting = self._owner.loop.create_task(self._connect())

    async def _connect(self) -> None:
        owner, peer = self._owner, self._peer
        hello = owner.next_hello(peer)
        address = peer.address
        attempt = self._attempt
        auth = owner.handshake(Initiator, peer.node, hello)
        try:
            async with asyncio.timeout(owner.options.io_timeout_s):
                await owner.loop.create_connection(
                    lambda: _Outbound(self, hello, attempt, auth), address.host, address.port,
                    ssl=owner.client_ssl,
                    server_hostname=address.host if owner.client_ssl is not None else None,
                )
        except (TimeoutError, OSError) as exc:
            if self._closed or attempt != self._attempt:
                return  # closed, or a newer attempt replaced this one
            delay = peer.backoff.next()
            logger.debug(
                "%s: cannot connect to %s at %s (%s); retrying in %.2fs",
                owner.label, peer.node, address, exc, delay,
            )
            self._retry = owner.loop.call_later(delay, self.connect_now)
        finally:
            if self._connecting is asyncio.current_task():
                self._connecting = None

    def handshake_started(self, conn: _Outbound) -> None:
        """A connection is up and runs the link handshake: it is this channel's to close
        (by connect_now, close) until `connection_made`."""
        if self._closed or not self._owner.is_open or conn.attempt != self._attempt:
            conn.abort()
            return
        self._handshaking = conn

    def connection_made(self, conn: _Outbound) -> None:
        if conn is self._handshaking:
            self._handshaking = None
        if self._closed or not self._owner.is_open or conn.attempt != self._attempt:
            conn.abort()
            return
        self._conn = conn
        self._owner.connected(self._peer)
        self._flush()

    def connection_lost(self, conn: _Outbound, why: str) -> None:
        if conn is self._handshaking:
            self._handshaking = None
        if conn is not self._conn:
            if (conn.attempt == self._attempt and not conn.established and not self._closed
                    and self._owner.is_open and self._retry is None):
                # the current attempt failed its handshake: retry, with backoff
                delay = self._owner.lost(self._peer, why)
                self._retry = self._owner.loop.call_later(delay, self.connect_now)
            return  # a connection we replaced or aborted ourselves
        self._conn = None
        if self._closed or not self._owner.is_open:
            return
        delay = self._owner.lost(self._peer, why)
        self._cancel_pending()
        self._retry = self._owner.loop.call_later(delay, self.connect_now)
        self._owner.progressed()  # the write buffer of the lost connection is gone

    def schedule_flush(self) -> None:
        """Frames were queued. The first of a loop turn goes out at once if the socket
        is idle (a lone message waits for no loop turn); what follows in the same turn
        is coalesced into one write at the next turn."""
        conn = self._conn
        if conn is None or self._flush_scheduled:
            return
        if not self._in_turn:
            self._in_turn = True
            self._owner.end_turn_later(self)
            if not conn.write_buffer_size():
                self._flush()
                return
        self._flush_scheduled = True

    def write_at_once(self, data: bytes) -> bool:
        """`send` and `schedule_flush` in one step for a frame that finds this channel
        idle — nothing queued, nothing written in this loop turn, an established
        connection without a sealer and with an empty write buffer — : written now, as
        `_flush` would write it. False, and nothing done, otherwise."""
        conn = self._conn
        if conn is None or self._in_turn or self._peer.queue or conn.sealer is not None:
            return False
        writer = conn._transport
        if writer is None or writer.get_write_buffer_size():
            return False
        self._in_turn = True
        self._owner.end_turn_later(self)
        writer.write(PREFIX.pack(len(data)) + data)
        return True

    def turn_ended(self) -> None:
        self._in_turn = False
        if self._flush_scheduled:
            self._flush()

    def _flush(self) -> None:
        self._flush_scheduled = False
        conn, peer = self._conn, self._peer
        if conn is None or not peer.queue:
            return
        queue = peer.queue
        count, size = len(queue), peer.queued_bytes
        # one write (one syscall) for all of this turn's frames; a lone frame (the common
        # case at low load) skips the join
        sealer = conn.sealer
        if sealer is not None:
            data = encode_frames([sealer.seal(record) for record in
                                  _records(queue, self._owner.options.batch_bytes)])
        else:
            data = PREFIX.pack(size) + queue[0] if count == 1 else encode_frames(queue)
        queue.clear()
        peer.queued_bytes = 0
        conn.write(data)
        self._owner.sent(count, size)

    def write_buffer_size(self) -> int:
        return 0 if self._conn is None else self._conn.write_buffer_size()

    def close(self) -> None:
        self._closed = True
        self._cancel_pending()
        self._hang_up()

    def _hang_up(self) -> None:
        """Abort the current connection, established or still in its handshake."""
        for conn in (self._conn, self._handshaking):
            if conn is not None:
                conn.abort()
        self._conn = self._handshaking = None

    def _cancel_pending(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        if self._connecting is not None:
            self._connecting.cancel()
            self._connecting = None


def _records(queue: Iterable[bytes], batch_bytes: int) -> Iterator[bytes]:
    """The queued frames as sealed-record bodies: each the length-prefixed frames of up
    to `batch_bytes` (at least one frame), so one MAC covers a whole batch."""
    chunk: list[bytes] = []
    size = 0
    for frame in queue:
        if chunk and size + len(frame) > batch_bytes:
            yield encode_frames(chunk)
            chunk, size = [], 0
        chunk.append(frame)
        size += len(frame)
    if chunk:
        yield encode_frames(chunk)


class _Outbound(asyncio.Protocol):
    """One outbound TCP connection: hello first (and, with a secret, the handshake),
    then whatever the channel writes."""

    def __init__(self, channel: _Channel, hello: Hello, attempt: int,
                 auth: Initiator | None) -> None:
        self._channel = channel
        self._hello = hello
        self.attempt = attempt
        self._transport: asyncio.WriteTransport | None = None
        self._auth = auth
        self._reader: FrameReader | None = None
        self._timer: asyncio.TimerHandle | None = None
        self.established = auth is None
        #: seals every frame once the handshake is done (None without a secret)
        self.sealer: Sealer | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # A cast, not an isinstance check: uvloop's transports do not subclass asyncio's.
        writer = self._transport = cast(asyncio.WriteTransport, transport)
        _set_nodelay(transport)
        owner = self._channel._owner
        high = owner.options.high_water_bytes
        writer.set_write_buffer_limits(high=high, low=high // 2)
        if self._auth is None:
            writer.write(encode_frames([encode_hello(self._hello)]))
            self._channel.connection_made(self)
            return
        writer.write(encode_frames([encode_hello(self._hello), self._auth.challenge()]))
        self._reader = FrameReader(_RESPONSE_ROOM)
        timeout = owner.options.io_timeout_s
        self._timer = owner.loop.call_later(
            timeout, self._refused, f"no handshake response within {timeout:g}s")
        self._channel.handshake_started(self)

    def _refused(self, why: str, parting: bytes | None = None) -> None:
        self._timer = None
        channel = self._channel
        logger.warning("%s: link handshake with %s (%s) failed: %s; closing",
                       channel._owner.label, channel._peer.node, channel._peer.address, why)
        if parting is not None and self._transport is not None:
            self._transport.write(encode_frames([parting]))
            self._transport.close()  # after the Refusal has gone out
            return
        self.abort()

    def data_received(self, data: bytes) -> None:
        if not self.established and self._auth is not None and self._reader is not None:
            frames, error = self._reader.feed(data)
            if error is not None or len(frames) > 1 or (self._reader.pending and frames):
                self._refused(error or "unexpected bytes after the handshake response")
                return
            if not frames:
                return
            if self._timer is not None:
                self._timer.cancel()
                self._timer = None
            try:
                confirm = self._auth.receive(frames[0])
            except RemoteProtocolError as exc:
                self._refused(str(exc), self._auth.parting)
                return
            self.write(encode_frames([confirm]))
            self.sealer = self._auth.sealer()
            self.established = True
            self._channel.connection_made(self)
            return
        # The receiving side never writes on this connection after the handshake:
        # anything here is garbage.
        self._channel._owner.stats.bad_frames += 1
        logger.warning(
            "%s: %d unexpected bytes on the outbound connection to %s; reconnecting",
            self._channel._owner.label, len(data), self._channel._peer.node,
        )
        self.abort()
        self._channel.connection_lost(self, "peer wrote on an outbound connection")

    def connection_lost(self, exc: Exception | None) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._channel.connection_lost(self, str(exc) if exc else "closed by peer")
        self._transport = None

    def resume_writing(self) -> None:
        self._channel._owner.progressed()

    def write(self, data: bytes) -> None:
        if self._transport is not None:
            self._transport.write(data)

    def write_buffer_size(self) -> int:
        return 0 if self._transport is None else self._transport.get_write_buffer_size()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()


class TlsTransport(TcpTransport):
    """tcps:// — tcp:// inside TLS (the same as tcp://…?tls=1, but the scheme says so)."""

    scheme: ClassVar[str] = "tcps"
