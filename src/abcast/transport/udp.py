"""udp:// — datagrams, and IP multicast: a frame for every other member is one write.

URLs: `udp://239.1.2.3:7500` (a multicast group and its port: the node joins the group
and binds its unicast socket on the interface, 127.0.0.1 unless `iface=` names another)
or `udp://127.0.0.1:0` (unicast only, or with `group=239.1.2.3:7500`). Query options
beside the shared TransportOptions: `group`, `iface`, `ttl` (0/1 keep multicast on the
host/link; default 1), `loss` (each received datagram is dropped with this probability:
loss injection for experiments), `datagram_bytes` (default 65,000; 1,400 is MTU-safe),
`reassembly_timeout_s` (2), `max_reassemblies` (64), `max_sources` (1024) and
`source_idle_s` (60) (udp_options parses them). `start()` returns the unicast URL,
which is the address peers pass to `add_peer`; every member must name the same group.

Rules:
- `send` and `multicast(nodes, frame)` (one frame for the group when the transport has
  one and every node is a known peer; else one send each) cut the frame into datagrams
  (udp_wire) at once, onto one write queue, so frames leave in the order they were sent
  whatever their path. At the end of the loop turn the queue is written with `sendto`,
  at most PACE_DATAGRAMS / PACE_BYTES per turn (so that a receiver on the same loop, or
  behind a socket buffer, is not flooded); receive and send buffers are enlarged.
- A frame above `datagram_bytes` leaves in fragments sharing its sequence number;
  reassembly keeps at most `max_reassemblies` frames (the oldest is evicted), each for at
  most `reassembly_timeout_s`: a lost fragment loses its frame (MIOP's rule), nothing
  waits for ever. Reliability is the NAK channel's job above (multicast="nak").
- What the contract of base.py becomes on datagrams: a frame may be lost at any time
  (not only at a connection break), never duplicated, never corrupted. Per sending node
  and path (unicast or multicast) frames are handed over in sending order: a datagram
  older than one already handed over on that path is discarded (counted `stale`); the
  two paths are read from two sockets, so between them order is not kept. A "link" is a
  session of a sending transport (its node, incarnation and session number). Per sender,
  incarnations (ordered by start) and sessions only move forward (udp_sources): a later
  one starts a fresh link (a restart, a new session); a datagram of an earlier one is
  stale (counted, dropped quietly: no RESET, no new link), be it a replay or a late
  datagram of a restarted sender's old process. At most `max_sources` senders are kept:
  the silent, removed peers and, when full, the least recently heard are forgotten
  (counted, logged), and their datagrams still judged. `Link.drop` logs, counts,
  ignores that session from then on and sends the sender a RESET, after which it starts
  a new session (counted in its `reconnects`), as a TCP sender would reconnect.
  `add_peer` again also starts a new session.
- With a group secret every datagram is authenticated and its body encrypted
  (AES-256-GCM, abcast.security): the key is derived from the secret and the header's
  sender, incarnation and session, the nonce is the datagram's type, fragment index and
  sequence number (unique per key), and the header is the associated data. A datagram
  that fails is one log line and dropped before it touches any state (a stranger
  cannot start a session, reset one or fill a reassembly); replays die as stale, those
  of an earlier incarnation too. Without a secret nothing is authenticated: a forged
  datagram may claim any incarnation.
- Bad input never stops a node: a datagram that does not decode (udp_wire's rules) is
  counted, logged in one line and dropped; datagrams of another group on the same port
  and this node's own multicasts (looped back: its node id and incarnation) are ignored
  quietly. A datagram naming this node as its sender with another incarnation (a node
  with our id, an earlier process of ours, a forgery) is bad input too: counted, one
  line (DEBUG while the incarnation claimed repeats), and never handed over.
"""

from __future__ import annotations

import contextlib
import logging
import random
import secrets
import socket
import struct
from collections import deque
from dataclasses import dataclass
from typing import Any, ClassVar, Final

from cryptography.exceptions import InvalidTag as _InvalidTag

