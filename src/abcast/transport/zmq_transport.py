"""zmq:// — pyzmq (asyncio): one ROUTER bound per node, one DEALER per peer.

Rules: a DEALER's routing id *is* its hello (node, incarnation, conn_seq, frame bound),
so the ROUTER knows who sent every message without an extra round trip, and the
supersede rule and the frame bound's check of _hello apply per routing id (a refused
one gets a DROP; the key of a secret link is derived from the whole routing id, its
bound included). A zmq message carries a batch: up to batch_bytes of frames in the
length-prefixed framing of tcp (one part per frame would cost a Python object per part
on both sides), so coalescing happens here, not in libzmq. Each peer has a pump task
(queue → `send`, awaiting when the DEALER's small SNDHWM is reached, which is how
backpressure reaches `drain`) and a control task (reads monitor events to count
connects/disconnects, and DROP notices). A pump cancelled (add_peer again, a DROP,
remove_peer, close) while a send waits puts that batch back at the head of the queue
(counts it discarded when closing), unless the send completed in that loop turn: then
the batch went and counts in frames_out (queued again, it went twice). To drop a
link the ROUTER sends [id, b"DROP", reason] back; the DEALER then closes and
reconnects under a new routing id after a backoff. libzmq reconnects a DEALER by
itself after a peer restart (RECONNECT_IVL..RECONNECT_IVL_MAX = our backoff); `add_peer`
again makes a fresh DEALER.
A batch that does not split into whole frames is a bad frame (drop, counted); a message
larger than any valid batch makes libzmq (MAXMSGSIZE) cut the connection itself, which
we cannot count.

Departed peers: the ROUTER is never told that a DEALER went away. libzmq would say so
with ROUTER_NOTIFY, a draft option: pyzmq 27.3 defines the constant, but the libzmq
4.3.5 it ships is built without the draft API (zmq.has("draft") is False, setting it
raises EINVAL). libzmq frees a departed peer's pipe itself (a send to its routing id
then fails EHOSTUNREACH); what this side keeps per routing id (its link, its session
under the supersede rule, with a secret its opener: ~720 B with a 64-char node id) is
bounded by count instead: at most MAX_IDENTITIES (4096, ~3 MB). At the bound the dead
ones go (dropped, refused, superseded: kept so that what they still send is ignored
quietly), then the least recently heard from, down to half the bound. A peer that
reconnects comes under a new routing id (its conn_seq rises) and supersedes its old
link, which is dead from then on; so a live peer's state goes only when over 2048
other live routing ids were heard from since (strangers, without a secret: with one,
a stranger's link is dead at its first batch), and it is admitted afresh on its next
batch, as on a new connection; with a secret, the counter its opener had reached stays
behind (up to 4 x MAX_IDENTITIES of them), so its recorded batches stay replays.

With a group secret every batch is encrypted (AES-256-GCM, abcast.security.sealing)
under a key derived from the secret and the DEALER's routing id (unique per connection),
its counter as nonce; there is no handshake. The ROUTER admits a routing id (the
supersede rule) only once its first batch authenticates: a first batch that does not is
a stranger (one log line, link dropped); a later one that does not, or a replayed one,
is one log line and dropped, the link goes on.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable
from typing import ClassVar, Final

import zmq
import zmq.asyncio
from zmq.utils.monitor import recv_monitor_message

from abcast.errors import ConfigError, DecodeError, RemoteProtocolError
from abcast.ids import NodeId
from abcast.security import Opener, Sealer
from abcast.security.secret import session_key
from abcast.transport._common import PeerState, QueuedTransport
from abcast.transport._framing import encode_frames
from abcast.transport._hello import Hello, decode_hello, encode_hello
from abcast.transport.base import Link, TransportOptions, TransportUrl

logger = logging.getLogger(__name__)

DROP: Final = b"DROP"
_SNDHWM: Final = 4  # messages (batches) queued inside libzmq per peer; the rest waits in ours
_COPY_THRESHOLD: Final = 64 * 1024  # zero-copy sends only pay off for large buffers
#: routing ids whose state (a link, its session, with a secret its opener) the ROUTER
#: side keeps; past it the one heard from least recently goes (see the module rules)
MAX_IDENTITIES: Final = 4096


def _endpoint(url: TransportUrl) -> str:
    host = f"[{url.host}]" if ":" in url.host else url.host
    return f"tcp://{host}:{url.port}"


class ZmqTransport(QueuedTransport):
    scheme: ClassVar[str] = "zmq"
    secures_links: ClassVar[bool] = True

    def __init__(self, url: str | TransportUrl, options: TransportOptions | None = None) -> None:
        super().__init__(url, options)
        self._ctx: zmq.asyncio.Context | None = None
        self._router: zmq.asyncio.Socket | None = None
        self._recv_task: asyncio.Task[None] | None = None
        self._links: dict[bytes, Link] = {}
        self._channels: dict[NodeId, _ZmqChannel] = {}
        self._notices: set[asyncio.Task[None]] = set()
        #: with a secret: each link's opener, and the hello of links not yet admitted
        self._openers: dict[Link, Opener] = {}
        #: with a secret: the last counter accepted on each routing id whose state went
        #: (_forget), so that its recorded batches stay replays (4 x MAX_IDENTITIES of them,
        #: the oldest go first, as udp:// keeps its tombstones)
        self._spent: dict[bytes, int] = {}
        self._unproven: dict[Link, Hello] = {}

    def session_key(self, routing_id: bytes) -> bytes | None:
        """The AEAD key of the connection with this routing id (None: no secret)."""
        secret = self.options.secret
        return None if secret is None else session_key(secret, session=routing_id,
                                                        label=b"zmq")

    @property
    def context(self) -> zmq.asyncio.Context:
        assert self._ctx is not None
        return self._ctx

    async def _bind(self) -> str:
        self._ctx = zmq.asyncio.Context()
        router = self._ctx.socket(zmq.ROUTER)
        self._router = router
        router.setsockopt(zmq.LINGER, 0)
        limit = self.options.max_frame_bytes + self.options.batch_bytes + 1024
        router.setsockopt(zmq.MAXMSGSIZE, limit)
        url = self._url
        try:
            if url.port == 0:
                port = router.bind_to_random_port(f"tcp://{url.host}")
            else:
                router.bind(_endpoint(url))
                port = url.port
        except zmq.ZMQError as exc:
            raise ConfigError(f"zmq: cannot bind {url}: {exc}") from exc
        self._recv_task = self.loop.create_task(self._receive_loop(router))
        return str(TransportUrl("zmq", host=url.host, port=port))

    # ------------------------------------------------------------------ inbound

    async def _receive_loop(self, router: zmq.asyncio.Socket) -> None:
        links = self._links
        while True:
            parts = await router.recv_multipart()
            identity = parts[0]
            link = links.pop(identity, None)  # put back last: the most recently heard
            if link is None:
                link = self._open_link(identity)
            else:
                links[identity] = link
            if not link.alive:
                continue
            opener = self._openers.get(link)
            for message in parts[1:]:
                batch = message if opener is None else self._open(link, opener, message)
                if batch is None:
                    if not link.alive:
                        break
                    continue
                if not self.deliver_batch(link, batch):
                    break

    def _make_room(self) -> None:
        """At MAX_IDENTITIES routing ids, let go of the state of every dead one (dropped,
        refused, superseded: kept till now so that what they send is ignored quietly),
        then of the least recently heard from, down to half the bound: each scan frees
        half of it. The ROUTER cannot tell a departed peer from a quiet one."""
        links = self._links
        if len(links) < MAX_IDENTITIES:
            return
        for identity in [k for k, link in links.items() if not link.alive]:
            self._forget(identity)
        while len(links) > MAX_IDENTITIES // 2:
            self._forget(next(iter(links)))

    def _forget(self, identity: bytes) -> None:
        link = self._links.pop(identity)
        link.retire()
        self.sessions.forget(link)
        opener = self._openers.pop(link, None)
        if opener is not None and opener.last:
            self._spent[identity] = opener.last
            if len(self._spent) > 4 * MAX_IDENTITIES:
                del self._spent[next(iter(self._spent))]
        self._unproven.pop(link, None)

    def _open_link(self, identity: bytes) -> Link:
        """The link of a routing id heard from for the first time (or again, after its
        state went: see _make_room)."""
        self._make_room()
        link = Link(None, f"zmq id {identity[:24]!r}", self._dropped)
        self._links[identity] = link  # before a drop below: its DROP notice needs the id
        try:
            hello = decode_hello(identity)
        except DecodeError as exc:
            link.drop(f"routing id is not an abcast hello: {exc}")
            return link
        link.remote = f"zmq connection {hello.conn_seq} of {hello.node}"
        link_key = self.session_key(identity)
        if link_key is not None:  # admitted once its first batch authenticates (_open)
            link.peer = hello.node  # claimed, for the log lines
            opener = self._openers[link] = Opener(link_key, "aead")
            opener.last = self._spent.pop(identity, 0)  # its state went: no replays
            self._unproven[link] = hello
            return link
        accepted, _superseded = self.admit(hello, link)
        if not accepted:
            link.retire()
        return link

    def _open(self, link: Link, opener: Opener, batch: bytes) -> bytes | None:
        """The batch decrypted, or None (rejected: logged; a stranger's link dropped)."""
        try:
            opened = opener.open(batch)
        except RemoteProtocolError as exc:
            if link in self._unproven:
                link.drop(f"not a holder of the group secret: {exc}")
            else:
                self.reject_frame(link, str(exc))
            return None
        hello = self._unproven.pop(link, None)
        if hello is not None:
            accepted, _superseded = self.admit(hello, link)
            if not accepted:
                link.retire()
                return None
        return opened

    def _dropped(self, link: Link, reason: str) -> None:
        self.report_drop(link, reason)
        identity = next((k for k, v in self._links.items() if v is link), None)
        if identity is None or self._router is None:
            return
        task = self.loop.create_task(self._notify_drop(identity, reason))
        self._notices.add(task)
        task.add_done_callback(self._notices.discard)

    async def _notify_drop(self, identity: bytes, reason: str) -> None:
        assert self._router is not None
        with contextlib.suppress(zmq.ZMQError):
            await self._router.send_multipart(
                [identity, DROP, reason.encode("utf-8", "replace")[:1000]], flags=zmq.NOBLOCK
            )

    # ------------------------------------------------------------------ outbound

    def _peer_added(self, peer: PeerState) -> None:
        channel = _ZmqChannel(self, peer)
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
        # the channels' tasks too: a pump settles its in-flight batch (sent or discarded)
        # before close returns
        stopped = [task for channel in self._channels.values() for task in channel.close()]
        self._channels.clear()
        tasks = [t for t in (self._recv_task, *self._notices, *stopped) if t is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for link in self._links.values():
            link.retire()
        self._links.clear()
        if self._router is not None:
            self._router.close(linger=0)
        if self._ctx is not None:
            self._ctx.term()


def _went(sending: Awaitable[object]) -> bool:
    """Whether a zmq send future completed without error (the message is libzmq's)."""
    return (isinstance(sending, asyncio.Future) and sending.done() and not sending.cancelled()
            and sending.exception() is None)


class _ZmqChannel:
    """One DEALER (replaced on reconnect) and its pump and control tasks."""

    __slots__ = ("_closed", "_monitor", "_owner", "_peer", "_retry", "_sealer", "_sock", "_tasks",
                 "_wake")

    def __init__(self, owner: ZmqTransport, peer: PeerState) -> None:
        self._owner = owner
        self._peer = peer
        self._sock: zmq.asyncio.Socket | None = None
        self._monitor: zmq.asyncio.Socket | None = None
        self._tasks: list[asyncio.Task[None]] = []
        self._wake: asyncio.Future[None] | None = None
        self._retry: asyncio.TimerHandle | None = None
        self._closed = False
        self._sealer: Sealer | None = None  # this connection's, with a secret

    def connect_now(self) -> None:
        if self._closed:
            return
        self._hang_up()
        owner, peer = self._owner, self._peer
        sock = owner.context.socket(zmq.DEALER)
        hello = owner.next_hello(peer)
        routing_id = encode_hello(hello)
        key = owner.session_key(routing_id)
        self._sealer = Sealer(key, "aead") if key is not None else None
        sock.setsockopt(zmq.ROUTING_ID, routing_id)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.SNDHWM, _SNDHWM)
        sock.setsockopt(zmq.RECONNECT_IVL, max(1, int(owner.options.reconnect_initial_s * 1000)))
        sock.setsockopt(zmq.RECONNECT_IVL_MAX, max(1, int(owner.options.reconnect_max_s * 1000)))
        sock.setsockopt(zmq.CONNECT_TIMEOUT, max(1, int(owner.options.io_timeout_s * 1000)))
        monitor = sock.get_monitor_socket(zmq.EVENT_CONNECTED | zmq.EVENT_DISCONNECTED)
        sock.connect(_endpoint(peer.address))
        self._sock, self._monitor = sock, monitor
        loop = owner.loop
        self._tasks = [
            loop.create_task(self._pump(sock)),
            loop.create_task(self._control(sock, monitor)),
        ]

    def wake(self) -> None:
        if self._wake is not None and not self._wake.done():
            self._wake.set_result(None)

    async def _pump(self, sock: zmq.asyncio.Socket) -> None:
        owner, peer = self._owner, self._peer
        limit = owner.options.batch_bytes
        while True:
            if not peer.queue:
                self._wake = owner.loop.create_future()
                await self._wake
                continue
            frames, size = peer.take(limit)
            peer.inflight_bytes = size
            data = encode_frames(frames)
            if self._sealer is not None:
                data = self._sealer.seal(data)
            sending = sock.send(data, copy=size < _COPY_THRESHOLD)
            try:
                await sending
            except asyncio.CancelledError:
                # A cancelled zmq send never happened (a message goes whole or not); but
                # the cancellation may come in the loop turn the send completed in: then
                # the batch went, and queueing it again would send it twice.
                if _went(sending):
                    owner.sent(len(frames), size)
                elif self._closed:
                    owner.stats.discarded_frames += len(frames)
                else:
                    peer.queue.extendleft(reversed(frames))
                    peer.queued_bytes += size
                raise
            finally:
                peer.inflight_bytes = 0
            owner.sent(len(frames), size)

    async def _control(self, sock: zmq.asyncio.Socket, monitor: zmq.asyncio.Socket) -> None:
        owner, peer = self._owner, self._peer
        poller = zmq.asyncio.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(monitor, zmq.POLLIN)
        while True:
            ready = dict(await poller.poll())
            if monitor in ready:
                event = await recv_monitor_message(monitor)
                if event["event"] == zmq.EVENT_CONNECTED:
                    owner.connected(peer)
                elif event["event"] == zmq.EVENT_DISCONNECTED:
                    owner.lost(peer, "disconnected", backoff=False)
            if sock in ready:
                parts = await sock.recv_multipart()
                if parts and parts[0] == DROP:
                    reason = b" ".join(parts[1:]).decode("utf-8", "replace")
                    delay = owner.lost(peer, f"dropped by the peer: {reason}")
                    self._hang_up()
                    self._retry = owner.loop.call_later(delay, self.connect_now)
                    return
                logger.warning(
                    "%s: unexpected %d-part message from %s ignored", owner.label, len(parts),
                    peer.node,
                )

    def close(self) -> list[asyncio.Task[None]]:
        """Stop for good; returns the cancelled tasks (to await for them to settle)."""
        self._closed = True
        return self._hang_up()

    def _hang_up(self) -> list[asyncio.Task[None]]:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        current = asyncio.current_task()
        stopped = [task for task in self._tasks if task is not current]
        for task in stopped:
            task.cancel()
        self._tasks = []
        if self._sock is not None:
            with contextlib.suppress(zmq.ZMQError):
                self._sock.disable_monitor()
            self._sock.close(linger=0)
            self._sock = None
        if self._monitor is not None:
            self._monitor.close(linger=0)
            self._monitor = None
        self._peer.inflight_bytes = 0
        self._owner.progressed()
        return stopped
