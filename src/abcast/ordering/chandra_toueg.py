"""Chandra-Toueg atomic broadcast: a sequence of consensus instances, each deciding the
next batch of message ids; every node delivers the batches in instance order.

Rules. Messages are multicast by their origin (`CtData`) and kept by every receiver.
Instance k runs the ◇S consensus of Chandra and Toueg with a rotating coordinator,
`members[(k + r − 2) mod n]` in round r, and majority quorums of the view in force at
instance k:

- round 1 takes the thesis's shortcut: its coordinator proposes the ids it holds
  directly (no estimate phase — nothing can be locked before the first round);
- a node adopts a proposal (estimate := value, ts := r) and acks it only once it holds
  every body in it, so a decided batch's bodies live on at a majority;
- a coordinator that gathers a majority of acks decides and sends `Decide` to all;
- a node that suspects the coordinator of its round moves to the next round and sends
  its estimate to that round's coordinator (copied to every member, so that one that
  has already decided answers with the decision), who waits for a majority of estimates and
  proposes the one adopted latest (or, if none was adopted, what it holds itself) —
  the locking that keeps two rounds from deciding differently;
- a message about a round or instance this node has left gets the answer it needs
  (a `Nack` for an old round, the `Decide` for an old instance); messages about a
  later instance wait until this node gets there.

Batches respect FIFO: an origin's seq s is proposed only after its seq s−1 was decided
or sits earlier in the same batch. A batch may also carry members to remove (those the
proposer suspects): the view changes at that point of the sequence on every node, so
views are totally ordered with the messages. A node that finds itself removed installs
a view without itself and stops (the Isis rule: a member the group gave up on must not
go on as if it had not). Bodies and decisions are garbage-collected once every member
has delivered them (`stable`, piggybacked on proposals from the acks' `delivered`).

Claims integrity, validity, agreement, uniform agreement, fifo and total order with
f < n/2 crashes. Failure-free and unbatched it costs 4(n−1) packets per broadcast:
data, propose, ack and decide, each n−1.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field

from abcast.codec import Packet
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
from abcast.effects import Deliver, Effect, InstallView, Multicast, Send, SetTimer
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.events import (
    BroadcastRequested,
    Event,
    Excluded,
    Received,
    Restored,
    Suspected,
    TimerFired,
    ViewInstalled,
)
from abcast.ids import MsgId, NodeId, View, sorted_nodes
from abcast.stack import Layer


@dataclass(frozen=True, slots=True)
class Batch:
    ids: tuple[MsgId, ...] = ()
    remove: tuple[NodeId, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.ids or self.remove)


EMPTY_BATCH = Batch()


def _batch(ids: list[tuple[str, int]], remove: list[str]) -> Batch:
    return Batch(tuple(MsgId(o, s) for o, s in ids), tuple(remove))


def _ids(batch: Batch) -> list[tuple[str, int]]:
    return [(m.origin, m.seq) for m in batch.ids]


@dataclass(slots=True)
class _Coordination:
    """What the coordinator of the current round has gathered."""

    estimates: dict[NodeId, tuple[Batch, int]] = field(default_factory=dict)
    acks: set[NodeId] = field(default_factory=set)
    nacks: set[NodeId] = field(default_factory=set)
    proposal: Batch | None = None


@dataclass(slots=True)
class _PendingAdopt:
    round: int
    batch: Batch
    coordinator: NodeId
    fetch_from: NodeId  # who holds the bodies this node lacks


ANYONE = "*"  # a fetch sent to every other member


class ChandraToueg(Layer):
    name = "chandra-toueg"
    header_type = CtHeader

    def __init__(
        self, node: NodeId, batch: int | None = None, fetch_delay_us: int = 5_000
    ) -> None:
        super().__init__(node)
        if batch is not None and batch < 1:
            raise LocalProtocolError("batch must be >= 1")
        self.max_batch = batch
        # A proposal can overtake the data it names (the channel does not order links):
        # wait this long for the bodies before asking for them.
        self.fetch_delay_us = fetch_delay_us
        self._now = 0
        self._fetch_armed = False
        self.view: View | None = None  # the view delivered so far (what the app sees)
        self.members: tuple[NodeId, ...] = ()  # the view consensus runs in (may be ahead)
        self.stopped = False
        # message bodies by origin, kept until stable
        self._bodies: dict[NodeId, dict[int, bytes]] = {}
        self._decided_next: dict[NodeId, int] = {}  # per origin: first seq not yet decided
        # consensus state for instance self.k
        self.k = 1
        self._round = 1
        self._estimate: Batch | None = None
        self._ts = 0
        self._coord: _Coordination | None = None
        self._adopt: _PendingAdopt | None = None
        self._later: dict[int, list[tuple[NodeId, object]]] = {}  # messages of later instances
        self._decisions: dict[int, Batch] = {}  # kept until stable, to answer stragglers
        self._to_deliver: deque[tuple[int, Batch, NodeId]] = deque()
        self.delivered_upto = 0
        self._known_delivered: dict[NodeId, int] = {}
        self._gc_upto = 0
        self._suspects: set[NodeId] = set()
        self._fetching: dict[MsgId, NodeId] = {}

    # -- introspection -------------------------------------------------------------------
    def bodies_held(self) -> int:
        return sum(len(b) for b in self._bodies.values())

    def coordinator(self, k: int, r: int) -> NodeId:
        return self.members[(k + r - 2) % len(self.members)]

    @property
    def majority(self) -> int:
        return len(self.members) // 2 + 1

    # -- events --------------------------------------------------------------------------
    def handle(self, event: Event, now: int) -> list[Effect]:
        self._now = now
        match event:
            case ViewInstalled(view):
                return self._first_view(view)
            case _ if self.stopped:
                return []
            case BroadcastRequested(seq, payload):
                return self._broadcast(seq, payload) + self._settle()
            case Received(sender, header, inner):
                if sender not in self.members and not isinstance(header, (Fetch, Bodies)):
                    return []
                return self._receive(sender, header, inner) + self._settle()
            case Suspected(node):
                self._suspects.add(node)
                return self._on_suspect(node) + self._settle()
            case Restored(node):
                self._suspects.discard(node)
                return []
            case Excluded(by) if by in self.members:
                return self._stop()  # consensus removed this node in an instance it missed
            case Excluded():
                return []
            case TimerFired("fetch"):
                self._fetch_armed = False
                return self._fetch_missing() + self._settle()
            case TimerFired(_):
                return []
            case _:
                raise LocalProtocolError(f"{self.name} cannot handle {event!r}")

    def _first_view(self, view: View) -> list[Effect]:
        # Later views are decided here and installed by this layer itself; the only
        # view that comes from outside is the initial one.
        if self.view is None:
            self.view = view
            self.members = view.members
        return []

    def _broadcast(self, seq: int, payload: bytes) -> list[Effect]:
        if self.view is None:
            raise LocalProtocolError(f"{self.name} on {self.node} has no view yet")
        self._bodies.setdefault(self.node, {})[seq] = payload
        others = tuple(m for m in self.members if m != self.node)
        return [Multicast(others, CtData(seq), Packet((), payload))]

    def _settle(self) -> list[Effect]:
        """Run to a fixed point: replay messages that waited for the instance this node
        has now reached, deliver, propose, move rounds. A loop, not recursion, because a
        burst of decisions can be thousands long."""
        effects: list[Effect] = []
        while not self.stopped:
            k = self.k
            for sender, header in self._later.pop(k, []):
                effects += self._receive(sender, header, Packet())
            effects += self._progress()
            if self.k == k and self.k not in self._later:
                break
        return effects

    def _receive(self, sender: NodeId, header: object, inner: Packet) -> list[Effect]:
        match header:
            case CtData(seq):
                self._store(sender, seq, inner.payload)
                return []
            case Fetch(ids):
                return self._answer_fetch(sender, ids)
            case Bodies(items):
                for origin, seq, body in items:
                    self._store(origin, seq, body)
                return []
            case Propose(k) | Ack(k) | Nack(k) | Estimate(k) | Decide(k) if k > self.k:
                self._later.setdefault(k, []).append((sender, header))
                return []
            case Decide(k, ids, remove):
                return [] if k < self.k else self._decide(_batch(ids, remove), sender)
            case Propose(k) | Estimate(k) if k < self.k:
                return self._remind(sender, k)
            case Ack(k) | Nack(k) if k < self.k:
                if isinstance(header, Ack):
                    self._note_delivered(sender, header.delivered)
                return []
            case Propose(_, r, ids, remove, stable):
                self._collect_garbage(stable)
                return self._on_propose(sender, r, _batch(ids, remove))
            case Ack(_, r, delivered):
                self._note_delivered(sender, delivered)
                return self._on_ack(sender, r)
            case Nack(_, r):
                return self._on_nack(sender, r)
            case Estimate(_, r, ids, remove, ts, delivered):
                self._note_delivered(sender, delivered)
                return self._on_estimate(sender, r, _batch(ids, remove), ts)
            case _:
                raise RemoteProtocolError(f"{sender} sent unexpected header {header!r}")

    # -- bodies --------------------------------------------------------------------------
    def _store(self, origin: NodeId, seq: int, body: bytes) -> None:
        if seq < self._decided_next.get(origin, 1) and not self._awaits_body(origin, seq):
            return  # decided and delivered, or collected: a late copy
        self._bodies.setdefault(origin, {})[seq] = body
        self._fetching.pop(MsgId(origin, seq), None)

    def _awaits_body(self, origin: NodeId, seq: int) -> bool:
        return MsgId(origin, seq) in self._fetching

    def _has(self, m: MsgId) -> bool:
        return m.seq in self._bodies.get(m.origin, {})

    def _missing(self, batch: Batch) -> list[MsgId]:
        return [m for m in batch.ids if not self._has(m)]

    def _fetch(self, missing: list[MsgId], source: NodeId) -> list[Effect]:
        new = [m for m in missing if m not in self._fetching]
        if not new:
            return []
        if source == self.node or source in self._suspects:
            source = ANYONE
        for m in new:
            self._fetching[m] = source
        header = Fetch([(m.origin, m.seq) for m in new])
        if source == ANYONE:
            others = tuple(o for o in self.members if o != self.node and o not in self._suspects)
            return [Multicast(others, header)] if others else []
        return [Send(source, header)]

    def _want_bodies(self) -> list[Effect]:
        if self._fetch_armed:
            return []
        self._fetch_armed = True
        return [SetTimer("fetch", self._now + self.fetch_delay_us)]

    def _fetch_missing(self) -> list[Effect]:
        effects: list[Effect] = []
        if self._adopt is not None:
            effects += self._fetch(self._missing(self._adopt.batch), self._adopt.fetch_from)
        for _, batch, source in self._to_deliver:
            effects += self._fetch(self._missing(batch), source)
        return effects

    def _answer_fetch(self, sender: NodeId, ids: list[tuple[str, int]]) -> list[Effect]:
        items = [(o, s, self._bodies[o][s]) for o, s in ids if s in self._bodies.get(o, {})]
        return [Send(sender, Bodies(items))] if items else []

    # -- proposing -----------------------------------------------------------------------
    def _proposable(self) -> Batch:
        """What this node would propose: held bodies, contiguous per origin after the
        decided ones (FIFO), and the members it suspects."""
        ids: list[MsgId] = []
        limit = self.max_batch
        for origin in sorted_nodes(list(self._bodies)):
            held = self._bodies[origin]
            seq = self._decided_next.get(origin, 1)
            while seq in held and (limit is None or len(ids) < limit):
                ids.append(MsgId(origin, seq))
                seq += 1
        remove = tuple(m for m in self.members if m in self._suspects and m != self.node)
        return Batch(tuple(ids), remove)

    def _active(self) -> bool:
        """Whether this node needs instance k to decide (so it must not wait forever on a
        coordinator it suspects)."""
        return bool(self._proposable()) or self._adopt is not None or self._estimate is not None

    def _progress(self) -> list[Effect]:
        """Re-check everything that may have been waiting for a body or a proposal."""
        effects = self._deliver_ready()
        if self.stopped:
            return effects
        if self._adopt is not None and not self._missing(self._adopt.batch):
            effects += self._adopt_now()
        coordinator = self.coordinator(self.k, self._round)
        if coordinator == self.node:
            effects += self._propose_if_ready()
        elif coordinator in self._suspects and self._active():
            effects += self._next_round(self._round + 1)
        return effects

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
        header = Propose(self.k, self._round, _ids(choice), list(choice.remove), stable)
        effects: list[Effect] = [Multicast(others, header)]
        return effects + self._on_propose(self.node, self._round, choice, source)

    def _new_coordination(self) -> _Coordination:
        self._coord = _Coordination()
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
        self._adopt = _PendingAdopt(r, batch, sender, source or sender)
        if self._missing(batch):
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
        effects: list[Effect] = [Multicast(others, Decide(self.k, _ids(decided),
                                                          list(decided.remove)))]
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
        if self.coordinator(self.k, r) != self.node:
            return []  # the copy every member gets, so that those past instance k remind
        if r < self._round:
            return []  # a straggler's estimate for a round this node has left
        effects = self._next_round(r) if r > self._round else []
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
        estimate = self._estimate if self._estimate is not None else self._proposable()
        header = Estimate(self.k, self._round, _ids(estimate), list(estimate.remove), self._ts,
                          self.delivered_upto)
        # Every member gets it, not only the coordinator: a member that already decided
        # instance k answers with the decision. Without that, a node whose Decide was
        # lost with its crashed coordinator would wait for estimates nobody sends.
        others = tuple(m for m in self.members if m != self.node and m not in self._suspects)
        effects.append(Multicast(others, header))
        if coordinator == self.node:
            coord = self._new_coordination()
            coord.estimates[self.node] = (estimate, self._ts)
            effects += self._propose_if_ready()
        return effects

    def _on_suspect(self, node: NodeId) -> list[Effect]:
        """Bodies asked of the suspect are asked of everyone else instead."""
        lost = [m for m, source in self._fetching.items() if source == node]
        for m in lost:
            del self._fetching[m]
        return self._fetch(lost, ANYONE)

    def _remind(self, sender: NodeId, k: int) -> list[Effect]:
        decided = self._decisions.get(k)
        if decided is None:
            return []
        return [Send(sender, Decide(k, _ids(decided), list(decided.remove)))]

    # -- deciding and delivering ---------------------------------------------------------
    def _decide(self, batch: Batch, source: NodeId) -> list[Effect]:
        k = self.k
        self._decisions[k] = batch
        for m in batch.ids:
            if m.seq >= self._decided_next.get(m.origin, 1):
                self._decided_next[m.origin] = m.seq + 1
        self._to_deliver.append((k, batch, source))
        if batch.remove:
            self.members = tuple(m for m in self.members if m not in batch.remove)
        self.k += 1
        self._round = 1
        self._estimate, self._ts = None, 0
        self._coord = None
        self._adopt = None
        if self.node not in self.members:
            return self._stop()
        return self._want_bodies() if self._missing(batch) else []

    def _stop(self) -> list[Effect]:
        """This node was removed: deliver what it can of what was decided, then install
        a view without itself (the driver stops a node that is not in its own view)."""
        effects = self._deliver_ready()
        self.stopped = True
        view = self.view
        if view is not None and self.node in view.members:
            self.view = View(view.view_id + 1, view.others(self.node))
            effects.append(InstallView(self.view))
        return effects

    def _deliver_ready(self) -> list[Effect]:
        effects: list[Effect] = []
        while self._to_deliver:
            k, batch, _ = self._to_deliver[0]
            if self._missing(batch):
                break
            self._to_deliver.popleft()
            effects.extend(Deliver(m.origin, m.seq, self._bodies[m.origin][m.seq])
                           for m in batch.ids)
            self.delivered_upto = k
            if batch.remove and self.view is not None:
                members = tuple(m for m in self.view.members if m not in batch.remove)
                self.view = View(self.view.view_id + 1, members)
                effects.append(InstallView(self.view))
        return effects

    # -- stability -----------------------------------------------------------------------
    def _note_delivered(self, node: NodeId, delivered: int) -> None:
        if delivered > self._known_delivered.get(node, 0):
            self._known_delivered[node] = delivered

    def _stable(self) -> int:
        known = [self.delivered_upto if m == self.node else self._known_delivered.get(m, 0)
                 for m in self.members]
        return min(known, default=0)

    def _collect_garbage(self, stable: int) -> None:
        upto = min(stable, self.delivered_upto)
        while self._gc_upto < upto:
            self._gc_upto += 1
            batch = self._decisions.pop(self._gc_upto, None)
            if batch is None:
                continue
            for m in batch.ids:
                held = self._bodies.get(m.origin)
                if held is not None:
                    held.pop(m.seq, None)
