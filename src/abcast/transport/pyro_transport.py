"""pyro:// — Pyro5 remote objects: each node exposes an inbox with one method,
`append(frame)` (the thesis's appendBuffer), called once per frame by a per-peer sender.

Rules: Pyro5 is threaded and blocking, asyncio is not, so this module is a bridge.
Inbound: a Pyro daemon runs its request loop in a thread and one worker thread per
client connection; the hello travels in Pyro's connection handshake (`_pyroHandshake`),
so `append` is the only remote method, and a hello with another frame bound fails the
handshake itself (the dialler's connect fails and backs off, its batch kept). A
connection gets io_timeout_s to complete that handshake (a silent one would hold a Pyro
worker, and once none is free the daemon's accept loop, for ever), and one that then
sends nothing for idle_timeout_s is closed (INFO, idle_closed), as tcp:// closes one; a
sender idle for half that opens a fresh connection for its next batch (a call on one the
receiver closed would lose the batch). Workers
never touch transport state: they hand (callback, args) pairs to a thread-safe queue
that the loop drains, one `call_soon_threadsafe` per burst, preserving the order of
each connection's calls; the frames of a burst that follow one another on one
connection are handed over in one pass (`deliver_all`). A worker whose `append` leaves
more than high_water_bytes of frames waiting for the loop waits before it returns (until
close), so its sender's call does too: a sender faster than the receiver's loop is held
back, as TCP holds back a tcp:// sender, instead of growing the receiver's memory.
Outbound: one sender thread per peer owns its Pyro proxy (Pyro5 proxies belong to one
thread) and performs calls one batch at a time, in order: the loop hands it up to
batch_bytes of queued frames, the thread makes one `append` call per frame (grouped in
one Pyro batch request, one round trip) and reports back; that batch is the in-flight part
of `buffered()` and counts in frames_out once called. A connect failure returns the
batch to the queue and the loop retries after a backoff; a call that fails mid-way
loses its batch (it may be half delivered: resending could duplicate). The serializer is
marshal, which carries bytes natively. Dropping a link shuts its socket down, so the
worker exits and the sender's next call fails and reconnects.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections import deque
from collections.abc import Callable
from typing import Any, ClassVar, Final

import msgspec
import Pyro5.client
import Pyro5.core
import Pyro5.errors
import Pyro5.protocol
import Pyro5.server
from Pyro5.callcontext import current_context

from abcast.errors import ConfigError
from abcast.ids import NodeId
from abcast.transport._common import PeerState, QueuedTransport
from abcast.transport._hello import Hello, hello_refusal
from abcast.transport.base import Link, TransportOptions, TransportUrl

logger = logging.getLogger(__name__)

OBJECT_ID: Final = "abcast.inbox"
SERIALIZER: Final = "marshal"


class _Inbox:
    """The remote object: one per daemon; the calling connection identifies the link."""

    def __init__(self, transport: PyroTransport) -> None:
        self._transport = transport

    @Pyro5.server.expose  # type: ignore[untyped-decorator]
    def append(self, frame: bytes) -> None:
        self._transport.on_append(current_context.client, frame)


class _Daemon(Pyro5.server.Daemon):  # type: ignore[misc]
    """A Pyro daemon that reads our hello from the handshake and tracks connections."""

    def __init__(self, transport: PyroTransport, host: str, port: int) -> None:
        self._transport = transport
        super().__init__(host=host, port=port)
        self._socket_server = self.transportServer  # close() forgets it

    def release(self) -> None:
        """Close what Pyro's shutdown leaves open once the request loop has ended: the
        thread-pool server's selector (an epoll fd the garbage collector would close
        some time later)."""
        selector = getattr(self._socket_server, "_selector", None)
        if selector is not None:
            with contextlib.suppress(Exception):
                selector.close()

    def _handshake(self, conn: Any, denied_reason: str | None = None) -> bool:
        """Pyro's handshake, given io_timeout_s: it runs on a worker thread (or, once all
        are busy, on the accept loop, to deny the connection), and Pyro would wait for a
        silent connection's first message for ever. After it, a connection may be silent
        for idle_timeout_s (see handleRequest)."""
        options = self._transport.options
        conn.settimeout(options.io_timeout_s)
        admitted = bool(super()._handshake(conn, denied_reason))
        with contextlib.suppress(OSError):
            conn.settimeout(options.idle_timeout_s)
        return admitted

    def handleRequest(self, conn: Any) -> None:  # noqa: N802 (Pyro's name)
        """Pyro's, except that a connection silent for idle_timeout_s is closed quietly
        (INFO, idle_closed; Pyro would log a warning) rather than holding its worker."""
        try:
            super().handleRequest(conn)
        except Pyro5.errors.TimeoutError:
            self._transport.post(self._transport.idle, conn)
            raise Pyro5.errors.ConnectionClosedError("idle") from None

    def validateHandshake(self, conn: Any, data: Any) -> Any:  # noqa: N802 (Pyro's name)
        return self._transport.on_handshake(conn, data)

    def clientDisconnect(self, conn: Any) -> None:  # noqa: N802 (Pyro's name)
        self._transport.on_disconnect(conn)


def _remote(conn: Any) -> str:
    with contextlib.suppress(OSError, AttributeError):
        host, port = conn.sock.getpeername()[:2]
        return f"{host}:{port}"
    return "?"


async def _wait_thread(thread: threading.Thread, timeout: float) -> None:
    """Wait for a thread without blocking the loop (and without an executor)."""
    deadline = time.monotonic() + timeout
    while thread.is_alive() and time.monotonic() < deadline:
        await asyncio.sleep(0.005)


class PyroTransport(QueuedTransport):
    scheme: ClassVar[str] = "pyro"

    def __init__(self, url: str | TransportUrl, options: TransportOptions | None = None) -> None:
        super().__init__(url, options)
        self._daemon: _Daemon | None = None
        self._daemon_thread: threading.Thread | None = None
        # guards _posted, _posted_bytes, _drain_scheduled and _conn_links
        self._lock = threading.Lock()
        self._posted: deque[tuple[Callable[..., None], tuple[Any, ...]]] = deque()
        #: bytes of the frames posted by workers and not yet handed over by the loop
        self._posted_bytes = 0
        #: workers wait on it while _posted_bytes is above high_water_bytes
        self._room = threading.Condition(self._lock)
        self._drain_scheduled = False
        self._conn_links: dict[Any, Link] = {}
        self._senders: dict[NodeId, _PyroSender] = {}
        # One bound method, kept: `_run_posted` recognises deliveries by identity.
        self._deliver_posted: Callable[[Link, bytes], None] = self._deliver

    async def _bind(self) -> str:
        url = self._url
        try:
            daemon = _Daemon(self, url.host, url.port)
        except OSError as exc:
            raise ConfigError(f"pyro: cannot listen on {url}: {exc}") from exc
        daemon.register(_Inbox(self), OBJECT_ID)
        self._daemon = daemon
        port = int(daemon.locationStr.rsplit(":", 1)[1])
        self._daemon_thread = threading.Thread(
            target=daemon.requestLoop, name=f"abcast-pyro-{url.host}:{port}", daemon=True
        )
        self._daemon_thread.start()
        return str(TransportUrl("pyro", host=url.host, port=port))

    # ------------------------------------------------------- thread → loop bridge

    def post(self, callback: Callable[..., None], *args: Any, size: int = 0) -> None:
        """From any thread: run callback(*args) on the loop, in posting order (`size`:
        the bytes of a frame, counted in _posted_bytes until it is handed over)."""
        with self._lock:
            self._posted.append((callback, args))
            self._posted_bytes += size
            if self._drain_scheduled:
                return
            self._drain_scheduled = True
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody to tell
            self.loop.call_soon_threadsafe(self._run_posted)

    def _wait_for_room(self) -> None:
        """From a worker: wait while the loop has more than high_water_bytes of posted
        frames to hand over (backpressure: this connection's sender waits for its call),
        or until the transport closes."""
        high = self.options.high_water_bytes
        with self._room:
            while self._posted_bytes > high and self.is_open:
                self._room.wait()

    def _run_posted(self) -> None:
        with self._lock:
            items = list(self._posted)
            self._posted.clear()
            self._drain_scheduled = False
            taken = self._posted_bytes
        try:
            self._hand_over(items)
        finally:
            with self._room:
                self._posted_bytes -= taken
                self._room.notify_all()

    def _hand_over(self, items: list[tuple[Callable[..., None], tuple[Any, ...]]]) -> None:
        deliver_posted = self._deliver_posted
        run_link: Link | None = None
        run: list[bytes] = []
        for callback, args in items:
            if callback is deliver_posted:
                link, frame = args
                if link is not run_link:
                    self._deliver_run(run_link, run)
                    run_link, run = link, []
                run.append(frame)
                continue
            self._deliver_run(run_link, run)
            run_link, run = None, []
            callback(*args)
        self._deliver_run(run_link, run)

    def _deliver_run(self, link: Link | None, frames: list[bytes]) -> None:
        if link is not None and frames:
            self.deliver_all(link, frames)

    # ------------------------------------------------------- inbound (worker threads)

    def on_handshake(self, conn: Any, data: Any) -> str:
        link = Link(None, _remote(conn), lambda link, reason: self._dropped(link, reason, conn))
        try:
            hello = msgspec.convert(data, Hello)
        except msgspec.ValidationError as exc:
            self.post(link.drop, f"bad hello in the Pyro handshake: {exc}")
            raise Pyro5.errors.SecurityError("not an abcast hello") from None
        refusal = hello_refusal(self.node, self.options.max_frame_bytes, hello)
        if refusal is None:
            # Pyro reports the disconnection (on_disconnect) only of a connection whose
            # handshake succeeded: a refused one must not enter the table
            with self._lock:
                self._conn_links[conn] = link
        self.post(self._admit, hello, link, conn)  # a refusal is logged and counted there
        if refusal is not None:  # fail the dialler's bind: it backs off, keeping its batch
            raise Pyro5.errors.SecurityError(refusal)
        return "ok"

    def on_append(self, conn: Any, frame: Any) -> None:
        with self._lock:
            link = self._conn_links.get(conn)
        if link is None or not link.alive or not self.is_open:
            raise Pyro5.errors.ConnectionClosedError("this connection was closed by the receiver")
        if type(frame) is not bytes:
            self.post(link.drop, f"append() got {type(frame).__name__}, not bytes")
            raise Pyro5.errors.ProtocolError("append(frame) takes bytes")
        if len(frame) > self.options.max_frame_bytes:
            limit = self.options.max_frame_bytes
            self.post(link.drop, f"frame of {len(frame)} bytes exceeds max_frame_bytes {limit}")
            raise Pyro5.errors.ProtocolError("frame too large")
        self.post(self._deliver_posted, link, frame, size=len(frame))
        self._wait_for_room()

    def on_disconnect(self, conn: Any) -> None:
        with self._lock:
            link = self._conn_links.pop(conn, None)
        if link is not None:
            self.post(self._forget, link)

    # ------------------------------------------------------- inbound (loop)

    def _admit(self, hello: Hello, link: Link, conn: Any) -> None:
        if not link.alive:
            return
        accepted, superseded = self.admit(hello, link)
        if superseded is not None:
            self._shut_conn_of(superseded)
        if not accepted:
            link.retire()
            conn.close()

    def _deliver(self, link: Link, frame: bytes) -> None:
        self.deliver(link, frame)

    def idle(self, conn: Any) -> None:
        """A connection was closed after idle_timeout_s without a request."""
        with self._lock:
            link = self._conn_links.get(conn)
        self.stats.idle_closed += 1
        logger.info("%s: closed the connection from %s (%s), idle for %gs", self.label,
                    link.peer if link is not None else "?", _remote(conn),
                    self.options.idle_timeout_s)

    def _forget(self, link: Link) -> None:
        self.sessions.forget(link)
        link.retire()

    def _dropped(self, link: Link, reason: str, conn: Any) -> None:
        self.report_drop(link, reason)
        conn.close()  # shutdown(): the worker blocked in recv wakes up and exits

    def _shut_conn_of(self, link: Link) -> None:
        with self._lock:
            conns = [c for c, ln in self._conn_links.items() if ln is link]
        for conn in conns:
            conn.close()

    # ------------------------------------------------------- outbound

    def _peer_added(self, peer: PeerState) -> None:
        sender = _PyroSender(self, peer)
        self._senders[peer.node] = sender
        sender.start()

    def _peer_readdressed(self, peer: PeerState) -> None:
        self._senders[peer.node].readdress()

    def _peer_removed(self, peer: PeerState) -> None:
        sender = self._senders.pop(peer.node, None)
        if sender is not None:
            sender.stop()

    def _frames_queued(self, peer: PeerState) -> None:
        self._senders[peer.node].schedule_handoff()

    async def _shutdown(self) -> None:
        with self._room:  # workers waiting for room: the transport is closing
            self._room.notify_all()
        senders = list(self._senders.values())
        self._senders.clear()
        for sender in senders:
            sender.stop()
        if self._daemon is not None:
            stopper = threading.Thread(target=self._daemon.shutdown, daemon=True)
            stopper.start()
            await _wait_thread(stopper, 10.0)
        with self._lock:
            conns = list(self._conn_links)
            links = list(self._conn_links.values())
            self._conn_links.clear()
        for link in links:
            link.retire()
        for conn in conns:
            conn.close()
        for thread in [s.thread for s in senders] + [self._daemon_thread]:
            if thread is not None:
                await _wait_thread(thread, self.options.io_timeout_s)
        if self._daemon is not None and not (self._daemon_thread is not None
                                             and self._daemon_thread.is_alive()):
            self._daemon.release()


class _PyroSender:
    """One peer's sender thread and the loop-side half that feeds it batches.

    The loop side owns the queue, the backoff and the counters; the thread only
    connects and calls. A batch the thread could not even connect for comes back to
    the front of the queue, and the loop hands it over again after a backoff delay.
    """

    def __init__(self, owner: PyroTransport, peer: PeerState) -> None:
        self._owner = owner
        self._peer = peer
        self._cond = threading.Condition()
        # Under _cond (shared with the thread):
        self._batch: list[bytes] | None = None
        self._address = peer.address
        self._generation = 0
        self._stopping = False
        # Loop side only:
        self._busy = False
        self._handoff_scheduled = False
        self._retry: asyncio.TimerHandle | None = None
        self.thread = threading.Thread(
            target=self._run, name=f"abcast-pyro-send-{owner.node}->{peer.node}", daemon=True
        )

    def start(self) -> None:
        self.thread.start()

    # -- loop side

    def schedule_handoff(self) -> None:
        if not self._handoff_scheduled and not self._busy and self._retry is None:
            self._handoff_scheduled = True
            self._owner.loop.call_soon(self._handoff)

    def _handoff(self) -> None:
        self._handoff_scheduled = False
        self._retry = None
        peer = self._peer
        if self._busy or not peer.queue or self._stopping:
            return
        frames, size = peer.take(self._owner.options.batch_bytes)
        peer.inflight_bytes = size
        self._busy = True
        with self._cond:
            self._batch = frames
            self._cond.notify()

    def _batch_done(self, frames: int, size: int, error: str | None) -> None:
        """The thread made the calls (error: they failed part-way; the rest is lost)."""
        self._busy = False
        self._peer.inflight_bytes = 0
        owner = self._owner
        owner.sent(frames, size)  # handed to the wire, like bytes written to a socket
        if owner.is_open and not self._stopping:
            if error is not None:
                owner.lost(self._peer, error, backoff=False)
            self.schedule_handoff()

    def _batch_unsent(self, frames: list[bytes], why: str) -> None:
        """The thread could not connect: requeue the batch and retry after a backoff."""
        self._busy = False
        peer, owner = self._peer, self._owner
        peer.inflight_bytes = 0
        if not owner.is_open or self._stopping:
            owner.stats.discarded_frames += len(frames)
            return
        peer.queue.extendleft(reversed(frames))
        peer.queued_bytes += sum(len(f) for f in frames)
        delay = peer.backoff.next()
        logger.debug(
            "%s: cannot reach %s at %s (%s); retrying in %.2fs",
            owner.label, peer.node, peer.address, why, delay,
        )
        self._retry = owner.loop.call_later(delay, self._handoff)
        owner.progressed()

    def _connected(self) -> None:
        if self._owner.is_open and not self._stopping:
            self._owner.connected(self._peer)

    def readdress(self) -> None:
        with self._cond:
            self._address = self._peer.address
            self._generation += 1
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        self.schedule_handoff()

    def stop(self) -> None:
        if self._retry is not None:
            self._retry.cancel()
            self._retry = None
        with self._cond:
            self._stopping = True
            self._cond.notify()

    # -- thread side

    def _run(self) -> None:
        timeout = self._owner.options.io_timeout_s
        # a connection idle this long may be closed by the receiver (its idle_timeout_s):
        # reconnect rather than lose the batch in a call on it
        stale_after = self._owner.options.idle_timeout_s / 2
        proxy: Pyro5.client.Proxy | None = None
        proxy_generation = -1
        used = 0.0  # when the proxy last made a call (time.monotonic)
        try:
            while True:
                with self._cond:
                    while self._batch is None and not self._stopping:
                        self._cond.wait()
                    batch, address, generation = self._batch, self._address, self._generation
                    stopping = self._stopping
                if stopping:
                    if batch is not None:  # handed over but never called: count it discarded
                        self._finish(self._batch_unsent, batch, "stopped")
                    return
                assert batch is not None
                if (proxy is None or proxy_generation != generation
                        or time.monotonic() - used >= stale_after):
                    _release(proxy)
                    proxy = None
                    try:
                        proxy = self._connect(address, timeout)
                    except Exception as exc:  # Pyro raises several kinds; all mean "not now"
                        self._finish(self._batch_unsent, batch, f"{type(exc).__name__}: {exc}")
                        continue
                    proxy_generation = generation
                    self._owner.post(self._connected)
                error: str | None = None
                try:
                    _call_append(proxy, batch)
                    used = time.monotonic()
                except Exception as exc:
                    _release(proxy)
                    proxy = None
                    error = f"{type(exc).__name__}: {exc}"
                self._finish(self._batch_done, len(batch), sum(len(f) for f in batch), error)
        finally:
            _release(proxy)

    def _connect(self, address: TransportUrl, timeout: float) -> Pyro5.client.Proxy:
        owner = self._owner
        with self._cond:
            hello = owner.next_hello(self._peer)
        proxy = Pyro5.client.Proxy(f"PYRO:{OBJECT_ID}@{address.host}:{address.port}")
        proxy._pyroSerializer = SERIALIZER
        proxy._pyroTimeout = timeout
        proxy._pyroHandshake = [hello.node, hello.incarnation, hello.conn_seq,
                                hello.max_frame_bytes]
        try:
            proxy._pyroBind()
        except BaseException:
            _release(proxy)
            raise
        return proxy

    def _finish(self, report: Callable[..., None], *args: Any) -> None:
        with self._cond:
            self._batch = None
        self._owner.post(report, *args)


def _call_append(proxy: Pyro5.client.Proxy, frames: list[bytes]) -> None:
    """append(frame) for each frame, in order, in one Pyro batch request (one round trip)."""
    if len(frames) == 1:
        proxy.append(frames[0])
        return
    # Pyro5.client.BatchProxy sends kwargs=None, which Pyro5 5.17's marshal serializer
    # cannot encode; this is the same batch request with kwargs={}.
    calls: list[tuple[str, tuple[bytes], dict[str, Any]]] = [
        ("append", (frame,), {}) for frame in frames
    ]
    results = proxy._pyroInvoke("<batch>", calls, {}, Pyro5.protocol.FLAGS_BATCH)
    for result in results:
        if isinstance(result, Pyro5.core._ExceptionWrapper):
            result.raiseIt()


def _release(proxy: Pyro5.client.Proxy | None) -> None:
    if proxy is not None:
        with contextlib.suppress(Exception):
            proxy._pyroRelease()