from abcast.errors import ConfigError, DecodeError, LocalProtocolError, RemoteProtocolError
from abcast.ids import NodeId
from abcast.security.sealing import TAG_BYTES, aead_cipher
from abcast.security.secret import session_key
from abcast.transport._common import PeerState, QueuedTransport
from abcast.transport.base import Link, TransportOptions, TransportUrl, parse_url
from abcast.transport.udp_options import UdpOptions, pick_group, split_group, split_options
from abcast.transport.udp_sources import (
    Assembly,
    Source,
    SourceTable,
    Verdict,
    judge,
    next_incarnation,
)
from abcast.transport.udp_wire import (
    HEADER,
    HEADER_BYTES,
    LAST_FRAGMENT,
    MAX_DATAGRAM,
    MAX_SENDER_BYTES,
    MULTICAST,
    PacketType,
    decode,
    encode,
    group_id,
)

__all__ = ["UdpOptions", "UdpStats", "UdpTransport", "pick_group"]

logger = logging.getLogger(__name__)

#: at most this much leaves per loop turn (then the loop turns, and readers read)
PACE_DATAGRAMS: Final = 512
PACE_BYTES: Final = 1024 * 1024

#: datagrams read per readiness callback, at most
READ_BATCH: Final = 1024
SOCKET_BUFFER_BYTES: Final = 8 * 1024 * 1024
_SO_RCVBUFFORCE: Final = 33
_SO_SNDBUFFORCE: Final = 32
_UNICAST: Final = 0
_MCAST: Final = 1


@dataclass(slots=True)
class UdpStats:
    """Datagram-level counters (TransportStats counts frames)."""

    datagrams_out: int = 0
    datagrams_in: int = 0
    multicast_frames_out: int = 0  # frames written once for the whole group
    multicast_frames_in: int = 0
    bad_datagrams: int = 0  # did not decode, or claimed our id (another incarnation): dropped
    stale_datagrams: int = 0  # older than one handed over, of an older incarnation or
    # session (a replay, a restarted sender's old process), or of a dropped session
    foreign_datagrams: int = 0  # another group's, on the same port
    injected_losses: int = 0  # dropped by the `loss` option
    expired_reassemblies: int = 0
    evicted_reassemblies: int = 0
    resets_sent: int = 0
    forgotten_sources: int = 0  # senders let go: silent, removed, or the table full
    send_errors: int = 0


#: at most this many datagram keys are cached (then the cache starts afresh)
_MAX_KEYS: Final = 1024


