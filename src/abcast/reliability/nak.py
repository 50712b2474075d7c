"""NAK channel: the channel slot of a group created with `multicast="nak"` (the default
on udp://) — each multicast sent once to the whole group, loss repaired by negative
acknowledgements, buffers freed by stability rounds (JGroups' NAKACK2 + STABLE + FRAG).

Streams. A node numbers what it sends in one multicast stream (packets addressed to every
other member of the current view: one `Multicast`, which an IP-multicast transport sends
as one datagram) and one unicast stream per peer (anything else). A receiver hands each
packet up once, the moment it is whole, in any order — the ack-based channel's contract,
which the orderings and their view changes are written for: what a sender got through
before it crashed reaches the flush, even above a gap it will never repair. Per stream
it keeps `next`, the lowest seq not yet settled (handed up or lost), and above it what
is settled or waiting.

    event at a receiver            what the stream does
    NData seq >= next, whole       hand up; seq settled (next moves over what is settled)
    NData seq >= next, fragment    kept until every fragment of its packet is here, then
                                   the packet is handed up; a gap below next is NAKed
                                   after nak_delay_us
    NData seq <  next, or settled  duplicate: dropped
    NDigest from the sender        its highest seq reveals a lost tail: NAK it
    NCancel seqs                   the sender cannot resend them: settled as lost (a
                                   counted gap); a fragment whose packet lost another
                                   fragment is lost with it (`orphaned`)
    NAK timer                      NNak(missing seqs) to the sender; again every nak_retry_us

    event at a sender              what it does
    NNak on the multicast stream   gather requests for gather_us, then resend each seq once:
                                   multicast if two or more members asked, else unicast
    NNak on a unicast stream       resend at once
    NNak for a freed seq           NCancel to the asker
    NDigest from every member      free what all of them have (stability); send what the
                                   window held back

Rules:
- Digests (`NDigest`) are the stability round and the keep-alive in one packet: every
  stable_us, while this node has unstable packets or its marks moved, it multicasts
  the highest seq it sent and, for each peer, what it has received contiguously from it.
- Back-pressure: once window_bytes are unstable on a stream, further packets wait in this
  layer until a digest frees room (one message always goes, however large).
- Fragmentation: a packet above frag_bytes leaves as fragments, each its own seq (so a
  lost fragment is NAKed alone); a packet of more than max_fragments is refused at both
  ends, and fragments wait only within max_holdback above `next`. In a stack the
  builder always gives the header types above (`decode_above`), so a packet the size
  gate cannot clear (abcast.reliability.fragments) is encoded whole — headers and
  payload, one inner frame, a copy of the payload — and if that exceeds frag_bytes the
  inner frame is what is split: no fragment carries headers, and the receiver decodes
  the joined bytes.
  Only a channel driven without `decode_above` (its unit tests) splits the payload
  itself, the first fragment carrying the headers above.
- Every stream starts at 1, except, at a joiner, the multicast streams of the members
  it joined: each starts where that member's digest says it started sending to the
  joiner (`Mark.start_m`); until that digest comes, packets of the stream are held. A
  multicast stream heard before this node's first view with others (on udp:// a joiner
  hears the group's multicasts) is provisional until that view says which it is.
  Packets from outside the view are dropped unless `open_group` (orderings that admit
  joiners themselves).
- A member a view removes is NAKed no more (the view change settled what it sent); its
  inbound streams are kept linger_us (late copies stay duplicates), then forgotten; a
  view that holds it again makes it NAKable again.
- A member the detector suspects (`Suspected`, until `Restored` or a view without it)
  is not NAKed and is no reason for a digest (a crashed one was both until the view
  change); what it has not acked stays buffered, and once it speaks (`Restored`) its
  gaps are NAKed and a digest goes out: a slow member is repaired. `Excluded` is the
  layer above's: it stops the node, or (evs) suspects that member and flushes it out.
- Guests (an open group's nodes outside the view: a joiner, and the members to it) get
  digests of their own, unicast, naming only the unicast stream (`sent_m` and `start_m`
  0: no multicast stream to start): a unicast from a guest is answered at once with
  what arrived of its stream, and a node digests every guest it holds unstable unicasts
  for every stable_us, so a lost tail is NAKed. Without them a joiner's packets were
  never repaired (its view holds only itself: no digest went out), and a withdrawal
  (`MWithdraw`) lost on the way left a lone member holding a joiner that gave up.
  `in_flight()`: the packets sent and not yet freed (the give-up's detach waits on it).
- The "nak" and "stable" timers are kept as their due time, not a flag: an event past
  it finds the timer overdue and sets it again, due now. A defence against a lost
  SetTimer: the stack once dropped a frame's outputs, ours included, when a layer above
  refused the packet (a removed member's stale flush message); it no longer does
  (docs/design.md §5), and tests/unit/test_nak_gaps.py still plants the loss.
- NAKs, digests, cancels and retransmissions are `control` traffic (not counted as
  protocol packets). No clock, no randomness: time is the `now` argument.
"""

