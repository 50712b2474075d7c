"""tcp://'s inbound side: one `_Inbound` protocol per accepted connection, a hello and
then frames for the handler, and the `_Watchdog` that looks at it (abcast.transport.tcp
makes both; their log lines go to the transport's own logger, "abcast.transport.tcp").

Rules: every frame of one read is cut out of it in one pass and handed over in order
(`deliver_all`). A connection is refused, with one log line and dropped, for a bad
hello or none within io_timeout_s, a hello with another max_frame_bytes (after the
handshake, with a secret; see _hello), a length prefix above max_frame_bytes, or,
until the connection is admitted, above the largest hello or handshake message
(BEFORE_ADMISSION_BYTES: a stranger who knows only the address makes the node hold no
more than that for a connection), and a frame truncated at EOF. With a secret the
handshake runs before admission (the listener writes its Response, the one time it
writes on a connection) and every record after it is opened (MAC or AEAD, a counter):
a record that fails is one log line and dropped with its frames, the link goes on.
Once admitted a watchdog looks at each connection every io_timeout_s: one still inside
the same unfinished frame at two looks in a row (a slowloris, a frame cut short) is
dropped, and one that sent nothing for idle_timeout_s is closed.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final, Protocol, cast

from abcast.errors import DecodeError, RemoteProtocolError
from abcast.ids import NodeId
from abcast.security import OVERHEAD, Opener, Responder
from abcast.security.handshake import MAGIC, Challenge, Confirm, Refusal, Response
from abcast.transport._common import FramePump
from abcast.transport._framing import PREFIX, FrameReader, encode_frames, split_frames
from abcast.transport._hello import (
    HELLO_MAX_BYTES,
    Hello,
    Sessions,
    decode_hello,
    max_msgpack_bytes,
)
from abcast.transport.base import Link, TransportOptions, TransportStats

#: the widest link handshake message (every field of each is bounded)
AUTH_MAX_BYTES: Final = len(MAGIC) + max(
    max_msgpack_bytes(message) for message in (Challenge, Response, Confirm, Refusal))
#: the longest frame an inbound connection may send before it is admitted: a hello, and
#: with a secret the handshake's Challenge and Confirm (HELLO_MAX_BYTES: the hello's is
#: the wider bound)
BEFORE_ADMISSION_BYTES: Final = max(HELLO_MAX_BYTES, AUTH_MAX_BYTES)
_BEFORE_ADMISSION = "the hello bound (before the connection is admitted)"


class Listener(Protocol):
    """What an inbound connection uses of the transport that accepted it
    (abcast.transport.tcp.TcpTransport, which imports this module): QueuedTransport's
    helpers, the link handshake, and the table of its inbound connections."""

    options: TransportOptions
    stats: TransportStats
    frame_pump: tuple[FramePump, Any] | None
    sessions: Sessions
    log: logging.Logger
    _inbound: dict[Link, _Inbound]

    @property
    def is_open(self) -> bool: ...
    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...
    @property
    def label(self) -> str: ...

    def handshake(self, role: type[Responder], peer: NodeId, hello: Hello) -> Responder | None:
        ...

    def admit(self, hello: Hello, link: Link) -> tuple[bool, Link | None]: ...
    def close_inbound(self, link: Link) -> None: ...
    def deliver_all(self, link: Link, frames: list[bytes]) -> bool: ...
    def reject_frame(self, link: Link, reason: str) -> None: ...
    def report_drop(self, link: Link, reason: str) -> None: ...


def _describe(transport: asyncio.BaseTransport) -> str:
    peername = transport.get_extra_info("peername")
    if isinstance(peername, tuple) and len(peername) >= 2:
        return f"{peername[0]}:{peername[1]}"
    return str(peername)


class _Inbound(asyncio.Protocol):
    """One inbound TCP connection: a hello, then frames for the handler."""

    def __init__(self, owner: Listener) -> None:
        self._owner = owner
        self._transport: asyncio.Transport | None = None
        limit = owner.options.max_frame_bytes
        if owner.options.secret is not None:  # a sealed record: a batch of frames
            limit += owner.options.batch_bytes + PREFIX.size + OVERHEAD
        self._frame_limit = limit  # the reader's, once the connection is admitted
        # A stranger who knows only our address can open connections: until one is
        # admitted it is read a hello's size at a time, not max_frame_bytes.
        self._reader = FrameReader(BEFORE_ADMISSION_BYTES, _BEFORE_ADMISSION)
        self._hello: Hello | None = None
        self._hello_timer: asyncio.TimerHandle | None = None
        self._auth: Responder | None = None
        self._opener: Opener | None = None
        self.link = Link(None, "?", self._dropped)
        self.watchdog: _Watchdog | None = None
        self.active = False  # bytes came since the watchdog's last look
        self.framed = False  # a whole frame came since the watchdog's last look
        #: the transport's `frame_pump`, once admitted without a handshake (nothing to
        #: open): each read is offered to it first
        self._pump: tuple[FramePump, Any] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self._transport = cast(asyncio.Transport, transport)
        self.link.remote = _describe(transport)
        if not self._owner.is_open:
            self.link.retire()
            self._transport.abort()
            return
        self._owner._inbound[self.link] = self
        timeout = self._owner.options.io_timeout_s
        self._hello_timer = self._owner.loop.call_later(timeout, self._no_hello, timeout)

    def _no_hello(self, timeout: float) -> None:
        self._hello_timer = None  # cancelled on admission: still here, never admitted
        self.link.drop(f"no hello within {timeout:g}s" if self._hello is None
                       else f"link handshake not completed within {timeout:g}s")

    def data_received(self, data: bytes) -> None:
        pump = self._pump  # an admitted plain connection, the native lane on: it first
        if pump is not None and pump[0](self, data, pump[1]):
            return
        link = self.link
        if not link.alive:
            return
        frames, error = self._reader.feed(data)
        self.active = True
        if frames:
            self.framed = True
        owner = self._owner
        if self._hello is None and frames:
            try:
                hello = decode_hello(frames[0])
            except DecodeError as exc:
                link.drop(str(exc))
                return
            self._hello = hello
            del frames[0]
            self._auth = owner.handshake(Responder, hello.node, hello)
            if self._auth is None:
                if not self._admit(hello):
                    return
                frames, error = self._read_more(frames)
            link.peer = hello.node  # claimed, for the log lines of a failed handshake
        auth = self._auth
        while auth is not None and frames and auth.phase != "established":
            try:
                reply = auth.receive(frames.pop(0))
            except RemoteProtocolError as exc:
                link.drop(str(exc))
                return
            if reply is not None and self._transport is not None:
                self._transport.write(encode_frames([reply]))
            elif reply is None:
                self._opener = auth.opener()
                assert self._hello is not None
                if not self._admit(self._hello):
                    return
                frames, error = self._read_more(frames)
        opener = self._opener
        if opener is not None and frames:
            opened: list[bytes] = []
            for sealed in frames:
                try:
                    record = opener.open(sealed)
                except RemoteProtocolError as exc:
                    owner.reject_frame(link, str(exc))
                    continue
                try:  # genuine, so the peer itself framed it wrong: a broken peer
                    opened += split_frames(record, owner.options.max_frame_bytes)
                except DecodeError as exc:
                    link.drop(f"a sealed record holds bad framing: {exc}")
                    return
            frames = opened
        if frames and not owner.deliver_all(link, frames):
            return
        if error is not None:
            link.drop(error)

    def _admit(self, hello: Hello) -> bool:
        """The hello (and handshake, with a secret) is done: apply the supersede rule."""
        owner, link = self._owner, self.link
        self._cancel_hello_timer()
        self.watchdog = _Watchdog(self)
        accepted, superseded = owner.admit(hello, link)
        if superseded is not None:
            owner.close_inbound(superseded)
        if not accepted:
            link.retire()
            owner.close_inbound(link)
        elif self._auth is None:  # plain frames from now on: the native lane's pump may
            self._pump = owner.frame_pump  # take whole reads (QueuedTransport.frame_pump)
        return accepted

    def _read_more(self, frames: list[bytes]) -> tuple[list[bytes], str | None]:
        """Admitted: the reader takes whole frames from now on, also from what it
        holds (bytes after the hello in the same read, a prefix it refused)."""
        more, error = self._reader.raise_limit(self._frame_limit)
        return frames + more, error

    def eof_received(self) -> bool | None:
        pending = self._reader.pending
        if pending and self.link.alive:
            self.link.drop(
                f"connection closed inside a frame ({pending} of "
                f"{self._reader.expected()} bytes received)"
            )
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        # A hang-up during the handshake is quiet: a dialler replacing its connection
        # does that; one that could not check our proof says so first (a Refusal).
        self._cancel_hello_timer()
        if self.watchdog is not None:
            self.watchdog.stop()
        self._owner._inbound.pop(self.link, None)
        self._owner.sessions.forget(self.link)
        self.link.retire()
        self._transport = None

    def _cancel_hello_timer(self) -> None:
        if self._hello_timer is not None:
            self._hello_timer.cancel()
            self._hello_timer = None

    def _dropped(self, link: Link, reason: str) -> None:
        self._owner.report_drop(link, reason)
        self._owner.close_inbound(link)
        self.abort()

    def abort(self) -> None:
        if self._transport is not None:
            self._transport.abort()


class _Watchdog:
    """Looks at one inbound connection every io_timeout_s after its hello: drops it when
    it was inside an unfinished frame at two looks in a row with no frame completed in
    between, closes it after idle_timeout_s without a byte."""

    __slots__ = ("_idle_for", "_inbound", "_partial", "_timer")

    def __init__(self, inbound: _Inbound) -> None:
        self._inbound = inbound
        self._partial = False  # inside an unfinished frame at the last look
        self._idle_for = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._arm()

    def _arm(self) -> None:
        owner = self._inbound._owner
        self._timer = owner.loop.call_later(owner.options.io_timeout_s, self._look)

    def _look(self) -> None:
        inbound = self._inbound
        link, options = inbound.link, inbound._owner.options
        if not link.alive:
            return
        pending = inbound._reader.pending
        if pending and self._partial and not inbound.framed:
            link.drop(f"a frame unfinished for over {options.io_timeout_s:g}s "
                      f"({pending} of {inbound._reader.expected()} bytes)")
            return
        self._partial = bool(pending)
        self._idle_for = 0.0 if inbound.active else self._idle_for + options.io_timeout_s
        if self._idle_for >= options.idle_timeout_s:  # not an error: closed quietly
            owner = inbound._owner
            owner.log.info("%s: closed the connection from %s (%s), idle for %gs",
                           owner.label, link.peer, link.remote, self._idle_for)
            owner.stats.idle_closed += 1
            link.retire()
            owner.close_inbound(link)
            return
        inbound.active = inbound.framed = False
        self._arm()

    def stop(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
