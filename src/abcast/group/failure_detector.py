"""Failure detector: heartbeats with per-peer timeouts that grow after false suspicions.

Rules: this layer sits at the very bottom of a crash-tolerant stack, so every packet
the node receives passes through it — and any packet from a peer counts as a sign of
life (JGroups FD_ALL3 does the same), so under load no heartbeat is sent at all. It
multicasts a heartbeat to each peer it has sent nothing to for a period, suspects a
peer it has heard nothing from for that peer's timeout (`Suspect`), and takes the
suspicion back when the peer speaks again (`Restore`), adding to that peer's timeout
each time: after finitely many mistakes it stops suspecting correct peers, which is
what an eventually-strong (◇S) detector promises. It never decides membership; the
layers above do, from its verdicts.

Its own pauses are not the peers' silence: a tick that fires more than a period after
it was due means this node was stalled (a collected heap, a long trace write, no CPU),
and whatever the peers sent meanwhile still waits unread — uvloop even runs due timers
before it polls the sockets. The pause is credited to every peer before the tick
judges (as Cassandra's detector ignores a long local pause); a peer that really went
quiet is then suspected that much later. In the simulator ticks are never late.

A `NotMember` from a member is a claim ("I installed a later view without you") and
one packet must not stop a node (a forged or stale one would stop it silently), so it is
checked against the view and asked back over the claimant's own link before anything
acts on it:

    NotMember(v) from a member, v <= my view   not against my view (sent before it installed
                                               it): passed up, the layers above weigh it
    NotMember(v) from a member I suspect, or   believed: NotifyExcluded (its silence, or a
      while another member's claim is held     second member, agrees), then what was held
    NotMember(v) from another member           held as its claim; Probe(nonce) to it, again
                                               every period while the claim is held
    Probe(nonce) at a node, from a member      Heartbeat: "you are in my view"
    Probe(nonce) at a node, from a non-member  NotMember(my view, nonce)
    NotMember(v, nonce of my probe)            believed: NotifyExcluded, then what it held
    Heartbeat from the claimant                refutes the claim (counted); what it held goes up
    other packets of the claimant meanwhile    held, so that none is acted on before the claim
                                               is settled (at most MAX_HELD_PER_CLAIM; more:
                                               dropped, the channel resends them)

Only a node that really holds the claimant's address gets the answer, so a forger that
can send but not receive as the claimant cannot confirm its own claim (it takes two
forged frames claiming two members, which a group secret's MACs refuse); meanwhile a
claimant that answers nothing is suspected like any silent peer: at worst a flush, never
a stall. Counters: `stale_not_member`, `refuted_not_member`, `probes`.

It adds a one-field header to every packet passing down; heartbeats are control
traffic, not protocol packets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final

from abcast.codec import Count, Header, Packet
from abcast.effects import (
    Effect,
    Multicast,
    NotifyExcluded,
    Restore,
    Send,
    SetTimer,
    Suspect,
    Up,
)
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
from abcast.ids import NodeId
from abcast.layer import Layer
from abcast.snapshot import LayerSnapshot

TICK = "tick"


class Fd(Header, frozen=True):
    """A packet of the layers above, passing through."""


class Heartbeat(Header, frozen=True):
    """I am alive (sent only on idle links)."""


class NotMember(Header, frozen=True):
    """Reply to a node that is not in my view (`view_id`) but still talks to me; `nonce`
    echoes the `Probe` it answers (0: unasked)."""

    view_id: Count
    nonce: Count = 0


class Probe(Header, frozen=True):
    """Do you still count me? (asked of a member that said `NotMember`)"""

    nonce: Count


FdHeader = Fd | Heartbeat | NotMember | Probe

#: the header of every passing packet: it has no fields, so one instance serves them all
FD: Final = Fd()
#: packets of a claimant held while its claim is asked back (above it: dropped)
MAX_HELD_PER_CLAIM: Final = 1024
#: non-members answered with `NotMember` within one period (each at most once a period)
MAX_NOTICED: Final = 1024


@dataclass(frozen=True, slots=True)
class DetectorConfig:
    """Knobs in microseconds."""

    # Defaults leave room for a loaded Python process: a busy event loop can go quiet for
    # a few hundred milliseconds (seen under load on 2 cores), and a false suspicion
    # costs a view change.
    period_us: int = 50_000  # heartbeat on an idle link at least this often
    timeout_us: int = 1_000_000  # suspect after this much silence (first guess)
    timeout_increment_us: int = 500_000  # added to a peer's timeout after each mistake

    def __post_init__(self) -> None:
        if min(self.period_us, self.timeout_us) <= 0 or self.timeout_increment_us < 0:
            raise LocalProtocolError(f"bad failure detector knobs: {self}")
        if self.timeout_us <= self.period_us:
            raise LocalProtocolError("timeout_us must exceed period_us")


@dataclass(slots=True)
class _Peer:
    last_heard: int
    last_sent: int
    timeout: int
    suspected: bool = False
    mistakes: int = 0
    #: a `NotMember` claim not yet believed: (its view id, the nonce of our probe)
    claim: tuple[int, int] | None = None
    held: list[Packet] = field(default_factory=list)  # its packets while the claim stands


@dataclass(slots=True)
class _State:
    peers: dict[NodeId, _Peer] = field(default_factory=dict)
    ticking: bool = False
    tick_due: int = 0  # when the armed tick was asked for
    view_id: int = 0
    noticed: dict[NodeId, int] = field(default_factory=dict)  # non-member -> last notice
    suspicions: int = 0  # Suspect verdicts given
    heartbeats: int = 0  # heartbeats sent
    stalls: int = 0  # ticks that found this node had been stalled
    stale_not_member: int = 0  # NotMember claims older than this node's view, dropped
    refuted_not_member: int = 0  # NotMember claims the claimant's heartbeat contradicted
    probes: int = 0  # Probes sent (and the nonce of the last one)


class FailureDetectorLayer(Layer):
    __slots__ = ("_s", "config")

    name = "fd"
    header_type = FdHeader

    def __init__(self, node: NodeId, config: DetectorConfig | None = None) -> None:
        super().__init__(node)
        self.config = config or DetectorConfig()
        self._s = _State()

    def suspects(self) -> list[NodeId]:
        return [p for p, st in self._s.peers.items() if st.suspected]

    def timeout_of(self, peer: NodeId) -> int:
        return self._s.peers[peer].timeout

    def inspect(self) -> LayerSnapshot:
        """Per peer: its timeout, whether it is suspected and how often that was wrong."""
        st = self._s
        peers = {p: {"timeout_us": q.timeout, "suspected": q.suspected, "mistakes": q.mistakes}
                 for p, q in sorted(st.peers.items())}
        return LayerSnapshot(
            layer=self.name, phase="suspecting" if self.suspects() else "steady",
            clock={"view_id": st.view_id, "peers": peers},
            counters={"suspicions": st.suspicions,
                      "mistakes": sum(q.mistakes for q in st.peers.values()),
                      "heartbeats": st.heartbeats, "stalls": st.stalls,
                      "stale_not_member": st.stale_not_member,
                      "refuted_not_member": st.refuted_not_member, "probes": st.probes})

    def handle(self, event: Event, now: int) -> list[Effect]:
        # Every packet of the node passes here twice (down and up), so the per-packet
        # events are dispatched by exact type first; everything else, subclasses
        # included, goes through `_handle_other`. Hearing and sending only stamp a time:
        # no timer moves per packet, the tick compares the stamps when it fires.
        kind = type(event)
        if kind is Received:
            received: Received = event  # type: ignore[assignment]  # the type test above
            sender = received.sender
            st = self._s.peers.get(sender)
            if (st is not None and not st.suspected and st.claim is None
                    and type(received.header) is Fd):
                st.last_heard = now
                return [Up(sender, received.inner)]
            return self._heard(sender, received.header, received.inner, now)
        if kind is SendRequested:
            request: SendRequested = event  # type: ignore[assignment]
            to = request.to
            st = self._s.peers.get(to)
            if st is not None:
                st.last_sent = now
            return [Send(to, FD, request.packet, request.control)]
        if kind is MulticastRequested:
            multicast: MulticastRequested = event  # type: ignore[assignment]
            peers = self._s.peers
            for peer in multicast.to:
                st = peers.get(peer)
                if st is not None:
                    st.last_sent = now
            return [Multicast(multicast.to, FD, multicast.packet, multicast.control)]
        return self._handle_other(event, now)

    def pass_up(self, sender: NodeId, header: object, now: int) -> bool:
        """`handle`'s fast path for a member's packet as the stack's shortcut (see
        `Layer.pass_up`): a sign of life, handed up."""
        st = self._s.peers.get(sender)
        if st is None or st.suspected or st.claim is not None or type(header) is not Fd:
            return False
        st.last_heard = now
        return True

    def pass_down(self, to: tuple[NodeId, ...], now: int) -> object | None:
        """`handle` of a send or multicast as the stack's shortcut (see
        `Layer.pass_down`): the sends are stamped, the packets wrapped."""
        peers = self._s.peers
        for peer in to:
            st = peers.get(peer)
            if st is not None:
                st.last_sent = now
        return FD

    def _handle_other(self, event: Event, now: int) -> list[Effect]:
        match event:
            case SendRequested(to, packet, control):
                self._sent(to, now)
                return [Send(to, FD, packet, control)]
            case MulticastRequested(to, packet, control):
                for peer in to:
                    self._sent(peer, now)
                return [Multicast(to, FD, packet, control)]
            case Received(sender, header, inner):
                return self._heard(sender, header, inner, now)
            case TimerFired(key) if key == TICK:
                return self._tick(now)
            case ViewInstalled(view):
                self._s.view_id = view.view_id
                return self._install(view.others(self.node), now)
            case Suspected() | Restored() | Excluded() | Forgotten():
                return []
            case _:
                raise LocalProtocolError(f"{self.name} cannot handle {event!r}")

    def _install(self, others: tuple[NodeId, ...], now: int) -> list[Effect]:
        old = self._s.peers
        self._s.peers = {
            p: old.get(p) or _Peer(now, now, self.config.timeout_us) for p in others
        }
        if self._s.peers and not self._s.ticking:
            self._s.ticking = True
            self._s.tick_due = now + self.config.period_us
            return [SetTimer(TICK, self._s.tick_due)]
        return []

    def _sent(self, peer: NodeId, now: int) -> None:
        st = self._s.peers.get(peer)
        if st is not None:
            st.last_sent = now

    def _heard(self, sender: NodeId, header: object, inner: Packet, now: int) -> list[Effect]:
        st = self._s.peers.get(sender)
        if st is None:
            return self._from_stranger(sender, header, inner, now)
        if isinstance(header, NotMember):
            return self._claimed(sender, st, header, now)
        effects = self._alive(sender, st, now)
        if isinstance(header, Probe):
            effects.append(Send(sender, Heartbeat(), control=True))
        elif st.claim is not None and isinstance(header, Heartbeat):
            st.claim = None  # it still counts me: the claim was stale or forged
            self._s.refuted_not_member += 1
            effects += [Up(sender, packet) for packet in st.held]
            st.held = []
        elif st.claim is not None and isinstance(header, Fd):
            if len(st.held) < MAX_HELD_PER_CLAIM:
                st.held.append(inner)
            return effects
        match header:
            case Fd():
                effects.append(Up(sender, inner))
            case Heartbeat() | Probe():
                pass
            case _:
                raise RemoteProtocolError(f"{sender} sent unexpected header {header!r}")
        return effects

    def _alive(self, sender: NodeId, st: _Peer, now: int) -> list[Effect]:
        """`sender` spoke: a sign of life, and a suspicion taken back."""
        st.last_heard = now
        if not st.suspected:
            return []
        st.suspected = False
        st.mistakes += 1
        st.timeout += self.config.timeout_increment_us
        return [Restore(sender)]

    def _claimed(
        self, sender: NodeId, st: _Peer, header: NotMember, now: int
    ) -> list[Effect]:
        """A member says it installed a later view without me: see the rules above."""
        view_id = header.view_id
        if view_id <= self._s.view_id:
            # Not against my view (a member that has not installed it yet): passed up as it
            # always was, the layers above weigh it (a joiner or a leaver learns from it).
            self._s.stale_not_member += 1
            return [*self._alive(sender, st, now), NotifyExcluded(sender, view_id)]
        echoed = st.claim is not None and header.nonce == st.claim[1]
        others = [p for p, q in self._s.peers.items() if q.claim is not None and p != sender]
        if st.suspected or echoed or others:
            # its silence, its answer on its own link, or another member's claim agrees
            released: list[Effect] = []
            for peer in (sender, *others):
                claimant = self._s.peers[peer]
                claimant.claim = None
                released += [Up(peer, p) for p in claimant.held]
                claimant.held = []
            life = [] if echoed else self._alive(sender, st, now)
            return [*life, NotifyExcluded(sender, view_id), *released]
        if st.claim is None:  # not a sign of life: a forger could keep a dead peer up
            st.claim = (view_id, 0)
            return self._probe(sender, st, now)
        return []

    def _probe(self, sender: NodeId, st: _Peer, now: int) -> list[Effect]:
        """Ask the claimant over its own link; the nonce is a counter mixed with the
        time, so that a forger that cannot read the answer cannot guess it."""
        assert st.claim is not None
        self._s.probes += 1
        view_id, nonce = st.claim
        if not nonce:  # one nonce per claim: a late answer to an earlier probe still counts
            nonce = ((now << 20) ^ (self._s.probes * 0x9E3779B1)) & (2**63 - 1) or 1
            st.claim = (view_id, nonce)
        return [Send(sender, Probe(nonce), control=True)]

    def _reprobe(self, now: int) -> list[Effect]:
        """Claims still held: ask again (a probe or its answer may have been lost)."""
        effects: list[Effect] = []
        for peer, st in self._s.peers.items():
            if st.claim is not None:
                effects += self._probe(peer, st, now)
        return effects

    def _from_stranger(
        self, sender: NodeId, header: object, inner: Packet, now: int
    ) -> list[Effect]:
        """A packet from a node outside the view: answered with `NotMember`, dropped."""
        if isinstance(header, NotMember):
            return []  # a non-member's verdict about me means nothing
        if isinstance(header, Probe):  # answered every time: it carries its nonce
            return [Send(sender, NotMember(self._s.view_id, header.nonce), control=True)]
        return self._not_a_member(sender, now)

    def _not_a_member(self, sender: NodeId, now: int) -> list[Effect]:
        """Tell a node outside my view so — at most once a period, however much it sends —
        so that a member the group removed while it was cut off learns it."""
        last = self._s.noticed.get(sender)
        if last is not None and now - last < self.config.period_us:
            return []
        if last is None and len(self._s.noticed) >= MAX_NOTICED:
            self._forget_notices(now)
            if len(self._s.noticed) >= MAX_NOTICED:
                return []  # that many strangers within a period: the rest go unanswered
        self._s.noticed[sender] = now
        return [Send(sender, NotMember(self._s.view_id), control=True)]

    def _forget_notices(self, now: int) -> None:
        """A notice older than a period limits nothing: forget it (a departed node is not
        remembered for ever)."""
        period = self.config.period_us
        self._s.noticed = {n: t for n, t in self._s.noticed.items() if now - t < period}

    def _tick(self, now: int) -> list[Effect]:
        if self._s.noticed:
            self._forget_notices(now)
        paused = now - self._s.tick_due
        if paused > self.config.period_us:  # this node was stalled: see the rules above
            self._s.stalls += 1
            for st in self._s.peers.values():
                st.last_heard = min(now, st.last_heard + paused)
        effects = self._reprobe(now)
        idle = [p for p, st in self._s.peers.items() if now - st.last_sent >= self.config.period_us]
        for peer in idle:
            self._s.peers[peer].last_sent = now
            effects.append(Send(peer, Heartbeat(), control=True))
        self._s.heartbeats += len(idle)
        for peer, st in self._s.peers.items():
            if not st.suspected and now - st.last_heard > st.timeout:
                st.suspected = True
                self._s.suspicions += 1
                effects.append(Suspect(peer))
        if self._s.peers:
            self._s.tick_due = now + self.config.period_us
            effects.append(SetTimer(TICK, self._s.tick_due))
        else:
            self._s.ticking = False
        return effects
