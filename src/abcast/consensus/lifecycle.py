"""A Chandra-Toueg node's own membership: joining, leaving, being removed, coming back.

Rules. The consensus core (abcast.ordering.chandra_toueg, where the phase table is)
decides membership changes in its batches; these are the steps one node takes about its
*own* place in the group, as functions over the core (`CtNode`: the fields they read and
write, and the three consensus steps they call):

The records and the rules that are not consensus are the membership layer's
(abcast.membership: `MJoin`, `MJoinFwd`, `MLeave`, `MWelcome` with its `JoinCut`, the
knobs of `MembershipConfig`, abcast.membership.contacts' contact rotation and cut-off
rule); what is this ordering's own is that views are decided by consensus, in the
delivery sequence.

- Join: a stack started alone asks a contact (`MJoin`, the next contact every
  `join_retry_us`); until its `MWelcome` it keeps what members send it and answers
  nothing. The welcome — view, state, cut, and before it the `Bodies` above the cut —
  is refused when it admitted an earlier incarnation of this node (a retransmitted copy
  that outlived a partition). Every `MJoin` names its join (`ask`: the clock).
- Give up (`JoinAbandoned`, before the welcome): `MWithdraw(ask)` to every contact, then
  stop. A member drops the ask, forgets the joiner below (`Forget`), takes that ask's
  retransmissions for stale for `withdraw_memory_us`, and if a decision added it (the
  welcome still on its way) suspects it: a later batch removes it. Quorums are
  majorities of the members that did not withdraw (abcast.consensus.membership's
  `majority`): a lone member that admitted a joiner decides alone, and two sides of a
  partition never both do. A withdrawal naming a member no decision here added (a
  founder; a stale ask) is refused.
- Leave: once all of its own broadcasts are decided (it sends no more), `MLeave` to the
  members; the group removes the leaver in a later batch, so with its last broadcast
  delivered. A graceful leaver delivers through the batch that removes it, lingers
  `linger_us` (its last `Decide` may still need retransmitting), then installs its view
  without itself and departs.
- Removed without asking (suspected across a partition, or falsely), or before its leave
  was taken: it learns it from the batch that removes it, or from a member's "not in my
  view" (`Excluded`) when it missed that batch. With `rejoin` (the default) it delivers
  what it can of its old view and asks to join again, through the members it knew,
  like a new node: the group admits it by consensus, it gets a snapshot and the cut,
  and it sends again, same ids, its broadcasts the group had not decided (nobody sees a
  hole in its sequence). A cut-off leaver comes back to leave from there. Without
  `rejoin` it lingers, installs a view without itself and stops (the Isis rule), and a
  leaver among them sets `cut_off`: the driver counts it removed, not departed.

Drivers see a rejoin as the welcome's `InstallState` arriving at a node that was a
member before, and record the first incarnation as crashed there.

What it does not know: rounds, quorums or bodies (the core runs them; a rejoin restarts
its consensus state through `restart_consensus`).
"""

from __future__ import annotations

from collections import deque
from typing import Final, Literal, Protocol

from abcast.codec import Packet
from abcast.consensus.bodies import BodyStore
from abcast.consensus.membership import MembershipBook
from abcast.consensus.messages import Ack, Bodies, CtData, Decide, Estimate, Nack, Propose
from abcast.consensus.rounds import DecidedBatch, DecisionLog
from abcast.effects import (
    CancelTimer,
    Effect,
    Forget,
    InstallState,
    InstallView,
    Multicast,
    Send,
    SetTimer,
)
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.ids import NodeId, View, sorted_nodes
from abcast.membership import MembershipConfig
from abcast.membership.contacts import JoinContacts, left_out_by
from abcast.membership.state import JOIN_RETRY  # the membership layer's timer, ours too
from abcast.membership.wire import MJoin, MJoinFwd, MLeave, MWelcome, MWithdraw

DEPART: Final = "depart"
NUDGE: Final = "nudge"
FETCH: Final = "fetch"
GIVE_UP: Final = "give-up"  # removed, still without the decision (or its bodies)

