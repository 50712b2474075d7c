"""Chandra-Toueg atomic broadcast: a sequence of consensus instances, each deciding the
next batch of message ids (and membership changes); every node delivers in instance order.

Phases (`phase`: this node's place in the group; the steps are abcast.consensus.lifecycle's):

    phase      event                                    next       what it does
    member     JoinRequested (alone, fresh)             joining    MJoin to a contact
    joining    MWelcome of this incarnation             member     InstallState, InstallView,
                                                                   its queued broadcasts
    joining    JoinAbandoned (its join timed out)       stopped    MWithdraw to every contact
    member     LeaveRequested                           leaving    MLeave to the members once
                                                                   its broadcasts are decided
    member*    a decision removes it                    member*    (removed) delivers up to it
    leaving    delivers the batch removing it           departing  lingers linger_us
    member*    delivers the batch removing it           joining    rejoin: asks again (a new
               (not a graceful leave)                              incarnation, same ids)
                                                        expelled   no rejoin: lingers linger_us
    member*    Excluded by a later view (a leaver       joining    rejoin: as above
               first waits 2·linger_us for the batch)   stopped    no rejoin: InstallView
                                                                   without it
    departing  DEPART timer                             stopped    InstallView without it
    expelled   DEPART timer                             stopped    InstallView without it

    (member* = member or leaving; a leaver removed with broadcasts of its own undecided,
    or that gave up waiting for the batch, is `cut_off`: removed, not departed)

Only member* nodes run instances; a joining node keeps what members send it and answers
nothing until its welcome.

Rules. Messages are multicast by their origin (`CtData`), kept by every receiver
(abcast.consensus.bodies). Instance k runs the ◇S consensus of Chandra and Toueg with a
rotating coordinator, `members[(k + r − 2) mod n]` in round r, and majority quorums of
the membership in force at instance k:

- round 1 takes the thesis's shortcut: its coordinator proposes what it holds directly;
- a node adopts a proposal (estimate := value, ts := r) and acks it only once it holds
  every body in it, so a decided batch's bodies live on at a majority;
- a coordinator that gathers a majority of acks decides and sends `Decide` to all;
- a node that suspects its round's coordinator, hears that another has moved on to a
  later round, or waits `nudge_us` for a proposal while it has something to propose,
  moves on and sends its estimate to every member (one that has decided answers with the
  decision); the coordinator of that round waits for a majority of estimates and
  proposes the one adopted latest (else what it holds) — the locking that keeps two
  rounds from deciding differently;
- a message about an old round or instance gets the answer it needs (`Nack`, `Decide`);
  one about a later instance waits until this node gets there.

Batches respect FIFO (an origin's seq s is proposed only after s−1 is decided or earlier
in the batch). After its ids a batch may remove members (suspected ones, or leavers once
their broadcasts are decided) and add joiners (abcast.consensus.membership): every node
changes view at that point of the order, so views are totally ordered with messages and
virtual synchrony holds by construction — members that install v and v+1 delivered the
same batches in v, and every message is delivered in the same view everywhere (not
necessarily the one it was sent in: it may be decided after a view change). What a
node does about its own membership — joining through a contact and an `MWelcome` (view,
snapshot, cut), leaving, and being removed — lives in abcast.consensus.lifecycle, with
the membership layer's records, knobs and rules (abcast.membership). Bodies
and decisions are collected once every member has delivered them (`stable`, piggybacked
on proposals from the acks' `delivered`).

Partitions: only a side with a majority of the membership decides; the other delivers
nothing, and a side that suspects a majority proposes no removals. A partition shorter
than the detector's timeout heals unnoticed; a longer one gets the minority removed.
Its nodes hear of it once the partition heals (the decision, or a member's "not in my
view") and, with `rejoin` (the default), ask to join again: the group admits them by
consensus like any joiner, with a snapshot, and they send again their broadcasts it had
not decided. A member falsely suspected (its packets lost or late) comes back the same
way. Without `rejoin` they stop (the Isis rule). A member back is no longer suspected
here: the detector watches it afresh.

Claims integrity, validity, agreement, uniform agreement, fifo, total order and virtual
synchrony with f < n/2 crashes. Failure-free and unbatched it costs 4(n−1) packets per
broadcast: data, propose, ack and decide, each n−1.
"""