class UdpTransport(QueuedTransport):
    scheme: ClassVar[str] = "udp"
    secures_links: ClassVar[bool] = True

    def __init__(self, url: str | TransportUrl, options: TransportOptions | None = None) -> None:
        parsed = url if isinstance(url, TransportUrl) else parse_url(url, expect_scheme="udp")
        self.udp, rest = split_options(parsed)
        super().__init__(rest, options)
        self.incarnation = next_incarnation()
        self.udp_stats = UdpStats()
        self._group: tuple[str, int] | None = (
            split_group(self.udp.group) if self.udp.group else None)
        self._group_id = group_id(self.udp.group) if self.udp.group else 0
        self._rng = random.Random(secrets.randbits(64))  # loss injection only
        self._sock: socket.socket | None = None
        self._msock: socket.socket | None = None
        self._sender = b""
        self._session = 1
        self._seq = 0
        self._out: deque[tuple[bytes, tuple[str, int]]] = deque()
        self._out_bytes = 0
        self._flush_scheduled = False
        self._writer_armed = False
        self._table = SourceTable(self.udp.max_sources, self.udp.source_idle_s)
        self._sources: dict[NodeId, Source] = self._table.live
        self._now = 0.0  # loop time of the datagrams being read
        self._forgotten_unlogged = 0
        self._forgotten_log_at = 0.0
        self._claimed_ours = -1  # the incarnation of the last datagram claiming our id
        self._reassembly_bytes = 0
        #: with a secret: (sender, incarnation, session) -> its datagrams' cipher
        self._ciphers: dict[tuple[bytes, int, int], Any] | None = (
            {} if self.options.secret is not None else None)
        self._tag = TAG_BYTES if self._ciphers is not None else 0

    # ----------------------------------------------------------- the secret

    def _cipher(self, sender: bytes, incarnation: int, session: int) -> Any:
        ciphers = self._ciphers
        assert ciphers is not None and self.options.secret is not None
        key = (sender, incarnation, session)
        cipher = ciphers.get(key)
        if cipher is None:
            if len(ciphers) >= _MAX_KEYS:
                ciphers.clear()
            session_id = sender + struct.pack("!QI", incarnation, session)
            cipher = ciphers[key] = aead_cipher(
                session_key(self.options.secret, session=session_id, label=b"udp"))
        return cipher

    @staticmethod
    def _nonce_of(datagram: bytes) -> tuple[int, bytes]:
        """(header length, nonce) of a datagram whose header is well-formed."""
        (_magic, _version, kind, _flags, sender_len, _frags, _group, _inc, _session, seq,
         frag, _size) = HEADER.unpack_from(datagram)
        return HEADER_BYTES + sender_len, struct.pack("!BxHQ", kind, frag, seq)

    def _protect(self, datagram: bytes) -> bytes:
        """Encrypt the body of one datagram we made (its header as associated data)."""
        end, nonce = self._nonce_of(datagram)
        (*_, incarnation, session, _seq, _frag, _size) = HEADER.unpack_from(datagram)
        header = datagram[:end]
        cipher = self._cipher(datagram[HEADER_BYTES:end], incarnation, session)
        sealed: bytes = cipher.encrypt(nonce, datagram[end:], header)
        return header + sealed

    def _unprotect(self, data: bytes) -> bytes:
        """The datagram with its body decrypted; RemoteProtocolError if it fails."""
        if len(data) < HEADER_BYTES + TAG_BYTES:
            raise RemoteProtocolError(f"{len(data)} bytes cannot be a sealed datagram")
        end, nonce = self._nonce_of(data)
        if not 1 <= end - HEADER_BYTES <= MAX_SENDER_BYTES or len(data) < end + TAG_BYTES:
            raise RemoteProtocolError("malformed sealed datagram header")
        (*_, incarnation, session, _seq, _frag, _size) = HEADER.unpack_from(data)
        header = data[:end]
        try:
            body: bytes = self._cipher(data[HEADER_BYTES:end], incarnation, session).decrypt(
                nonce, data[end:], header)
        except _InvalidTag:
            raise RemoteProtocolError(
                "fails authentication (no or another group secret, or altered)") from None
        return header + body

    # ----------------------------------------------------------- binding

    async def _bind(self) -> str:
        url, opts = self._url, self.udp
        node = self.node.encode()
        if len(node) > MAX_SENDER_BYTES:
            raise LocalProtocolError(f"node id {self.node!r} is longer than 64 bytes")
        self._sender = node
        host = opts.iface if self._group and url.host == self._group[0] else url.host
        port = 0 if self._group and url.host == self._group[0] else url.port
        sock = self._sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setblocking(False)
        _enlarge(sock)
        try:
            sock.bind((host, port))
        except OSError as exc:
            raise ConfigError(f"udp: cannot bind {host}:{port}: {exc}") from exc
        if self._group is not None:
            self._join_group(sock)
        self.loop.add_reader(sock.fileno(), self._read_ready, sock, _UNICAST)
        bound = sock.getsockname()
        return str(TransportUrl("udp", host=bound[0], port=bound[1]))

    def _join_group(self, sock: socket.socket) -> None:
        assert self._group is not None
        group_ip, group_port = self._group
        iface = socket.inet_aton(self.udp.iface)
        try:
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF, iface)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, self.udp.ttl)
            sock.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_LOOP, 1)
            msock = self._msock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
            msock.setblocking(False)
            msock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if hasattr(socket, "SO_REUSEPORT"):
                msock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            _enlarge(msock)
            msock.bind((group_ip, group_port))
            mreq = struct.pack("4s4s", socket.inet_aton(group_ip), iface)
            msock.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
        except OSError as exc:
            raise ConfigError(
                f"udp: the kernel refused multicast group {self.udp.group} on "
                f"{self.udp.iface}: {exc}") from exc
        self.loop.add_reader(msock.fileno(), self._read_ready, msock, _MCAST)

    @property
    def group(self) -> str:
        """The multicast group "ip:port" ("" when unicast only)."""
        return self.udp.group

    @property
    def datagram_frame_bytes(self) -> int:
        """The room `_datagrams` cuts frames by (before start: for the longest node id)."""
        sender = len(self._sender) if self._sender else MAX_SENDER_BYTES
        return self.udp.datagram_bytes - HEADER_BYTES - sender - self._tag

    # ----------------------------------------------------------- peers (no connections)

    def _peer_added(self, peer: PeerState) -> None:
        pass

    def _peer_readdressed(self, peer: PeerState) -> None:
        self._new_session("add_peer again")

    def _peer_removed(self, peer: PeerState) -> None:
        self._now = self.loop.time()
        if self._forget(peer.node):
            self._count_forgotten(1, "a peer removed")

    def _new_session(self, why: str) -> None:
        self._session += 1
        self.stats.reconnects += 1
        logger.debug("%s: session %d (%s)", self.label, self._session, why)

    # ----------------------------------------------------------- sending

    def multicast(self, nodes: tuple[NodeId, ...] | list[NodeId], data: bytes) -> int:
        """One frame for each of `nodes`: one datagram write to the group when this
        transport has one and knows every node; else one send each."""
        if self._group is None or len(nodes) < 2 or any(n not in self._peers for n in nodes):
            return super().multicast(nodes, data)
        self._check_open("multicast")
        if type(data) is not bytes:
            data = bytes(data)
        if len(data) > self.options.max_frame_bytes:
            raise LocalProtocolError(f"frame of {len(data)} bytes exceeds max_frame_bytes "
                                     f"{self.options.max_frame_bytes}")
        assert self._group is not None
        self._datagrams(data, self._group, MULTICAST)
        self.udp_stats.multicast_frames_out += 1
        self.sent(1, len(data))
        self._schedule_write()
        return 1

    def _frames_queued(self, peer: PeerState) -> None:
        # Cut into datagrams at once, so that unicast and multicast frames leave in the
        # order they were sent (a digest must not overtake the packets it announces).
        queue = peer.queue
        address = (peer.address.host, peer.address.port)
        frames = size = 0
        while queue:
            frame = queue.popleft()
            self._datagrams(frame, address, 0)
            frames += 1
            size += len(frame)
        peer.queued_bytes = 0
        self.sent(frames, size)
        self._schedule_write()

    def _schedule_write(self) -> None:
        """One write pass at the end of this loop turn, for everything queued in it."""
        if not self._flush_scheduled and not self._writer_armed:
            self._flush_scheduled = True
            self.loop.call_soon(self._write)

    def _datagrams(self, frame: bytes, address: tuple[str, int], flags: int) -> None:
        """Cut `frame` into datagrams (one unless it is large) onto the write queue."""
        self._seq += 1
        room = self.datagram_frame_bytes
        size = len(frame)
        frags = max(1, -(-size // room))
        out = self._out
        for index in range(frags):
            body = frame if frags == 1 else frame[index * room : (index + 1) * room]
            last = LAST_FRAGMENT if index == frags - 1 else 0
            datagram = encode(PacketType.DATA, flags | last, frags, self._group_id,
                              self.incarnation, self._session, self._seq, index, size,
                              self._sender, body)
            if self._ciphers is not None:
                datagram = self._protect(datagram)
            out.append((datagram, address))
            self._out_bytes += len(datagram)

    def _write(self) -> None:
        """Write at most a turn's pace of datagrams; come back next turn for the rest."""
        self._flush_scheduled = False
        sock, out = self._sock, self._out
        if sock is None or not self.is_open:
            return
        count = written = 0
        stats = self.udp_stats
        while out and count < PACE_DATAGRAMS and written < PACE_BYTES:
            datagram, address = out[0]
            try:
                sock.sendto(datagram, address)
            except BlockingIOError:
                self._arm_writer()
                break
            except OSError as exc:  # unreachable, no buffer space: the datagram is lost
                stats.send_errors += 1
                logger.debug("%s: sendto %s failed: %s", self.label, address, exc)
            out.popleft()
            self._out_bytes -= len(datagram)
            count += 1
            written += len(datagram)
        stats.datagrams_out += count
        if out and not self._writer_armed:
            self._schedule_write()
        self.progressed()

    def _arm_writer(self) -> None:
        if self._writer_armed or self._sock is None:
            return
        self._writer_armed = True
        self.loop.add_writer(self._sock.fileno(), self._writable)

    def _writable(self) -> None:
        if self._sock is not None:
            self.loop.remove_writer(self._sock.fileno())
        self._writer_armed = False
        self._write()

    def _inflight(self, peer: PeerState) -> int:
        return self._out_bytes

    def buffered(self, node: NodeId | None = None) -> int:
        return max(super().buffered(node), self._out_bytes)

    def _send_reset(self, source: Source) -> None:
        now = self.loop.time()
        if self._sock is None or now - source.reset_at < 0.05:
            return
        source.reset_at = now
        self.udp_stats.resets_sent += 1
        datagram = encode(PacketType.RESET, 0, 1, self._group_id, source.incarnation,
                          source.session, 0, 0, 0, self._sender, b"")
        if self._ciphers is not None:
            datagram = self._protect(datagram)
        with contextlib.suppress(OSError):
            self._sock.sendto(datagram, source.addr)

    # ----------------------------------------------------------- receiving

    def _read_ready(self, sock: socket.socket, path: int) -> None:
        self._now = self.loop.time()
        for _ in range(READ_BATCH):
            try:
                data, addr = sock.recvfrom(MAX_DATAGRAM + 1)
            except (BlockingIOError, InterruptedError):
                return
            except OSError as exc:  # e.g. ECONNREFUSED reported late: nothing to read
                logger.debug("%s: recvfrom: %s", self.label, exc)
                return
            if not self.is_open:
                return
            self._on_datagram(data, addr, path)

    def _on_datagram(self, data: bytes, addr: tuple[str, int], path: int) -> None:
        stats = self.udp_stats
        stats.datagrams_in += 1
        loss = self.udp.loss
        if loss and self._rng.random() < loss:
            stats.injected_losses += 1
            return
        if self._ciphers is not None:
            if len(data) >= HEADER_BYTES and HEADER.unpack_from(data)[6] not in (
                    self._group_id, 0):
                stats.foreign_datagrams += 1  # another group on this port: not ours to judge
                return
            try:
                data = self._unprotect(data)
            except RemoteProtocolError as exc:
                self.stats.rejected_frames += 1
                self._bad_datagram("rejected a", addr, len(data), exc)
                return
        try:
            d = decode(data, self.options.max_frame_bytes)
        except DecodeError as exc:
            self.stats.bad_frames += 1
            self._bad_datagram("dropped a bad", addr, len(data), exc)
            return
        if d.group not in (self._group_id, 0):
            stats.foreign_datagrams += 1
            return
        if d.sender == self._node:  # ours (a multicast looped back), or a claim to be us
            if d.incarnation != self.incarnation:
                self._claims_our_id(d.incarnation, addr, len(data))
            return
        if d.kind == PacketType.RESET:
            if d.incarnation == self.incarnation and d.session == self._session:
                self._new_session(f"{d.sender} dropped our session")
            return
        if d.kind != PacketType.DATA:
            stats.foreign_datagrams += 1
            return
        source, forgotten = self._table.known(d.sender)
        verdict = judge(source, d.incarnation, d.session)
        if verdict is Verdict.STALE:
            stats.stale_datagrams += 1  # a replay, or a late datagram of a restarted process
            return
        if verdict is Verdict.NEWER or forgotten:
            source = self._new_source(d.sender, d.incarnation, d.session, addr, source)
        assert source is not None
        if source.dropped:
            stats.stale_datagrams += 1
            self._send_reset(source)
            return
        if path == _UNICAST:
            source.addr = addr
        lane = _MCAST if d.flags & MULTICAST else _UNICAST
        if d.seq <= source.last[lane]:
            stats.stale_datagrams += 1
            return
        source.heard = self._now
        if d.frags == 1:
            frame = d.body
        else:
            whole = self._reassemble(source, lane, d.seq, d.frag, d.frags, d.size, d.body)
            if whole is None:
                return
            frame = whole
        source.last[lane] = d.seq
        self._forget_older(source, lane, d.seq)
        if lane == _MCAST:
            stats.multicast_frames_in += 1
        self.deliver(source.link, frame)

    def _bad_datagram(self, what: str, addr: tuple[str, int], size: int,
                      exc: Exception | str, level: int = logging.WARNING) -> None:
        self.udp_stats.bad_datagrams += 1
        logger.log(level, "%s: %s datagram from %s:%s (%d bytes): %s",
                   self.label, what, addr[0], addr[1], size, exc)

    def _claims_our_id(self, incarnation: int, addr: tuple[str, int], size: int) -> None:
        """A datagram naming this node as its sender, of another incarnation: another
        node with our id, an earlier process of ours still sending, or a forgery. Bad
        input (its frame never reaches the stack): counted, one log line — WARNING
        unless the last such datagram claimed the same incarnation, then DEBUG (a node
        with our id sends heartbeats for as long as it runs)."""
        self.stats.bad_frames += 1
        first = incarnation != self._claimed_ours
        self._claimed_ours = incarnation
        self._bad_datagram(
            "dropped a bad", addr, size,
            f"it names this node, {self._node}, as its sender with incarnation "
            f"{incarnation}, ours is {self.incarnation} (another node has our id, or an "
            "earlier process of this node is still sending)",
            logging.WARNING if first else logging.DEBUG)

    def _new_source(self, sender: str, incarnation: int, session: int, addr: tuple[str, int],
                    old: Source | None) -> Source:
        """A fresh source for `sender`, after `old` (live: a restart or a new session; a
        tombstone: a forgotten sender heard again, which resumes where it was)."""
        if old is not None and self._sources.get(sender) is old:
            old.link.retire()
            self._drop_assemblies(old)
        else:
            self._make_room()
        link = Link(sender, f"{addr[0]}:{addr[1]}", self._dropped)
        source = Source(incarnation, session, link, addr, self._now)
        if old is not None and old.incarnation == incarnation:
            source.last = list(old.last)  # the same sender: its seqs go on rising
            if old.session == session:
                source.dropped = old.dropped
        self._table.add(sender, source)
        return source

    def _make_room(self) -> None:
        """Before a new sender's source: forget the silent, and the least recently heard
        while the table is full (udp_sources' rules)."""
        gone = self._table.to_forget(self._now)
        for sender, _ in gone:
            self._forget(sender)
        if gone:
            self._count_forgotten(len(gone), " or ".join(sorted({why for _, why in gone})))

    def _forget(self, sender: NodeId) -> bool:
        source = self._sources.get(sender)
        if source is None:
            return False
        source.link.retire()
        self._drop_assemblies(source)
        self._table.forget(sender)
        return True

    def _count_forgotten(self, count: int, why: str) -> None:
        """Count, and log at most one line per 10 s (a forger without the secret can
        make a new sender per datagram)."""
        self.udp_stats.forgotten_sources += count
        self._forgotten_unlogged += count
        if self._now < self._forgotten_log_at:
            return
        logger.info("%s: forgot %d senders (%s; %d kept)", self.label,
                    self._forgotten_unlogged, why, len(self._sources))
        self._forgotten_unlogged = 0
        self._forgotten_log_at = self._now + 10.0

    def _dropped(self, link: Link, reason: str) -> None:
        self.report_drop(link, reason)
        if link.peer is None:
            return
        source = self._sources.get(link.peer)
        if source is not None and source.link is link:
            source.dropped = True
            self._drop_assemblies(source)
            self._send_reset(source)

    def _reassemble(self, source: Source, lane: int, seq: int, frag: int, frags: int,
                    size: int, body: bytes) -> bytes | None:
        now = self.loop.time()
        key = (lane, seq)
        assembly = source.assemblies.get(key)
        if assembly is None:
            self._expire(now)
            if len(source.assemblies) >= self.udp.max_reassemblies or (
                    self._reassembly_bytes + size > 2 * self.options.max_frame_bytes):
                self._evict_oldest()
            assembly = source.assemblies[key] = Assembly(frags, size, now)
            self._reassembly_bytes += size
        if len(assembly.parts) != frags or assembly.size != size:
            self._bad(source, f"fragment {frag} disagrees with its frame's count or size")
            return None
        if assembly.parts[frag] is not None:
            self.udp_stats.stale_datagrams += 1
            return None
        assembly.parts[frag] = body
        assembly.got += 1
        if assembly.got < frags:
            return None
        del source.assemblies[key]
        self._reassembly_bytes -= size
        frame = b"".join(p for p in assembly.parts if p is not None)
        if len(frame) != size:
            self._bad(source, f"fragments add up to {len(frame)} bytes, not {size}")
            return None
        return frame

    def _bad(self, source: Source, reason: str) -> None:
        self.udp_stats.bad_datagrams += 1
        self.stats.bad_frames += 1
        logger.warning("%s: dropped a frame from %s: %s", self.label, source.link.peer, reason)

    def _forget_older(self, source: Source, lane: int, seq: int) -> None:
        """Frames older than one handed over are lost (their fragments can only be late)."""
        if not source.assemblies:
            return
        for key in [k for k in source.assemblies if k[0] == lane and k[1] < seq]:
            self._reassembly_bytes -= source.assemblies.pop(key).size
            self.udp_stats.evicted_reassemblies += 1

    def _expire(self, now: float) -> None:
        limit = now - self.udp.reassembly_timeout_s
        for source in self._sources.values():
            for key in [k for k, a in source.assemblies.items() if a.started < limit]:
                self._reassembly_bytes -= source.assemblies.pop(key).size
                self.udp_stats.expired_reassemblies += 1

    def _evict_oldest(self) -> None:
        oldest: tuple[float, Source, tuple[int, int]] | None = None
        for source in self._sources.values():
            for key, assembly in source.assemblies.items():
                if oldest is None or assembly.started < oldest[0]:
                    oldest = (assembly.started, source, key)
        if oldest is not None:
            _, source, key = oldest
            self._reassembly_bytes -= source.assemblies.pop(key).size
            self.udp_stats.evicted_reassemblies += 1

    def _drop_assemblies(self, source: Source) -> None:
        for assembly in source.assemblies.values():
            self._reassembly_bytes -= assembly.size
        source.assemblies.clear()

    @property
    def reassembly_bytes(self) -> int:
        """Bytes of frames being reassembled (bounded; see the module rules)."""
        return self._reassembly_bytes

    # ----------------------------------------------------------- closing

    async def _shutdown(self) -> None:
        loop = self._loop
        for sock in (self._sock, self._msock):
            if sock is None:
                continue
            if loop is not None:
                loop.remove_reader(sock.fileno())
                if sock is self._sock and self._writer_armed:
                    loop.remove_writer(sock.fileno())
            sock.close()
        self._sock = self._msock = None
        self._writer_armed = False
        self._out.clear()
        self._out_bytes = 0
        for source in self._sources.values():
            source.link.retire()
        self._table.clear()
        self._reassembly_bytes = 0


def _enlarge(sock: socket.socket) -> None:
    """Socket buffers of SOCKET_BUFFER_BYTES (beyond rmem_max where the process may)."""
    for force, plain in ((_SO_RCVBUFFORCE, socket.SO_RCVBUF), (_SO_SNDBUFFORCE, socket.SO_SNDBUF)):
        try:
            sock.setsockopt(socket.SOL_SOCKET, force, SOCKET_BUFFER_BYTES)
        except OSError:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, plain, SOCKET_BUFFER_BYTES)
