"""grpc:// — grpc.aio, one client-streaming RPC per direction and peer, no codegen.

Rules: the service is declared with grpc's generic handlers (method
/abcast.transport.Transport/Push, stream → unary, bytes in and out with no
serializers), so there is no .proto and no compile step. A sender opens one Push call
per connection, its hello (see _hello) in the call's metadata (HELLO_KEY); every
message is a batch of up to batch_bytes of length-prefixed frames (the tcp framing). The
receiver admits or refuses a call on its metadata, before asking for any of its
messages, then delivers the frames of each message in order and returns b"" only when
the stream ends. Backpressure is HTTP/2 flow control: `call.write` waits, and the batch
being written counts as in flight. A failed call (peer gone, dropped) is replaced by a new
channel and call after a backoff; the batch that was being written is lost (it may have
been half delivered, and resending could duplicate). To drop a link the receiver aborts
the call; a superseded call is cancelled; a call without a valid hello is dropped at
once (logged, counted), and one that carries nothing for idle_timeout_s is ended
quietly (INFO, idle_closed), as tcp:// does with its connections.

What a stranger's call costs before it is refused: its metadata (grpc refuses more than
8 KiB, grpc.max_metadata_size, 16 KiB hard, RESOURCE_EXHAUSTED before the handler runs)
and what grpc read of its messages ahead of the refusal, dropped with the call: grpc
reads a stream ahead of the application, within a flow-control window its BDP probe
grows (measured: 1-2 MB of a 16 MiB message refused at once; 8 MiB into a call its
server left stalled for 2 s; `grpc.http2.bdp_probe` 0 would hold that to 64 KiB, at
the cost of a window that no longer grows with a slow link's bandwidth-delay product).
grpcio has no per-call receive bound (max_receive_message_length is the server's, for
every call), so a hello read as the call's first message, as before, was read whole, up
to that bound (17 MiB by default), for up to io_timeout_s.

TLS (`grpc://…?tls=1` with tls_cert/tls_key, and tls_ca to check the other side) is
grpc's own: the listener's port is a secure port (demanding a client certificate signed
by tls_ca when one is given: mutual TLS), every channel a secure channel.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from typing import ClassVar, Final

import grpc
import grpc.aio

from abcast.errors import ConfigError, DecodeError
from abcast.ids import NodeId
from abcast.transport._common import PeerState, QueuedTransport
from abcast.transport._framing import encode_frames
from abcast.transport._hello import decode_hello, encode_hello
from abcast.transport._tls import read_pems
from abcast.transport.base import Link, TransportOptions, TransportUrl

logger = logging.getLogger(__name__)

SERVICE: Final = "abcast.transport.Transport"
METHOD: Final = "Push"
METHOD_PATH: Final = f"/{SERVICE}/{METHOD}"
#: the call's metadata entry carrying its hello (binary: "-bin")
HELLO_KEY: Final = "abcast-hello-bin"


def _target(url: TransportUrl) -> str:
    host = f"[{url.host}]" if ":" in url.host else url.host
    return f"{host}:{url.port}"


class GrpcTransport(QueuedTransport):
    scheme: ClassVar[str] = "grpc"
    speaks_tls: ClassVar[bool] = True

    def __init__(self, url: str | TransportUrl, options: TransportOptions | None = None) -> None:
        super().__init__(url, options)
        self._server_creds: grpc.ServerCredentials | None = None
        self._channel_creds: grpc.ChannelCredentials | None = None
        if self.options.tls:
            cert, key, ca = read_pems(self.options)
            if cert is None or key is None:
                raise ConfigError("grpc:// with tls=1 needs tls_cert and tls_key")
            self._server_creds = grpc.ssl_server_credentials(
                [(key, cert)], root_certificates=ca, require_client_auth=ca is not None)
            self._channel_creds = grpc.ssl_channel_credentials(
                root_certificates=ca, private_key=key, certificate_chain=cert)
        self._server: grpc.aio.Server | None = None
        self._channels: dict[NodeId, _GrpcChannel] = {}
        self._handlers: dict[Link, asyncio.Task[object]] = {}
        self._drop_reasons: dict[Link, str] = {}  # read once by the dropped link's handler

    @property
    def max_message_bytes(self) -> int:
        return self.options.max_frame_bytes + self.options.batch_bytes + 1024

    def channel_options(self) -> list[tuple[str, int]]:
        return [
            ("grpc.max_send_message_length", -1),
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.enable_http_proxy", 0),
            ("grpc.enable_retries", 0),
            ("grpc.initial_reconnect_backoff_ms", int(self.options.reconnect_initial_s * 1000)),
            ("grpc.min_reconnect_backoff_ms", int(self.options.reconnect_initial_s * 1000)),
            ("grpc.max_reconnect_backoff_ms", int(self.options.reconnect_max_s * 1000)),
        ]

    def open_channel(self, target: str) -> grpc.aio.Channel:
        """A channel to `target`: a secure one with TLS on."""
        if self._channel_creds is not None:
            return grpc.aio.secure_channel(target, self._channel_creds,
                                           options=self.channel_options())
        return grpc.aio.insecure_channel(target, options=self.channel_options())

    async def _bind(self) -> str:
        server = grpc.aio.server(
            options=[
                ("grpc.max_receive_message_length", self.max_message_bytes),
                ("grpc.max_send_message_length", -1),
                # grpc turns SO_REUSEPORT on by default: two nodes could share a port.
                ("grpc.so_reuseport", 0),
            ]
        )
        self._server = server
        handler = grpc.method_handlers_generic_handler(
            SERVICE, {METHOD: grpc.stream_unary_rpc_method_handler(self._serve)}
        )
        server.add_generic_rpc_handlers((handler,))
        url = self._url
        try:
            if self._server_creds is not None:
                port = server.add_secure_port(_target(url), self._server_creds)
            else:
                port = server.add_insecure_port(_target(url))
        except RuntimeError as exc:
            raise ConfigError(f"grpc: cannot listen on {url}: {exc}") from exc
        if port == 0:
            raise ConfigError(f"grpc: cannot listen on {url}")
        await server.start()
        return str(TransportUrl("grpc", host=url.host, port=port))

    # ------------------------------------------------------------------ inbound

    async def _serve(
        self, requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext
    ) -> bytes:
        link = Link(None, context.peer(), self._dropped)
        task = asyncio.current_task()
        assert task is not None
        self._handlers[link] = task
        reason: str | None = None
        try:
            if self._greet(context, link):
                await self._receive(aiter(requests), link)
        finally:
            reason = self._drop_reasons.pop(link, None)
            self._handlers.pop(link, None)
            self.sessions.forget(link)
            link.retire()
        if reason is not None:
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, reason)
        return b""

    def _greet(self, context: grpc.aio.ServicerContext, link: Link) -> bool:
        """Admit the call by the hello in its metadata, before any of its messages is
        read; False: the call ends here (dropped, refused, or a late call superseded
        by a newer one)."""
        hellos = [value for key, value in context.invocation_metadata() or ()
                  if key == HELLO_KEY]
        if len(hellos) != 1 or not isinstance(hellos[0], bytes):
            link.drop(f"no hello (one {HELLO_KEY} metadata entry) in the call")
            return False
        if not self.is_open:
            return False
        try:
            hello = decode_hello(hellos[0])
        except DecodeError as exc:
            link.drop(str(exc))
            return False
        accepted, superseded = self.admit(hello, link)
        if superseded is not None:
            self._cancel_handler(superseded)
        if not accepted:
            link.retire()
        return accepted

    async def _receive(self, messages: AsyncIterator[bytes], link: Link) -> None:
        """Deliver the frames of each batch until the call ends or the link is dropped;
        end a call that carries nothing for idle_timeout_s (quietly: not an error)."""
        idle = self.options.idle_timeout_s
        loop = self.loop
        try:
            async with asyncio.timeout(idle) as quiet:
                async for message in messages:
                    quiet.reschedule(loop.time() + idle)
                    if (not link.alive or not self.is_open
                            or not self.deliver_batch(link, message)):
                        return  # dropped or closing: end the call now, not at the next one
        except TimeoutError:
            self.stats.idle_closed += 1
            logger.info("%s: closed the call from %s (%s), idle for %gs",
                        self.label, link.peer, link.remote, idle)

    def _dropped(self, link: Link, reason: str) -> None:
        self.report_drop(link, reason)
        self._drop_reasons[link] = reason
        self._cancel_handler(link)

    def _cancel_handler(self, link: Link) -> None:
        task = self._handlers.get(link)
        if task is not None and task is not asyncio.current_task():
            task.cancel()

    # ------------------------------------------------------------------ outbound

    def _peer_added(self, peer: PeerState) -> None:
        channel = _GrpcChannel(self, peer)
        self._channels[peer.node] = channel
        channel.connect_now()

    def _peer_readdressed(self, peer: PeerState) -> None:
        self._channels[peer.node].connect_now()

    def _peer_removed(self, peer: PeerState) -> None:
        channel = self._channels.pop(peer.node, None)
        if channel is not None:
            channel.close()

    def _frames_queued(self, peer: PeerState) -> None:
        self._channels[peer.node].wake()

    async def _shutdown(self) -> None:
        senders = [task for channel in self._channels.values() for task in channel.close()]
        self._channels.clear()
        await asyncio.gather(*senders, return_exceptions=True)
        for link in list(self._handlers):
            link.retire()
        if self._server is not None:
            await self._server.stop(grace=None)
        handlers = list(self._handlers.values())
        for task in handlers:
            task.cancel()
        await asyncio.gather(*handlers, return_exceptions=True)


class _GrpcChannel:
    """One peer's sender task: channel + Push call, rebuilt after failures."""

    __slots__ = ("_owner", "_peer", "_replaced", "_task", "_wake")

    def __init__(self, owner: GrpcTransport, peer: PeerState) -> None:
        self._owner = owner
        self._peer = peer
        self._task: asyncio.Task[None] | None = None
        #: replaced sender tasks still closing their grpc channel (close awaits them)
        self._replaced: set[asyncio.Task[None]] = set()
        self._wake: asyncio.Future[None] | None = None

    def connect_now(self) -> None:
        old = self._task
        if old is not None:
            old.cancel()  # its finally closes the old channel
            self._replaced.add(old)
            old.add_done_callback(self._replaced.discard)
        self._task = self._owner.loop.create_task(self._run())

    def wake(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def _run(self) -> None:
        owner, peer = self._owner, self._peer
        # The loop also ends when this task is no longer the channel's (closed, or replaced
        # by connect_now), not only by its cancellation: a cancellation can be lost.
        while self._task is asyncio.current_task():
            established = False
            why = "call ended"
            address = peer.address
            channel = owner.open_channel(_target(address))
            hello = encode_hello(owner.next_hello(peer))
            call: grpc.aio.StreamUnaryCall = channel.stream_unary(METHOD_PATH)(
                metadata=((HELLO_KEY, hello),))
            call.add_done_callback(lambda _call: self.wake())
            try:
                # asyncio.timeout, not wait_for: on 3.11, wait_for returns (or raises) the
                # outcome when a cancellation arrives as the wait completes, and the
                # cancellation is lost.
                async with asyncio.timeout(owner.options.io_timeout_s):
                    await call.wait_for_connection()  # the hello (metadata) is sent
                established = True
                owner.connected(peer)
                await self._pump(call)
            except grpc.aio.AioRpcError as exc:
                why = f"{exc.code().name}: {exc.details()}"
            except Exception as exc:  # a call can fail in several grpc-specific ways
                why = f"{type(exc).__name__}: {exc}"
            finally:
                peer.inflight_bytes = 0
                call.cancel()
                await channel.close()
                owner.progressed()
            if self._task is not asyncio.current_task():
                return
            if established:
                delay = owner.lost(peer, why)
            else:
                delay = peer.backoff.next()
                logger.debug(
                    "%s: cannot reach %s at %s (%s); retrying in %.2fs",
                    owner.label, peer.node, address, why, delay,
                )
            await asyncio.sleep(delay)

    async def _pump(self, call: grpc.aio.StreamUnaryCall) -> None:
        owner, peer = self._owner, self._peer
        limit = owner.options.batch_bytes
        while self._task is asyncio.current_task():
            if call.done():
                await call  # raises AioRpcError with the receiver's status
                raise asyncio.InvalidStateError("the peer ended the stream")
            if not peer.queue:
                self._wake = owner.loop.create_future()
                await self._wake
                continue
            frames, size = peer.take(limit)
            peer.inflight_bytes = size
            # Counted when handed over: if the write fails they are lost at the break.
            owner.sent(len(frames), size)
            await call.write(encode_frames(frames))
            peer.inflight_bytes = 0
            owner.progressed()

    def close(self) -> list[asyncio.Task[None]]:
        """Stop sending; returns the tasks to await for every channel to be closed (the
        current one's and those of the tasks connect_now replaced)."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
        return [t for t in (task, *self._replaced) if t is not None]