from __future__ import annotations

from collections import deque

from abcast.codec import Packet
from abcast.consensus import lifecycle
from abcast.consensus.bodies import ANYONE, BodyStore
from abcast.consensus.lifecycle import (
    DELIVERING,
    DEPART,
    FETCH,
    GIVE_UP,
    JOINING,
    LEAVING,
    MEMBER,
    NUDGE,
    STOPPED,
    Phase,
)
from abcast.consensus.membership import EMPTY_BATCH, Batch, MembershipBook, apply_batch
from abcast.consensus.messages import (
    Ack,
    Bodies,
    CtData,
    CtHeader,
    Decide,
    Estimate,
    Fetch,
    Nack,
    Propose,
)
from abcast.consensus.rounds import (
    INSTANCE_HEADERS,
    Coordination,
    DecidedBatch,
    DecisionLog,
    PendingAdopt,
    batch_of,
    decide,
    estimate,
    propose,
)
from abcast.effects import (
    Deliver,
    Effect,
    InstallView,
    Multicast,
    Send,
    SetTimer,
    TakeSnapshot,
)
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.events import (
    BroadcastRequested,
    Event,
    Excluded,
    JoinAbandoned,
    JoinRequested,
    LeaveRequested,
    Received,
    Restored,
    SnapshotTaken,
    Suspected,
    TimerFired,
    ViewInstalled,
)
from abcast.ids import MsgId, NodeId, View, sorted_nodes
from abcast.layer import Layer
from abcast.membership import MembershipConfig
from abcast.membership.contacts import JoinContacts
from abcast.membership.state import JOIN_RETRY
from abcast.membership.wire import MJoin, MJoinFwd, MLeave, MWelcome, MWithdraw
from abcast.snapshot import LayerSnapshot

__all__ = ["EMPTY_BATCH", "Batch", "ChandraToueg"]