#: where a node stands in the group (the core's phase table says how it moves)
Phase = Literal["member", "joining", "leaving", "departing", "expelled", "stopped"]
MEMBER: Final = "member"
JOINING: Final = "joining"  # asked to join (or to come back), not yet welcomed
LEAVING: Final = "leaving"  # asked to leave, not yet removed
DEPARTING: Final = "departing"  # removed as it asked: lingers, then the view without it
EXPELLED: Final = "expelled"  # removed, no rejoin: lingers, then the view without it
STOPPED: Final = "stopped"
#: phases in which this node still delivers what was decided
DELIVERING: Final = frozenset({MEMBER, LEAVING})


class CtNode(Protocol):
    """What these steps read and write on the consensus core."""

    node: NodeId
    now: int
    phase: Phase
    view: View | None
    members: tuple[NodeId, ...]
    rejoin: bool
    rejoins: int
    cut_off: bool
    config: MembershipConfig
    linger_us: int
    book: MembershipBook
    store: BodyStore
    log: DecisionLog
    k: int
    delivered_upto: int
    later: dict[int, list[tuple[NodeId, object]]]
    to_deliver: deque[DecidedBatch]
    contacts: JoinContacts | None
    ask: int  # this joiner's ask (its clock when it asked: names the join, MWithdraw too)
    queued: list[tuple[int, bytes]]  # broadcasts to send once admitted
    leave_after_join: bool
    leave_sent: bool  # this leaver's MLeave is out
    last_seq: int  # the last seq this node broadcast
    final_view: View | None  # lingering: the view without this node, to install
    give_up_armed: bool
    stale_welcomes_upto: int  # a welcome from instance k <= this admitted an old incarnation

    @property
    def removed(self) -> bool: ...

    def settle(self) -> list[Effect]: ...

    def deliver_ready(self) -> list[Effect]: ...

    def restart_consensus(self) -> None: ...


def others(ct: CtNode) -> tuple[NodeId, ...]:
    return tuple(m for m in ct.members if m != ct.node)


# -- joining -----------------------------------------------------------------------------
def join(ct: CtNode, contacts: tuple[NodeId, ...]) -> list[Effect]:
    asked = JoinContacts(contacts, ct.node)
    fresh = ct.k == 1 and ct.store.empty() and not ct.log
    if ct.phase != MEMBER or ct.view is None or len(ct.members) != 1 or not fresh:
        raise LocalProtocolError(f"{ct.node} cannot join now: it is in {ct.view}")
    ct.phase = JOINING
    ct.contacts = asked
    ct.ask = max(ct.now, ct.ask + 1, 1)
    return ask_to_join(ct, asked.current())


def ask_again(ct: CtNode) -> list[Effect]:
    """`join_retry_us` unanswered: the next contact."""
    if ct.phase != JOINING or ct.contacts is None:
        return []
    return ask_to_join(ct, ct.contacts.next())


def ask_to_join(ct: CtNode, contact: NodeId) -> list[Effect]:
    return [Send(contact, MJoin(ct.ask)),
            SetTimer(JOIN_RETRY, ct.now + ct.config.join_retry_us)]


def abandon(ct: CtNode) -> list[Effect]:
    """The application gave the join up. Not yet welcomed: `MWithdraw` to every
    contact (a decision may have added us already, its welcome on its way: the group
    goes on without us) and stop, taking nothing more. Welcomed meanwhile: a leave."""
    if ct.phase != JOINING:
        return leave(ct)
    contacts = ct.contacts.nodes if ct.contacts is not None else ()
    ct.phase = STOPPED
    return [CancelTimer(JOIN_RETRY), *(Send(c, MWithdraw(ct.ask)) for c in contacts)]


def receive_joining(ct: CtNode, sender: NodeId, header: object, inner: Packet) -> list[Effect]:
    """Before the welcome: keep what the next instances will need, answer nothing."""
    match header:
        case MWelcome():
            return welcomed(ct, sender, header) + ct.settle()
        case CtData(seq):
            ct.store.keep(sender, seq, inner.payload)
        case Bodies(items):
            for origin, seq, body in items:
                ct.store.keep(origin, seq, body)
        case Propose(k) | Ack(k) | Nack(k) | Estimate(k) | Decide(k):
            ct.later.setdefault(k, []).append((sender, header))
    return []


