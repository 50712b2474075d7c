"""A Chandra-Toueg node's own membership: joining, leaving, being removed, coming back.

Rules. The consensus core (abcast.ordering.chandra_toueg) decides membership changes in
its batches; this base class is what one node does about its *own* place in the group:

- Join: a stack started alone asks a contact (`CtJoin`, the next contact every
  `join_retry_us`); until its `CtWelcome` it keeps what members send it and answers
  nothing. The welcome — view, state, cut — is refused when it admitted an earlier
  incarnation of this node (a retransmitted copy that outlived a partition).
- Leave: `CtLeave(last)` to the members; the group removes the leaver with its last
  broadcast. A graceful leaver delivers through the batch that removes it, lingers
  `linger_us` (its last `Decide` may still need retransmitting), then installs its view
  without itself and departs.
- Removed without asking (suspected across a partition, or falsely), or before its leave
  was taken: it learns it from the batch that removes it, or from a member's "not in my
  view" (`Excluded`) when it missed that batch. With `rejoin` (the default) it delivers
  what it can of its old view and asks to join again, through the members it knew,
  like a new node: the group admits it by consensus, it gets a snapshot and the cut,
  and it sends again, same ids, its broadcasts the group had not decided (nobody sees a
  hole in its sequence). A cut-off leaver comes back to leave from there. Without
  `rejoin` it installs a view without itself and stops (the Isis rule), and a leaver
  among them sets `cut_off`: the driver counts it removed, not departed.

Drivers see a rejoin as the welcome's `InstallState` arriving at a node that was a
member before, and record the first incarnation as crashed there.

What it does not know: rounds, quorums or bodies (the subclass runs them; it restarts
its consensus state through `_restart_consensus`).
"""

from __future__ import annotations

from abc import abstractmethod
from collections import deque
from typing import Final

from abcast.codec import Packet
from abcast.consensus.bodies import BodyStore
from abcast.consensus.membership import MembershipBook
from abcast.consensus.messages import (
    Ack,
    Bodies,
    CtData,
    CtJoin,
    CtLeave,
    CtWelcome,
    Decide,
    Estimate,
    Nack,
    Propose,
)
from abcast.consensus.rounds import DecidedBatch, DecisionLog
from abcast.effects import (
    CancelTimer,
    Effect,
    InstallState,
    InstallView,
    Multicast,
    Send,
    SetTimer,
)
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.ids import NodeId, View, sorted_nodes
from abcast.layer import Layer

JOIN_RETRY: Final = "join"
DEPART: Final = "depart"
NUDGE: Final = "nudge"
FETCH: Final = "fetch"
GIVE_UP: Final = "give-up"  # removed, still without the decision (or its bodies)