class ChandraToueg(Layer):
    name = "chandra-toueg"
    header_type = CtHeader

    def __init__(
        self, node: NodeId, batch: int | None = None, fetch_delay_us: int = 5_000,
        linger_us: int = 1_000_000, nudge_us: int = 500_000,
        *, rejoin: bool = True, membership: MembershipConfig | None = None,
    ) -> None:
        super().__init__(node)
        if batch is not None and batch < 1:
            raise LocalProtocolError("batch must be >= 1")
        self.max_batch = batch
        # A proposal can overtake the data it names (the channel does not order links):
        # wait this long for the bodies before asking for them.
        self.fetch_delay_us = fetch_delay_us
        self.fetch_retry_us = 40 * fetch_delay_us
        # join_retry_us: the membership layer's (the other knobs are its flush's)
        self.config = membership or MembershipConfig()
        self.linger_us = linger_us
        self.retain_us = 10 * linger_us
        self.nudge_us = nudge_us
        # `rejoin`: a member the group removed asks to join again (else it stops). On by
        # default: this ordering's only stack, the registry's, is open (detector and
        # channel let a non-member's packets up), which is what a rejoin needs.
        self.rejoin = rejoin
        self.now = 0
        # -- this node's own membership (the phase table above; abcast.consensus.lifecycle)
        self.phase: Phase = MEMBER
        self.view: View | None = None  # the view delivered so far (what the app sees)
        self.members: tuple[NodeId, ...] = ()  # the view consensus runs in (may be ahead)
        self.cut_off = False  # removed before our leave was decided (the driver reads it)
        self.rejoins = 0  # times this node asked to come back after a removal
        self.book = MembershipBook(node)
        self.contacts: JoinContacts | None = None
        self.ask = 0
        self.queued: list[tuple[int, bytes]] = []
        self.leave_after_join = False
        self.leave_sent = False
        self.last_seq = 0
        self.final_view: View | None = None
        self.give_up_armed = False
        self.stale_welcomes_upto = 0
        self._suspects: set[NodeId] = set()
        self.restart_consensus()

    def restart_consensus(self) -> None:
        """Forget every instance, body and decision: a fresh node's consensus state."""
        self.store = BodyStore(self.node)  # message bodies, kept until stable; fetches
        # consensus state for instance self.k
        self.k = 1
        self._round = 1
        self._estimate: Batch | None = None
        self._ts = 0
        self._coord: Coordination | None = None
        self._adopt: PendingAdopt | None = None
        self.later: dict[int, list[tuple[NodeId, object]]] = {}  # instances not reached yet
        self.log = DecisionLog()  # decisions kept until stable, to answer stragglers
        self.to_deliver: deque[DecidedBatch] = deque()
        self.delivered_upto = 0
        self._nudge_for: tuple[int, int] | None = None  # (instance, round) of the armed nudge
        self._fetch_armed = False

    # -- introspection -------------------------------------------------------------------
    @property
    def joining(self) -> bool:
        return self.phase == JOINING

    @property
    def leaving(self) -> bool:
        return self.phase == LEAVING

    @property
    def stopped(self) -> bool:
        return self.phase == STOPPED

    @property
    def removed(self) -> bool:
        """A decision this node has reached removed it (it delivers up to there only)."""
        return self.phase != JOINING and self.node not in self.members

    def bodies_held(self) -> int:
        return self.store.held()

    def coordinator(self, k: int, r: int) -> NodeId:
        return self.members[(k + r - 2) % len(self.members)]

    @property
    def majority(self) -> int:
        return self.book.majority(self.members)

    def inspect(self) -> LayerSnapshot:
        view = self.view
        phase = f"{self.phase}, removed" if self.phase in DELIVERING and self.removed \
            else self.phase
        clock = {"view_id": view.view_id if view is not None else 0,
                 "members": list(self.members), "instance": self.k, "round": self._round,
                 "delivered_upto": self.delivered_upto, "suspects": sorted(self._suspects),
                 "pending_joins": list(self.book.joiners),
                 "pending_leaves": sorted(self.book.leavers)}
        return LayerSnapshot(
            layer=self.name, phase=phase, clock=clock,
            counters={"bodies_held": self.store.held(), "decided_waiting": len(self.to_deliver),
                      "rejoins": self.rejoins,
                      "withdrawals_refused": self.book.refused})

    # -- events --------------------------------------------------------------------------
    def handle(self, event: Event, now: int) -> list[Effect]:
        self.now = now
        match event:
            case ViewInstalled(view):
                return self._first_view(view)
            case _ if self.phase == STOPPED:
                return []
            case BroadcastRequested(seq, payload):
                return self._broadcast(seq, payload) + self.settle()
            case Received(sender, header, inner) if self.phase == JOINING:
                return lifecycle.receive_joining(self, sender, header, inner)
            case Received(sender, header, inner):
                return self._receive_member(sender, header, inner) + self.settle()
            case Suspected(node):
                self._suspects.add(node)  # bodies asked of it are asked of everyone now
                return self._fetch(self.store.sources_lost(node), ANYONE) + self.settle()
            case Restored(node):
                if not self.book.withdrew(node):  # a joiner that withdrew stays suspected
                    self._suspects.discard(node)
                return []
            case Excluded(by, view_id) if lifecycle.excluded_by(self, by, view_id):
                return lifecycle.on_excluded(self)  # removed in an instance this node missed
            case Excluded():
                return []
            case TimerFired(key) if key == NUDGE:
                return self._nudge() + self.settle()
            case TimerFired(key) if key == GIVE_UP:
                return lifecycle.give_up(self)
            case JoinRequested(contacts):
                return lifecycle.join(self, contacts)
            case JoinAbandoned():
                return lifecycle.abandon(self) + self.settle()
            case LeaveRequested():
                return lifecycle.leave(self) + self.settle()
            case SnapshotTaken(token, state):
                welcomes = self.book.welcome(token, state, self.store.above)
                return [Send(joiner, header) for joiner, kept in welcomes
                        for header in kept.packets()]
            case TimerFired(key) if key == FETCH:
                self._fetch_armed = False
                return self._fetch_missing() + self.settle()
            case TimerFired(key) if key == JOIN_RETRY:
                return lifecycle.ask_again(self)
            case TimerFired(key) if key == DEPART:
                return lifecycle.depart(self)
            case TimerFired(_):
                return []
            case _:
                raise LocalProtocolError(f"{self.name} cannot handle {event!r}")

    def _first_view(self, view: View) -> list[Effect]:
        # Later views are decided here and installed by this layer itself; the only
        # view that comes from outside is the initial one.
        if self.view is None:
            self.view, self.members = view, view.members
        return []

    def _broadcast(self, seq: int, payload: bytes) -> list[Effect]:
        if self.view is None:
            raise LocalProtocolError(f"{self.name} on {self.node} has no view yet")
        if self.phase in (LEAVING, lifecycle.DEPARTING):
            raise LocalProtocolError(f"{self.node} is leaving the group and cannot broadcast")
        self.last_seq = max(self.last_seq, seq)
        if self.removed and not self.rejoin:
            self.cut_off = True  # removed: we stop in a moment, and this is lost with us
            return []
        if self.phase == JOINING or self.removed:
            self.queued.append((seq, payload))  # multicast once the group has admitted us
            return []
        self.store.put(self.node, seq, payload)
        others = tuple(m for m in self.members if m != self.node)
        return [Multicast(others, CtData(seq), Packet((), payload))]

    def settle(self) -> list[Effect]:
        """Run to a fixed point: replay messages that waited for the instance this node
        has now reached, deliver, propose, move rounds. A loop, not recursion, because a
        burst of decisions can be thousands long."""
        effects: list[Effect] = []
        while self.phase not in (STOPPED, JOINING):
            k = self.k
            for sender, header in self.later.pop(k, []):
                if sender in self.members:  # it may have been sent before we knew it
                    effects += self._receive(sender, header, Packet())
            effects += self._progress()
            if self.k == k and self.k not in self.later:
                break
        return effects

    # -- receiving -----------------------------------------------------------------------
    def _receive_member(self, sender: NodeId, header: object, inner: Packet) -> list[Effect]:
        match header:
            case MJoin(ask):
                return lifecycle.on_join(self, sender, sender, ask)
            case MJoinFwd(joiner, ask):
                if sender not in self.members:
                    return []  # only a member forwards
                return lifecycle.on_join(self, sender, joiner, ask)
            case MWithdraw(ask):
                return self._on_withdraw(sender, ask)
            case MLeave() if sender in self.members:
                self.book.note_leave(sender, 0)  # its broadcasts are decided (lifecycle)
                return []
            case Fetch() | Bodies():
                return self._receive(sender, header, inner)  # the removed may need them too
            case Propose(k) | Estimate(k) if k < self.k:
                return self._remind(sender, k)  # a straggler, maybe removed since
            case _ if self.removed:
                return []
            case _ if isinstance(header, INSTANCE_HEADERS) and header.k > self.k:
                # a joiner may speak in an instance this node has not reached yet
                self.later.setdefault(header.k, []).append((sender, header))
                return []
            case _ if sender not in self.members:
                return []
            case _:
                return self._receive(sender, header, inner)

    def _receive(self, sender: NodeId, header: object, inner: Packet) -> list[Effect]:
        match header:
            case CtData(seq):
                self.store.put(sender, seq, inner.payload)
                return []
            case Fetch(ids):
                items = self.store.answer(ids)
                return [Send(sender, Bodies(items))] if items else []
            case Bodies(items):
                for origin, seq, body in items:
                    self.store.put(origin, seq, body)
                return []
            case Propose(k) | Ack(k) | Nack(k) | Estimate(k) | Decide(k) if k > self.k:
                self.later.setdefault(k, []).append((sender, header))
                return []
            case Decide(k, ids, remove, add):
                return [] if k < self.k else self._decide(batch_of(ids, remove, add), sender)
            case Propose(k) | Estimate(k) if k < self.k:
                return self._remind(sender, k)
            case Ack(k) | Nack(k) if k < self.k:
                if isinstance(header, Ack):
                    self._note_delivered(sender, header.delivered)
                return []
            case Propose(_, r, ids, remove, stable, add):
                self._collect_garbage(stable)
                return self._on_propose(sender, r, batch_of(ids, remove, add))
            case Ack(_, r, delivered):
                self._note_delivered(sender, delivered)
                return self._on_ack(sender, r)
            case Nack(_, r):
                return self._on_nack(sender, r)
            case Estimate(_, r, ids, remove, ts, delivered, add):
                self._note_delivered(sender, delivered)
                return self._on_estimate(sender, r, batch_of(ids, remove, add), ts)
            case MWelcome():
                return []  # a second welcome (we asked more than once)
            case _:
                raise RemoteProtocolError(f"{sender} sent unexpected header {header!r}")

    def _on_withdraw(self, joiner: NodeId, ask: int) -> list[Effect]:
        effects = lifecycle.on_withdraw(self, joiner, ask)
        if not self.book.withdrew(joiner):
            return effects
        self._suspects.add(joiner)  # removed in a later batch; no coordinator of ours
        coord = self._coord  # the majority may be 1 now: our own ack may be enough
        if coord is not None and coord.proposal is not None and self.node in coord.acks:
            effects += self._on_ack(self.node, self._round)
        return effects

    # -- bodies --------------------------------------------------------------------------
    def _fetch(self, missing: list[MsgId], source: NodeId) -> list[Effect]:
        return self.store.fetch(missing, source, self.members, self._suspects)

    def _want_bodies(self) -> list[Effect]:
        if self._fetch_armed:
            return []
        self._fetch_armed = True
        return [SetTimer(FETCH, self.now + self.fetch_delay_us)]

    def _fetch_missing(self) -> list[Effect]:
        wanted: list[tuple[list[MsgId], NodeId]] = []
        if self._adopt is not None:
            wanted.append((self.store.missing(self._adopt.batch.ids), self._adopt.fetch_from))
        wanted += [(self.store.missing(d.batch.ids), d.source) for d in self.to_deliver]
        effects = self.store.refetch(wanted, self.members, self._suspects)
        if self.store.fetching:
            self._fetch_armed = True
            effects.append(SetTimer(FETCH, self.now + self.fetch_retry_us))
        return effects

    # -- proposing -----------------------------------------------------------------------
    def _proposable(self) -> Batch:
        """What this node would propose: held bodies of members, contiguous per origin
        after the decided ones (FIFO), and the membership changes it knows of."""
        ids, next_after, cut_short = self.store.runs(self.members, self.max_batch)
        remove, add = self.book.changes(self.members, next_after, self._suspects, cut_short)
        return Batch(tuple(ids), remove, add)

    def _active(self) -> bool:
        """Whether this node needs instance k to decide (so it must not wait forever on a
        coordinator it suspects)."""
        return bool(self._proposable()) or self._adopt is not None or self._estimate is not None

    def _progress(self) -> list[Effect]:
        """Re-check everything that may have been waiting for a body or a proposal."""
        effects = self.deliver_ready()
        if self.phase not in DELIVERING or self.removed:
            return effects
        if self._adopt is not None and not self.store.missing(self._adopt.batch.ids):
            effects += self._adopt_now()
        coordinator = self.coordinator(self.k, self._round)
        if coordinator == self.node:
            effects += self._propose_if_ready()
        elif coordinator in self._suspects and self._active():
            effects += self._next_round(self._round + 1)
        elif self._nudge_for is None:
            self._nudge_for = (self.k, self._round)
            effects.append(SetTimer(NUDGE, self.now + self.nudge_us))
        return effects

    def _nudge(self) -> list[Effect]:
        """A live coordinator may have nothing to propose while this node has (a joiner
        lacks the bodies sent before it joined), or its decision may have died with it:
        after `nudge_us` in one round, move on to the next, whose coordinator hears this
        node's estimate (and a member that has decided answers with the decision)."""
        waited = self._nudge_for
        self._nudge_for = None
        if waited != (self.k, self._round) or self._adopt is not None or not self._active():
            return []
        return self._next_round(self._round + 1)

    def _propose_if_ready(self) -> list[Effect]:
        coord = self._coord if self._coord is not None else self._new_coordination()
        if coord.proposal is not None:
            return []
        source = self.node
        if self._round == 1:
            choice = self._proposable()
        else:
            if self.node not in coord.estimates:
                own = self._estimate if self._estimate is not None else self._proposable()
                coord.estimates[self.node] = (own, self._ts)
            if len(coord.estimates) < self.majority:
                return []
            voters = sorted_nodes(list(coord.estimates))
            latest = max(voters, key=lambda n: coord.estimates[n][1])
            if coord.estimates[latest][1] > 0:  # locked: a majority may have decided it
                choice, source = coord.estimates[latest][0], latest
            else:
                choice = self._proposable()
                for voter in voters:
                    if choice:
                        break
                    choice, source = coord.estimates[voter][0], voter
        if not choice:
            return []
        coord.proposal = choice
        stable = self._stable()
        self._collect_garbage(stable)
        others = tuple(m for m in self.members if m != self.node)
        header = propose(self.k, self._round, choice, stable)
        effects: list[Effect] = [Multicast(others, header)]
        return effects + self._on_propose(self.node, self._round, choice, source)

    def _new_coordination(self) -> Coordination:
        self._coord = Coordination()
        return self._coord

    # -- the rounds ----------------------------------------------------------------------
    def _on_propose(
        self, sender: NodeId, r: int, batch: Batch, source: NodeId | None = None
    ) -> list[Effect]:
        if sender != self.coordinator(self.k, r):
            raise RemoteProtocolError(f"{sender} proposed in round {r} of instance {self.k}"
                                      f" coordinated by {self.coordinator(self.k, r)}")
        if r < self._round:
            return [Send(sender, Nack(self.k, r))]
        effects: list[Effect] = self._enter_round(r) if r > self._round else []
        self._adopt = PendingAdopt(r, batch, sender, source or sender)
        if self.store.missing(batch.ids):
            return effects + self._want_bodies()
        return effects + self._adopt_now()

    def _adopt_now(self) -> list[Effect]:
        adopt = self._adopt
        assert adopt is not None
        self._adopt = None
        self._estimate, self._ts = adopt.batch, adopt.round
        if adopt.coordinator == self.node:
            return self._on_ack(self.node, adopt.round)
        return [Send(adopt.coordinator, Ack(self.k, adopt.round, self.delivered_upto))]

    def _on_ack(self, sender: NodeId, r: int) -> list[Effect]:
        coord = self._coord
        if r != self._round or coord is None or coord.proposal is None:
            return []
        coord.acks.add(sender)
        if len(coord.acks) < self.majority:
            return []
        decided = coord.proposal
        others = tuple(m for m in self.members if m != self.node)
        effects: list[Effect] = [Multicast(others, decide(self.k, decided))]
        return effects + self._decide(decided, self.node)

    def _on_nack(self, sender: NodeId, r: int) -> list[Effect]:
        coord = self._coord
        if r != self._round or coord is None:
            return []
        coord.nacks.add(sender)
        if len(self.members) - len(coord.nacks) < self.majority:
            return self._next_round(self._round + 1)
        return []

    def _on_estimate(self, sender: NodeId, r: int, batch: Batch, ts: int) -> list[Effect]:
        # Someone has moved on to round r: follow. Otherwise nodes content with a live
        # coordinator of an earlier round (heard across a partition the others suspected)
        # could leave round r without the majority of estimates it needs.
        effects = self._next_round(r) if r > self._round else []
        if self.coordinator(self.k, r) != self.node or r < self._round:
            return effects  # the copy every member gets; or a round this node has left
        coord = self._coord if self._coord is not None else self._new_coordination()
        coord.estimates[sender] = (batch, ts)
        return effects + self._propose_if_ready()

    def _enter_round(self, r: int) -> list[Effect]:
        """Abandon the current round (telling its coordinator) for round r."""
        old = self.coordinator(self.k, self._round)
        effects: list[Effect] = []
        if old != self.node and old not in self._suspects:
            effects.append(Send(old, Nack(self.k, self._round)))
        self._round = r
        self._coord = None
        self._adopt = None
        return effects

    def _next_round(self, r: int) -> list[Effect]:
        """Move to round r — or past it, over coordinators this node suspects — and send
        its coordinator this node's estimate."""
        while self.coordinator(self.k, r) in self._suspects:
            r += 1
        effects = self._enter_round(r)
        coordinator = self.coordinator(self.k, r)
        mine = self._estimate if self._estimate is not None else self._proposable()
        header = estimate(self.k, self._round, mine, self._ts, self.delivered_upto)
        # Every member gets it, not only the coordinator: a member that already decided
        # instance k answers with the decision. Without that, a node whose Decide was
        # lost with its crashed coordinator would wait for estimates nobody sends. Suspects
        # get it too: a suspicion may be a partition, and they must be able to follow.
        others = tuple(m for m in self.members if m != self.node)
        effects.append(Multicast(others, header))
        if coordinator == self.node:
            coord = self._new_coordination()
            coord.estimates[self.node] = (mine, self._ts)
            effects += self._propose_if_ready()
        return effects

    def _remind(self, sender: NodeId, k: int) -> list[Effect]:
        decided = self.log.get(k)
        if decided is None:
            return []
        return [Send(sender, decide(k, decided))]

    # -- deciding and delivering ---------------------------------------------------------
    def _decide(self, batch: Batch, source: NodeId) -> list[Effect]:
        k = self.k
        self.log.record(k, batch)
        self.store.decided(batch.ids)
        before = self.members
        self.members = apply_batch(before, batch)
        for gone in before:
            if gone not in self.members:  # what it sent and we did not decide is dropped
                if gone != self.node:  # a rejoiner sends its own again
                    self.store.drop_undecided(gone)
                # ...and the decisions it may still lack are kept a while to remind it
                self.log.retain(gone, self.now + self.retain_us)
        self.book.decided(k, batch, before, self.members, self.store.decided_next)
        for joiner in self.members:
            if joiner not in before:  # it starts from the state after instance k
                self.log.note(joiner, k)
                # A member removed as suspected and back: the detector watches it afresh
                # (and says nothing of the old suspicion), so must this view of it.
                self._suspects.discard(joiner)
                if self.book.withdrew(joiner):  # it gave up before this decision came
                    self._suspects.add(joiner)
        self.to_deliver.append(DecidedBatch(k, batch, source, before, self.members))
        self.k += 1
        self._round = 1
        self._estimate, self._ts = None, 0
        self._coord = None
        self._adopt = None
        # A removed node still delivers up to here (a leaver must: its last view owes it
        # everything before the change), then installs its view without itself — unless
        # bodies it lacks were collected meanwhile: it gives up after a while.
        effects = self._want_bodies() if self.store.missing(batch.ids) else []
        effects += lifecycle.ask_to_leave(self)  # a leaver whose last broadcast this was
        if self.node in before and self.removed:
            self.give_up_armed = True
            effects.append(SetTimer(GIVE_UP, self.now + 2 * self.linger_us))
        return effects

    def deliver_ready(self) -> list[Effect]:
        effects: list[Effect] = []
        while self.to_deliver and self.phase in DELIVERING:
            decided = self.to_deliver[0]
            batch = decided.batch
            if self.store.missing(batch.ids):
                break
            self.to_deliver.popleft()
            effects.extend(Deliver(m.origin, m.seq, self.store.body(m)) for m in batch.ids)
            self.delivered_upto = decided.k
            if decided.after != decided.before and self.view is not None:
                effects += self._change_view(decided)
        return effects

    def _change_view(self, decided: DecidedBatch) -> list[Effect]:
        assert self.view is not None
        view = View(self.view.view_id + 1, decided.after)
        if self.node not in decided.after:
            return lifecycle.left_out(self, view)
        self.view = view
        effects: list[Effect] = [InstallView(view)]
        token = self.book.draft(decided.k, decided.before, self.view)
        if token is not None:  # the state right after the deliveries of instance k
            effects.append(TakeSnapshot(token))
        return effects

    # -- stability -----------------------------------------------------------------------
    def _note_delivered(self, node: NodeId, delivered: int) -> None:
        self.log.note(node, delivered)
        if self.book.welcomes:
            self.book.joiner_progress(node, delivered)

    def _stable(self) -> int:
        return self.log.stable(self.members, self.node, self.delivered_upto, self.now)

    def _collect_garbage(self, stable: int) -> None:
        for batch in self.log.collect(min(stable, self.delivered_upto)):
            self.store.forget(batch.ids)