def welcomed(ct: CtNode, sender: NodeId, welcome: MWelcome) -> list[Effect]:
    k = welcome.attempt  # the instance that admitted it
    if k <= ct.stale_welcomes_upto:
        return []  # it admitted the incarnation the group removed since
    view = View(welcome.view_id, tuple(welcome.members))
    if ct.node not in view.members or sender not in view.members:
        raise RemoteProtocolError(f"{sender} welcomed {ct.node} into {view}")
    ct.phase = MEMBER
    ct.view, ct.members = view, view.members
    ct.k, ct.delivered_upto = k + 1, k
    ct.log.start_at(k)
    cut = {origin: n + 1 for origin, n in welcome.cut.delivered.items()}  # first undecided
    ct.store.start_at(cut)  # (the bodies above it came first, or come as `Bodies`)
    ct.later = {i: waiting for i, waiting in ct.later.items() if i > k}
    effects: list[Effect] = [CancelTimer(JOIN_RETRY), InstallState(welcome.state),
                             InstallView(view)]
    to = others(ct)
    # A rejoiner's broadcasts below the cut were decided before the group removed it.
    first = cut.get(ct.node, 1)
    for seq, payload in ct.queued:
        if seq >= first:
            ct.store.put(ct.node, seq, payload)
            effects.append(Multicast(to, CtData(seq), Packet((), payload)))
    ct.queued.clear()
    if ct.leave_after_join:
        effects += leave(ct)
    return effects


def on_join(ct: CtNode, sender: NodeId, joiner: NodeId, ask: int) -> list[Effect]:
    """A join request, from the joiner itself or forwarded by a member."""
    if joiner in ct.members:
        kept = ct.book.welcomes.get(joiner)  # a retry: the first welcome got lost
        if kept is None or sender != joiner:
            return []
        return [Send(joiner, header) for header in kept.packets()]
    if ct.phase != MEMBER or ct.removed:
        return []
    if not ct.book.note_join(joiner, ct.members, direct=sender == joiner, ask=ask,
                             now=ct.now, memory_us=ct.config.withdraw_memory_us):
        return []
    # Whoever coordinates next must know of it to propose it.
    to = tuple(m for m in ct.members if m not in (ct.node, sender))
    return [Multicast(to, MJoinFwd(joiner, ask))] if to else []


def on_withdraw(ct: CtNode, joiner: NodeId, ask: int) -> list[Effect]:
    """`joiner` gave its join up and stopped: its request is dropped and the layers
    below forget it (`Forget`: its next stack starts afresh); if a decision added it,
    the core suspects it (abcast.consensus.membership's `withdraw` says which)."""
    return [] if ct.book.withdraw(joiner, ask, ct.members, ct.now) is None \
        else [Forget(joiner)]


# -- leaving -----------------------------------------------------------------------------
def leave(ct: CtNode) -> list[Effect]:
    if ct.phase == JOINING:
        ct.leave_after_join = True  # the group may already count on us: join first
        return []
    if ct.phase in (LEAVING, DEPARTING):
        return []
    if ct.phase == EXPELLED or ct.removed:  # removed before it asked: too late to leave
        if ct.rejoin and ct.phase != EXPELLED:
            ct.leave_after_join = True  # it comes back, and leaves from there
        else:
            ct.cut_off = True
            if ct.phase == MEMBER:
                ct.phase = LEAVING
        return []
    ct.phase = LEAVING
    ct.leave_sent = False
    ct.book.note_leave(ct.node, ct.last_seq)
    return ask_to_leave(ct)


def ask_to_leave(ct: CtNode) -> list[Effect]:
    """A leaver asks once all of its own broadcasts are decided (checked again after
    every decision), so that any member may remove it in its next batch."""
    if ct.phase != LEAVING or ct.leave_sent or ct.removed:
        return []
    if ct.store.decided_next.get(ct.node, 1) <= ct.last_seq:
        return []
    ct.leave_sent = True
    to = others(ct)
    return [Multicast(to, MLeave())] if to else []


# -- removed -----------------------------------------------------------------------------
def excluded_by(ct: CtNode, by: NodeId, view_id: int) -> bool:
    """Whether a member's "you are not in my view" means this node was removed: only
    if that view is later than ours (an earlier one may predate our joining)."""
    if ct.phase not in DELIVERING or ct.removed or ct.view is None:
        return False
    return left_out_by(ct.members, ct.view.view_id, by, view_id)