class MemberLifecycle(Layer):
    """Join, leave, removal and rejoin of this node; the subclass runs the consensus."""

    # consensus state the subclass keeps, read and restarted here
    store: BodyStore
    log: DecisionLog
    k: int
    delivered_upto: int
    _later: dict[int, list[tuple[NodeId, object]]]
    _to_deliver: deque[DecidedBatch]

    def __init__(
        self, node: NodeId, join_retry_us: int, linger_us: int, rejoin: bool
    ) -> None:
        super().__init__(node)
        self.join_retry_us = join_retry_us
        self.linger_us = linger_us
        self.rejoin = rejoin
        self.rejoins = 0  # times this node asked to come back after a removal
        self._now = 0
        self.view: View | None = None  # the view delivered so far (what the app sees)
        self.members: tuple[NodeId, ...] = ()  # the view consensus runs in (may be ahead)
        self.stopped = False
        # joining (until welcomed), leaving (until the view without us)
        self.joining = False
        self.leaving = False
        self.cut_off = False  # removed before our leave was decided (the driver reads it)
        self.book = MembershipBook(node)
        self._contacts: tuple[NodeId, ...] = ()
        self._queued: list[tuple[int, bytes]] = []  # broadcasts to send once admitted
        self._leave_after_join = False
        self._last_seq = 0  # the last seq this node broadcast
        self._departing: View | None = None  # a graceful leaver: the view to install
        self._give_up_armed = False
        # A welcome from instance k <= this admitted an earlier incarnation of ours.
        self._stale_welcomes_upto = 0

    @property
    def removed(self) -> bool:
        """A decision this node has reached removed it (it delivers up to there only)."""
        return not self.joining and self.node not in self.members

    @abstractmethod
    def _settle(self) -> list[Effect]:
        """Run the consensus to a fixed point (what waited for the welcome included)."""

    @abstractmethod
    def _deliver_ready(self) -> list[Effect]:
        """Deliver the decided batches whose bodies are here."""

    @abstractmethod
    def _restart_consensus(self) -> None:
        """Forget every instance, body and decision: a fresh node's consensus state."""

    # -- joining -------------------------------------------------------------------------
    def _join(self, contacts: tuple[NodeId, ...], now: int) -> list[Effect]:
        candidates = tuple(c for c in contacts if c != self.node)
        if not candidates:
            raise LocalProtocolError("join needs at least one contact other than this node")
        fresh = self.k == 1 and self.store.empty() and not self.log
        if self.joining or self.view is None or len(self.members) != 1 or not fresh:
            raise LocalProtocolError(f"{self.node} cannot join now: it is in {self.view}")
        self.joining = True
        self._contacts = candidates
        return self._ask_to_join(now)

    def _ask_to_join(self, now: int) -> list[Effect]:
        if not self.joining:
            return []
        # One contact at a time (it forwards the request to the others): fewer asks to
        # contacts that may have gone, which the open channel retransmits for ever.
        contact, *rest = self._contacts
        self._contacts = (*rest, contact)
        return [Send(contact, CtJoin(self.node)), SetTimer(JOIN_RETRY, now + self.join_retry_us)]

    def _receive_joining(self, sender: NodeId, header: object, inner: Packet) -> list[Effect]:
        """Before the welcome: keep what the next instances will need, answer nothing."""
        match header:
            case CtWelcome():
                return self._welcomed(sender, header) + self._settle()
            case CtData(seq):
                self.store.keep(sender, seq, inner.payload)
            case Bodies(items):
                for origin, seq, body in items:
                    self.store.keep(origin, seq, body)
            case Propose(k) | Ack(k) | Nack(k) | Estimate(k) | Decide(k):
                self._later.setdefault(k, []).append((sender, header))
        return []

    def _welcomed(self, sender: NodeId, welcome: CtWelcome) -> list[Effect]:
        if welcome.k <= self._stale_welcomes_upto:
            return []  # it admitted the incarnation the group removed since
        view = View(welcome.view_id, tuple(welcome.members))
        if self.node not in view.members or sender not in view.members:
            raise RemoteProtocolError(f"{sender} welcomed {self.node} into {view}")
        self.joining = False
        self.view, self.members = view, view.members
        k = welcome.k
        self.k, self.delivered_upto = k + 1, k
        self.log.start_at(k)
        cut = dict(welcome.decided)
        self.store.start_at(cut)
        for origin, seq, body in welcome.pending:
            self.store.put(origin, seq, body)
        self._later = {i: waiting for i, waiting in self._later.items() if i > k}
        effects: list[Effect] = [CancelTimer(JOIN_RETRY), InstallState(welcome.state),
                                 InstallView(view)]
        others = tuple(m for m in self.members if m != self.node)
        # A rejoiner's broadcasts below the cut were decided before the group removed it.
        first = cut.get(self.node, 1)
        for seq, payload in self._queued:
            if seq >= first:
                self.store.put(self.node, seq, payload)
                effects.append(Multicast(others, CtData(seq), Packet((), payload)))
        self._queued.clear()
        if self._leave_after_join:
            effects += self._leave()
        return effects

    def _on_join(self, sender: NodeId, joiner: NodeId) -> list[Effect]:
        if joiner in self.members:
            kept = self.book.welcomes.get(joiner)  # a retry: the first welcome got lost
            return [Send(joiner, kept[1])] if kept is not None and sender == joiner else []
        if self.leaving or self.removed:
            return []
        if not self.book.note_join(joiner, self.members, direct=sender == joiner):
            return []
        # Whoever coordinates next must know of it to propose it.
        others = tuple(m for m in self.members if m not in (self.node, sender))
        return [Multicast(others, CtJoin(joiner))] if others else []

    # -- leaving -------------------------------------------------------------------------
    def _leave(self) -> list[Effect]:
        if self.joining:
            self._leave_after_join = True  # the group may already count on us: join first
            return []
        if self.leaving:
            return []
        if self.removed:  # removed before it asked: it cannot be let go any more
            if self.rejoin:
                self._leave_after_join = True  # it comes back, and leaves from there
            else:
                self.leaving = self.cut_off = True
            return []
        self.leaving = True
        self.book.note_leave(self.node, self._last_seq)
        others = tuple(m for m in self.members if m != self.node)
        return [Multicast(others, CtLeave(self._last_seq))] if others else []

    # -- removed -------------------------------------------------------------------------
    def _excluded_by(self, by: NodeId, view_id: int) -> bool:
        """Whether a member's "you are not in my view" means this node was removed: only
        if that view is later than ours (an earlier one may predate our joining)."""
        if self.joining or self.removed or self.view is None or by not in self.members:
            return False
        return view_id > self.view.view_id

    def _on_excluded(self) -> list[Effect]:
        """Removed in an instance this node missed. A leaver waits a while for the
        decision itself, to deliver everything before it."""
        if self.leaving:
            if self._give_up_armed:
                return []
            self._give_up_armed = True
            return [SetTimer(GIVE_UP, self._now + 2 * self.linger_us)]
        return self._cut_loose()

    def _left_out(self, view: View) -> list[Effect]:
        """This node delivered the batch that removes it (`view` is the one after)."""
        # A leave is taken only with the leaver's last broadcast (membership.py): with
        # some undecided, it was removed as suspected and they are dropped.
        own_undecided = self.store.decided_next.get(self.node, 1) <= self._last_seq
        self.cut_off = self.cut_off or (self.leaving and own_undecided)
        graceful = self.leaving and not self.cut_off
        if self.rejoin and not graceful:
            return self._rejoin()
        # Linger before the view without us (the driver stops us there), so that the
        # decision we may just have sent is retransmitted until it arrives, and
        # stragglers asking about it get it.
        self._departing = view
        return [SetTimer(DEPART, self._now + self.linger_us)]

    def _depart(self) -> list[Effect]:
        view = self._departing
        if view is None:
            return []
        self.stopped = True
        self.view = view
        return [InstallView(view)]

    def _give_up(self) -> list[Effect]:
        """Excluded while leaving and no decision came; or it did, but bodies it needs
        were collected once the group stopped counting us: our last view's end is lost."""
        if self._departing is not None or self.joining:
            return []  # delivered through the batch that removed us; or back already
        self.cut_off = self.cut_off or self.leaving
        return self._cut_loose()

    def _cut_loose(self) -> list[Effect]:
        """The group went on without this node: deliver what it can of what was decided,
        then come back (`rejoin`) or stop."""
        if not self.rejoin:
            return self._stop()
        effects = self._deliver_ready()
        if self.joining or self.stopped or self._departing is not None:
            return effects  # the deliveries reached the removal: it is on its way
        return effects + self._rejoin()

    def _stop(self) -> list[Effect]:
        """Install a view without this node (the driver stops a node not in its view)."""
        effects = self._deliver_ready()
        if self.stopped:
            return effects
        self.stopped = True
        view = self.view
        if view is not None and self.node in view.members:
            self.view = View(view.view_id + 1, view.others(self.node))
            effects.append(InstallView(self.view))
        return effects

    def _rejoin(self) -> list[Effect]:
        """Come back as a new incarnation: the consensus state of the old one is void
        (the group decided on without it); its own undecided broadcasts are kept, to be
        sent again once the group has admitted it."""
        known = set(self.members) | set(self.view.members if self.view is not None else ())
        contacts = sorted_nodes(list(known - {self.node}))
        if not contacts:
            return self._stop()
        mine = {seq: body for origin, seq, body in self.store.above(self.store.decided_next)
                if origin == self.node}
        mine.update(self._queued)
        self._queued = sorted(mine.items())
        self._stale_welcomes_upto = max(self._stale_welcomes_upto, self.k - 1)
        if self.leaving:
            self._leave_after_join = True  # cut off before its leave was taken
        self.leaving = self.cut_off = False
        self._departing = None
        self._give_up_armed = False
        self.book.restart()
        self._restart_consensus()
        self.joining = True
        self._contacts = tuple(contacts)
        self.rejoins += 1
        cancels: list[Effect] = [CancelTimer(key) for key in (GIVE_UP, DEPART, NUDGE, FETCH)]
        return cancels + self._ask_to_join(self._now)