from __future__ import annotations

from abcast.codec import Packet
from abcast.effects import Effect, Multicast, Send, SetTimer, Up
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.events import (
    Event,
    Excluded,
    Forgotten,
    MulticastRequested,
    Received,
    Restored,
    SendRequested,
    Suspected,
    TimerFired,
    ViewInstalled,
)
from abcast.ids import NodeId, View
from abcast.layer import Layer
from abcast.reliability.fragments import InnerCodec, SizeGate, encode_header
from abcast.reliability.nak_streams import InStream, OutStream
from abcast.reliability.nak_wire import (
    MAX_LIST,
    MCAST,
    UNICAST,
    Mark,
    NakConfig,
    NakHeader,
    NCancel,
    NData,
    NDigest,
    NNak,
)
from abcast.snapshot import LayerSnapshot

__all__ = ["MCAST", "UNICAST", "Mark", "NCancel", "NData", "NDigest", "NNak", "NakChannel",
           "NakConfig", "NakHeader"]


class NakChannel(Layer):
    name = "nak-channel"
    header_type = NakHeader

    def __init__(
        self, node: NodeId, config: NakConfig | None = None, open_group: bool = False
    ) -> None:
        super().__init__(node)
        self.config = config or NakConfig()
        self.open_group = open_group
        self._others: tuple[NodeId, ...] = ()
        self._members: frozenset[NodeId] = frozenset()
        #: a joiner's: the members it found (their streams started before it came)
        self._found: frozenset[NodeId] | None = None
        self._m = OutStream()
        self._u: dict[NodeId, OutStream] = {}
        self._acked_m: dict[NodeId, int] = {}  # each member's contiguous mark of _m
        self._start_m: dict[NodeId, int] = {}  # the first seq of _m each member was sent
        self._in: dict[tuple[NodeId, int], InStream] = {}
        #: members a view removed: when their streams are forgotten (never NAKed again)
        self._departed: dict[NodeId, int] = {}
        self._suspects: set[NodeId] = set()  # members the detector suspects (see the rules)
        self._xmit: dict[int, set[NodeId]] = {}  # gathered NAKs of the multicast stream
        #: when the armed "nak" / "stable" timer is due (None: not armed); see the rules
        self._nak_at: int | None = None
        self._stable_at: int | None = None
        self._marks_moved = False
        # counters
        self.naks_sent = 0
        self.naks_received = 0
        self.retransmissions = 0
        self.multicast_retransmissions = 0
        self.cancels_sent = 0
        self.skipped = 0
        self.duplicates = 0
        self.digests = 0
        self.held_back_packets = 0  # packets that waited for window room
        self.peak_unstable_bytes = 0
        self.refused_far = 0  # packets dropped: beyond max_holdback above the next seq
        self.orphaned = 0  # fragments dropped: another fragment of their packet was lost
        self._gate = SizeGate()  # off until decode_above
        self._inner: InnerCodec | None = None
        #: seqs one NAK names: as many as fit a fragment's frame (9 bytes each at most)
        self._nak_list = max(1, min(MAX_LIST, self.config.frag_bytes // 10))
        self.undecodable = 0  # reassembled inner frames that did not decode (dropped)
        self.largest_split = 0  # bytes of the largest packet split whole (its inner frame)

    def decode_above(self, header_types: list[object]) -> None:
        """The header types of the layers above, bottom first (the stack builder's
        call): with them a packet whose headers exceed frag_bytes is split whole."""
        self._inner = InnerCodec(self.node, list(header_types))
        self._gate.room = self.config.frag_bytes

    # -- dispatch --------------------------------------------------------------------------
    def handle(self, event: Event, now: int) -> list[Effect]:
        match event:
            case Received(sender, NData() as header, inner):
                return self._on_data(sender, header, inner, now)
            case SendRequested(to, packet, control):
                return self._send_unicast(to, packet, now, control)
            case MulticastRequested(to, packet, control):
                if set(to) == set(self._others):
                    return self._submit(self._m, None, packet, control, now)
                effects: list[Effect] = []
                for dest in to:
                    effects += self._send_unicast(dest, packet, now, control)
                return effects
            case Received(sender, NDigest() as digest, _):
                return self._on_digest(sender, digest, now)
            case Received(sender, NNak(stream, seqs), _):
                return self._on_nak(sender, stream, seqs, now)
            case Received(sender, NCancel(stream, seqs), _):
                return self._on_cancel(sender, stream, seqs, now)
            case Received(sender, header, _):
                raise RemoteProtocolError(f"{sender} sent unexpected header {header!r}")
            case TimerFired("nak"):
                return self._nak_round(now)
            case TimerFired("xmit"):
                return self._resend_gathered()
            case TimerFired("stable"):
                return self._stability_round(now)
            case TimerFired("linger"):
                return self._forget_departed(now)
            case ViewInstalled(view):
                return self._on_view(view, now)
            case Forgotten(peer):  # a joiner that withdrew: its next stack starts afresh
                self._u.pop(peer, None)  # (and ours to it: it numbers from 1 again)
                self._forget(peer)
                return []
            case Suspected(peer):
                self._suspects.add(peer)
                return []
            case Restored(peer) if peer in self._suspects:
                self._suspects.discard(peer)
                self._marks_moved = True  # it may lack a tail no digest of ours named
                return self._arm_nak(now) + self._arm_stable(now)
            case Restored() | Excluded() | TimerFired():
                return []
            case _:
                raise LocalProtocolError(f"{self.name} cannot handle {event!r}")

    def _allowed(self, peer: NodeId) -> bool:
        return self.open_group or peer in self._members

    # -- sending ---------------------------------------------------------------------------
    def _send_unicast(self, to: NodeId, packet: Packet, now: int, control: bool) -> list[Effect]:
        if not self._allowed(to):
            return []
        out = self._u.get(to)
        if out is None:
            out = self._u[to] = OutStream()
        return self._submit(out, to, packet, control, now)

    def _submit(
        self, out: OutStream, to: NodeId | None, packet: Packet, control: bool, now: int
    ) -> list[Effect]:
        if out.waiting or (out.buf and out.buf_bytes >= self.config.window_bytes):
            out.waiting.append((packet, control))
            self.held_back_packets += 1
            return []
        return self._emit(out, to, packet, control, now)

    def _emit(
        self, out: OutStream, to: NodeId | None, packet: Packet, control: bool, now: int
    ) -> list[Effect]:
        cfg = self.config
        size = len(packet.payload)  # SizeGate.over, inlined (room: sys.maxsize when off)
        bounds = self._gate.bounds
        for header in packet.headers:
            size += bounds[type(header)] or len(encode_header(header))
        if size > self._gate.room and self._inner is not None:
            self._gate.measured += 1
            encoded = self._inner.encode(packet)
            if len(encoded) > cfg.frag_bytes:
                packet = Packet((), encoded)  # split whole; the receiver decodes it
                self.largest_split = max(self.largest_split, len(encoded))
        payload = packet.payload
        size = len(payload)
        frags = max(1, -(-size // cfg.frag_bytes))
        if frags > cfg.max_fragments:
            raise LocalProtocolError(
                f"a {size}-byte packet needs {frags} fragments; max_fragments is "
                f"{cfg.max_fragments} (raise it or frag_bytes)")
        stream = MCAST if to is None else UNICAST
        effects: list[Effect] = []
        for index in range(frags):
            if frags == 1:
                inner = packet
            else:
                chunk = payload[index * cfg.frag_bytes : (index + 1) * cfg.frag_bytes]
                inner = Packet(packet.headers if index == 0 else (), chunk)
            out.last += 1
            header = NData(stream, out.last, index, frags)
            out.buf[out.last] = (header, inner)
            out.buf_bytes += len(inner.payload)
            if to is None:
                effects.append(Multicast(self._others, header, inner, control))
            else:
                effects.append(Send(to, header, inner, control))
        self.peak_unstable_bytes = max(self.peak_unstable_bytes, self._unstable_bytes())
        return effects + self._arm_stable(now)

    def _unstable_bytes(self) -> int:
        return self._m.buf_bytes + sum(o.buf_bytes for o in self._u.values())

    # -- receiving -------------------------------------------------------------------------
    def _stream_in(self, sender: NodeId, stream: int) -> InStream:
        key = (sender, stream)
        st = self._in.get(key)
        if st is None:
            st = self._in[key] = InStream()
            # a multicast stream heard before this node's admission is provisional: the
            # view that admits it says whether it waits for the member's start_m
            if stream == UNICAST or (self._found is not None and sender not in self._found):
                st.next = 1
        return st

    def _on_data(self, sender: NodeId, header: NData, inner: Packet, now: int) -> list[Effect]:
        if not self._allowed(sender):
            return []
        if header.frags > self.config.max_fragments:
            raise RemoteProtocolError(
                f"{sender} sent a packet of {header.frags} fragments; max_fragments is "
                f"{self.config.max_fragments}")
        st = self._stream_in(sender, header.stream)
        if st.next == 0:  # before this stream's start is known (a joiner): keep it
            early = st.early
            if header.seq not in early and len(early) < self.config.max_holdback:
                early[header.seq] = (header, inner)
            elif header.seq not in early:
                self.refused_far += 1
            return []
        effects = self._accept(sender, st, header, inner)
        if header.stream == UNICAST and sender not in self._members:
            effects.append(self._guest_digest(sender))  # a guest hears from no digest
        if st.held:
            effects += self._arm_nak(now)
        self._marks_moved = True
        return effects + self._arm_stable(now)

    def _accept(self, sender: NodeId, st: InStream, header: NData, inner: Packet) -> list[Effect]:
        """Hand a packet up the moment it is whole, whatever the gaps below it (see the
        rules: what a crashed sender got through must reach the layer above)."""
        seq = header.seq
        nxt = st.next
        held = st.held
        if seq < nxt or seq in held:
            self.duplicates += 1
            return []
        if seq - nxt > self.config.max_holdback:
            self.refused_far += 1
            return []  # too far ahead: it is resent once the gap closes
        st.known = max(st.known, seq)
        if header.frags == 1:
            if seq == nxt:
                st.next = seq + 1
                if held:
                    self._drain(st)
            else:
                held[seq] = True
            return [Up(sender, inner)]
        first = seq - header.frag
        if first < nxt:  # its first fragment was settled without it: the packet is lost
            held[seq] = False
            self._drain(st)
            return []
        held[seq] = (header, inner)
        count = st.runs[first] = st.runs.get(first, 0) + 1
        effects = self._reassemble(sender, st, first, header.frags) if count >= header.frags else []
        if seq == nxt or effects or count >= header.frags:  # else `next` cannot move: a
            self._drain(st)  # drain per fragment made a packet cost its fragments squared
        return effects

    def _reassemble(self, sender: NodeId, st: InStream, first: int, frags: int) -> list[Effect]:
        del st.runs[first]
        held = st.held
        seqs = range(first, first + frags)
        parts = [held.get(seq) for seq in seqs]
        whole: Packet | None = None
        if all(isinstance(p, tuple) and p[0].frag == i and p[0].frags == frags
               for i, p in enumerate(parts)):
            pieces = [p for p in parts if isinstance(p, tuple)]
            whole = Packet(pieces[0][1].headers, b"".join(p[1].payload for p in pieces))
        for seq in seqs:
            if isinstance(held.get(seq), tuple):
                held[seq] = whole is not None
        if whole is None:
            self.undecodable += 1  # fragments that do not make one packet: a peer's error
            return []
        if not whole.headers and self._inner is not None:  # an inner frame (see the rules)
            try:
                whole = self._inner.decode(sender, whole.payload)
            except RemoteProtocolError:
                self.undecodable += 1  # the stream has moved on: drop, do not raise
                return []
        return [Up(sender, whole)]

    def _drain(self, st: InStream) -> None:
        """Move `next` over what is settled; a fragment at `next` whose packet cannot be
        completed (a fragment before it or in it was lost) is lost too."""
        held = st.held
        while st.next in held:
            item = held[st.next]
            if isinstance(item, tuple):
                header = item[0]
                if header.frag == 0 and not any(
                        held.get(seq) is False for seq in range(st.next, st.next + header.frags)):
                    return  # the rest of its packet is still to come
                st.runs.pop(st.next - header.frag, None)
                self.orphaned += 1
            elif not item:
                self.skipped += 1
            del held[st.next]
            st.next += 1

    def _start(self, sender: NodeId, st: InStream, start: int) -> list[Effect]:
        """Begin a stream that waited for its start (a joiner's): replay what came early."""
        st.next = max(1, start)
        early, st.early = st.early, {}
        effects: list[Effect] = []
        for seq in sorted(early):
            if seq >= st.next:
                effects += self._accept(sender, st, *early[seq])
        return effects

    def _on_cancel(self, sender: NodeId, stream: int, seqs: list[int], now: int) -> list[Effect]:
        if not self._allowed(sender):
            return []
        st = self._stream_in(sender, stream)
        if st.next == 0:
            return []
        top = st.next + self.config.max_holdback
        for seq in seqs:
            if st.next <= seq <= top and seq not in st.held:
                st.held[seq] = False
        self._drain(st)
        self._marks_moved = True
        return self._arm_stable(now)

    # -- NAKs and retransmission -----------------------------------------------------------
    def _arm_nak(self, now: int) -> list[Effect]:
        due = self._nak_at
        if due is not None and now <= due:
            return []
        # not armed, or armed and overdue: that SetTimer was lost (see the rules): now
        self._nak_at = at = now + self.config.nak_delay_us if due is None else now
        return [SetTimer("nak", at)]

    def _nak_round(self, now: int) -> list[Effect]:
        self._nak_at = None
        effects: list[Effect] = []
        departed, suspects = self._departed, self._suspects
        for (sender, stream), st in self._in.items():
            if st.next == 0 or sender in departed or sender in suspects:
                continue
            missing = st.missing(self._nak_list)
            if missing:
                self.naks_sent += 1
                effects.append(Send(sender, NNak(stream, missing), control=True))
        if effects:
            self._nak_at = now + self.config.nak_retry_us
            effects.append(SetTimer("nak", self._nak_at))
        return effects

    def _on_nak(self, asker: NodeId, stream: int, seqs: list[int], now: int) -> list[Effect]:
        if not self._allowed(asker):
            return []
        self.naks_received += 1
        if stream == UNICAST:
            out = self._u.get(asker)
            if out is None:
                return [Send(asker, NCancel(UNICAST, seqs), control=True)]
            effects: list[Effect] = []
            gone = []
            for seq in seqs:
                item = out.buf.get(seq)
                if item is not None:
                    self.retransmissions += 1
                    effects.append(Send(asker, item[0], item[1], control=True))
                elif seq <= out.last:
                    gone.append(seq)
            return effects + self._cancel(asker, UNICAST, gone)
        effects = []
        if not self._xmit:
            effects.append(SetTimer("xmit", now + self.config.gather_us))
        for seq in seqs:
            if seq <= self._m.last:
                self._xmit.setdefault(seq, set()).add(asker)
        return effects

    def _cancel(self, asker: NodeId, stream: int, seqs: list[int]) -> list[Effect]:
        if not seqs:
            return []
        self.cancels_sent += 1
        return [Send(asker, NCancel(stream, seqs), control=True)]

    def _resend_gathered(self) -> list[Effect]:
        gathered, self._xmit = self._xmit, {}
        effects: list[Effect] = []
        gone: dict[NodeId, list[int]] = {}
        for seq in sorted(gathered):
            askers = gathered[seq]
            item = self._m.buf.get(seq)
            if item is None:
                for asker in askers:
                    gone.setdefault(asker, []).append(seq)
                continue
            self.retransmissions += 1
            if len(askers) > 1 and self._others:
                self.multicast_retransmissions += 1
                effects.append(Multicast(self._others, item[0], item[1], control=True))
            else:
                (asker,) = askers
                effects.append(Send(asker, item[0], item[1], control=True))
        for asker, seqs in gone.items():
            effects += self._cancel(asker, MCAST, seqs)
        return effects

    # -- stability -------------------------------------------------------------------------
    def _arm_stable(self, now: int) -> list[Effect]:
        due = self._stable_at
        if due is not None and now <= due:
            return []
        self._stable_at = at = now + self.config.stable_us if due is None else now
        return [SetTimer("stable", at)]

    def _guest_digest(self, peer: NodeId) -> Send:
        """A digest for `peer` outside the view (see the rules): its unicast marks only."""
        u = self._in.get((peer, UNICAST))
        out = self._u.get(peer)
        mark = Mark(peer, 0, max(0, u.next - 1) if u else 0, out.last if out else 0,
                    out.stable if out else 0, 0)
        return Send(peer, NDigest(0, 0, [mark]), control=True)

    def _stability_round(self, now: int) -> list[Effect]:
        self._stable_at = None
        guests: list[Effect] = [self._guest_digest(p) for p, o in self._u.items()
                                if o.buf and p not in self._members]
        unstable = self._unstable_for_a_live_member()
        if not (unstable or self._marks_moved) or not self._others:
            return guests + self._arm_stable(now) if guests else []
        self._marks_moved = False
        marks = []
        for peer in self._others:
            m = self._in.get((peer, MCAST))
            u = self._in.get((peer, UNICAST))
            out = self._u.get(peer)
            marks.append(Mark(peer, max(0, m.next - 1) if m else 0,
                              max(0, u.next - 1) if u else 0, out.last if out else 0,
                              out.stable if out else 0, self._start_m.get(peer, 1)))
        self.digests += 1
        digest = NDigest(self._m.last, self._m.stable, marks)
        effects: list[Effect] = [Multicast(self._others, digest, control=True), *guests]
        return effects + self._arm_stable(now)

    def _unstable_for_a_live_member(self) -> bool:
        """A packet an unsuspected member has not acked, or one waiting for window room."""
        m, suspects = self._m, self._suspects
        return bool(m.waiting or any(o.waiting or (o.buf and p not in suspects)
                                     for p, o in self._u.items())
                    or (m.buf and any(self._acked_m.get(p, 0) < m.last
                                      for p in self._others if p not in suspects)))

    def _on_digest(self, sender: NodeId, digest: NDigest, now: int) -> list[Effect]:
        if not self._allowed(sender):
            return []
        effects: list[Effect] = []
        gap = False
        m = self._stream_in(sender, MCAST)
        if digest.sent_m and m.next:
            m.known = max(m.known, digest.sent_m)
            gap = m.known >= m.next
        # the sender has not heard what we hold (our digest was lost): tell it again
        stale = m.next - 1 > digest.stable_m
        for mark in digest.marks:
            if mark.peer != self.node:
                continue
            if m.next == 0 and mark.start_m:  # we joined: the member's stream starts there
                effects += self._start(sender, m, mark.start_m)
                m.known = max(m.known, digest.sent_m)
                gap = gap or m.known >= m.next
            self._acked_m[sender] = max(self._acked_m.get(sender, 0), mark.recv_m)
            effects += self._free(self._m, None, self._stable_mark(), now)
            out = self._u.get(sender)
            if out is not None:
                effects += self._free(out, sender, mark.recv_u, now)
            if mark.sent_u:
                u = self._stream_in(sender, UNICAST)
                if u.next:
                    u.known = max(u.known, mark.sent_u)
                    gap = gap or u.known >= u.next
                    stale = stale or u.next - 1 > mark.stable_u
        if gap:
            effects += self._arm_nak(now)
        if stale and sender not in self._members:
            effects.append(self._guest_digest(sender))  # a guest hears no other digest
        elif stale:
            self._marks_moved = True
            effects += self._arm_stable(now)
        return effects

    def _stable_mark(self) -> int:
        if not self._others:
            return self._m.last
        return min(self._acked_m.get(p, 0) for p in self._others)

    def _free(self, out: OutStream, to: NodeId | None, upto: int, now: int) -> list[Effect]:
        upto = min(upto, out.last)
        while out.stable < upto:
            out.stable += 1
            item = out.buf.pop(out.stable, None)
            if item is not None:
                out.buf_bytes -= len(item[1].payload)
        effects: list[Effect] = []
        while out.waiting and not (out.buf and out.buf_bytes >= self.config.window_bytes):
            packet, control = out.waiting.popleft()
            effects += self._emit(out, to, packet, control, now)
        return effects

    # -- views -----------------------------------------------------------------------------
    def _on_view(self, view: View, now: int) -> list[Effect]:
        members = view.members
        effects: list[Effect] = []
        if self._found is None and len(members) > 1:
            # a first view numbered above 1 is one this node joined
            found = self._found = frozenset(members) if view.view_id > 1 else frozenset()
            for (sender, stream), st in self._in.items():  # heard before admission
                if stream == MCAST and st.next == 0 and sender not in found:
                    effects += self._start(sender, st, 1)
        for peer in members:
            if peer not in self._members and peer != self.node:
                self._start_m[peer] = 1 if view.view_id <= 1 else self._m.last + 1
        left = self._members - set(members)
        self._members = frozenset(members)
        self._suspects &= self._members  # as the detector forgets who a view left out
        self._others = tuple(m for m in members if m != self.node)
        if not self.open_group:
            for key in [k for k in self._in if k[0] not in self._members]:
                del self._in[key]
        effects += self._depart(left, now)
        for peer in [p for p in self._u if p not in self._members]:
            if not self.open_group:
                del self._u[peer]
                continue
            # an open group's peer may come back (a member cut off rejoins): keep the
            # stream's numbering, so that it does not restart below what the peer has
            # seen, but free what it held (a NAK for it is answered with a cancel)
            out = self._u[peer]
            out.buf.clear()
            out.buf_bytes = 0
            out.waiting.clear()
            out.stable = out.last
        for peer in [p for p in self._acked_m if p not in self._members]:
            del self._acked_m[peer]
        for peer in [p for p in self._start_m if p not in self._members]:
            del self._start_m[peer]
        return effects + self._free(self._m, None, self._stable_mark(), now)

    def _depart(self, left: frozenset[NodeId], now: int) -> list[Effect]:
        """Members a view removed: their gaps are not NAKed any more (the view change has
        settled what they sent), and after linger_us their streams are forgotten. One
        that a view holds again is NAKed again."""
        for peer in self._members:
            self._departed.pop(peer, None)
        for peer in left:
            self._departed.setdefault(peer, now + self.config.linger_us)
        if not left:
            return []
        return [SetTimer("linger", min(self._departed.values()))]

    def _forget_departed(self, now: int) -> list[Effect]:
        for peer in [p for p, at in self._departed.items() if at <= now]:
            self._forget(peer)
        if not self._departed:
            return []
        return [SetTimer("linger", min(self._departed.values()))]

    def _forget(self, peer: NodeId) -> None:
        """Drop `peer`'s inbound streams: what it sends next starts a stream afresh."""
        self._departed.pop(peer, None)
        self._suspects.discard(peer)
        for key in [k for k in self._in if k[0] == peer]:
            del self._in[key]

    # -- inspection ------------------------------------------------------------------------
    def in_flight(self) -> int:
        """Packets sent and not yet freed: some receiver may still lack them."""
        return len(self._m.buf) + sum(len(o.buf) for o in self._u.values())

    def backpressured(self) -> bool:
        """A stream's queue waiting for window room is past `max_waiting`."""
        longest = max((len(o.waiting) for o in self._u.values()), default=0)
        return max(longest, len(self._m.waiting)) >= self.config.max_waiting

    def inspect(self) -> LayerSnapshot:
        held = sum(len(st.held) for st in self._in.values())
        return LayerSnapshot(
            layer=self.name,
            clock={"multicast_last": self._m.last, "multicast_stable": self._m.stable,
                   "next": {f"{s}/{'m' if k == MCAST else 'u'}": st.next
                            for (s, k), st in self._in.items()},
                   "suspects": sorted(self._suspects)},  # not NAKed (see the rules)
            counters={
                "naks_sent": self.naks_sent, "naks_received": self.naks_received,
                "retransmissions": self.retransmissions,
                "multicast_retransmissions": self.multicast_retransmissions,
                "cancels_sent": self.cancels_sent, "skipped": self.skipped,
                "duplicates": self.duplicates, "digests": self.digests,
                "held_back_packets": self.held_back_packets, "held_above_gaps": held,
                "unstable_bytes": self._unstable_bytes(),
                "peak_unstable_bytes": self.peak_unstable_bytes,
                "refused_far": self.refused_far, "orphaned": self.orphaned,
            },
        )