def on_excluded(ct: CtNode) -> list[Effect]:
    """Removed in an instance this node missed. A leaver waits a while for the
    decision itself, to deliver everything before it."""
    if ct.phase == LEAVING:
        if ct.give_up_armed:
            return []
        ct.give_up_armed = True
        return [SetTimer(GIVE_UP, ct.now + 2 * ct.linger_us)]
    return cut_loose(ct)


def left_out(ct: CtNode, view: View) -> list[Effect]:
    """This node delivered the batch that removes it (`view` is the one after)."""
    # A leave is taken only with the leaver's last broadcast (membership.py): with
    # some undecided, it was removed as suspected and they are dropped.
    own_undecided = ct.store.decided_next.get(ct.node, 1) <= ct.last_seq
    leaving = ct.phase == LEAVING
    ct.cut_off = ct.cut_off or (leaving and own_undecided)
    graceful = leaving and not ct.cut_off
    if ct.rejoin and not graceful:
        return rejoin(ct)
    # Linger before the view without us (the driver stops us there), so that the
    # decision we may just have sent is retransmitted until it arrives, and
    # stragglers asking about it get it.
    ct.final_view = view
    ct.phase = DEPARTING if graceful else EXPELLED
    return [SetTimer(DEPART, ct.now + ct.linger_us)]


def depart(ct: CtNode) -> list[Effect]:
    view = ct.final_view
    if view is None or ct.phase not in (DEPARTING, EXPELLED):
        return []
    ct.phase = STOPPED
    ct.view = view
    return [InstallView(view)]


def give_up(ct: CtNode) -> list[Effect]:
    """Excluded while leaving and no decision came; or it did, but bodies it needs
    were collected once the group stopped counting us: our last view's end is lost."""
    if ct.phase not in DELIVERING:
        return []  # delivered through the batch that removed us; or back already
    ct.cut_off = ct.cut_off or ct.phase == LEAVING
    return cut_loose(ct)


def cut_loose(ct: CtNode) -> list[Effect]:
    """The group went on without this node: deliver what it can of what was decided,
    then come back (`rejoin`) or stop."""
    if not ct.rejoin:
        return stop(ct)
    effects = ct.deliver_ready()
    if ct.phase not in DELIVERING:
        return effects  # the deliveries reached the removal: it is on its way
    return effects + rejoin(ct)


def stop(ct: CtNode) -> list[Effect]:
    """Install a view without this node (the driver stops a node not in its view)."""
    effects = ct.deliver_ready()
    if ct.phase == STOPPED:
        return effects
    ct.phase = STOPPED
    view = ct.view
    if view is not None and ct.node in view.members:
        ct.view = View(view.view_id + 1, view.others(ct.node))
        effects.append(InstallView(ct.view))
    return effects


def rejoin(ct: CtNode) -> list[Effect]:
    """Come back as a new incarnation: the consensus state of the old one is void (the
    group decided on without it); its own undecided broadcasts are kept, to be sent
    again once the group has admitted it."""
    known = set(ct.members) | set(ct.view.members if ct.view is not None else ())
    contacts = sorted_nodes(list(known - {ct.node}))
    if not contacts:
        return stop(ct)
    mine = {seq: body for origin, seq, body in ct.store.above(ct.store.decided_next)
            if origin == ct.node}
    mine.update(ct.queued)
    ct.queued = sorted(mine.items())
    ct.stale_welcomes_upto = max(ct.stale_welcomes_upto, ct.k - 1)
    if ct.phase == LEAVING:
        ct.leave_after_join = True  # cut off before its leave was taken
    ct.cut_off = False
    ct.final_view = None
    ct.give_up_armed = False
    ct.book.restart()
    ct.restart_consensus()
    ct.phase = JOINING
    ct.contacts = JoinContacts(tuple(contacts), ct.node)
    ct.ask = max(ct.now, ct.ask + 1)
    ct.rejoins += 1
    cancels: list[Effect] = [CancelTimer(key) for key in (GIVE_UP, DEPART, NUDGE, FETCH)]
    return cancels + ask_to_join(ct, ct.contacts.current())
