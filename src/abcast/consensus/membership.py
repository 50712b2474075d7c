"""Membership changes decided by Chandra-Toueg consensus: what a member proposes and how
a decided batch changes the membership, plus the state a joiner is welcomed with.

Rules. A batch decided by instance k carries message ids, then `remove`, then `add`; every
member applies it the same way (`apply_batch`: a pure function of the members before and
the batch), so every member switches view at the same point of the total order. What a
member *proposes* is local knowledge kept here:

- a joiner's request (`MJoin`, forwarded once to the other members as `MJoinFwd` so
  that whoever coordinates can propose it) until a decision adds it;
- a leaver's request: "remove me once my broadcasts 1..last are decided" — in the batch
  that decides the last of them at the latest, so the leaver delivers all of its own
  messages before its view without itself. The leaver knows its `last`; it sends its
  `MLeave` only once it has decided them all, so the others take it with `last` = 0;
- suspected members (the failure detector's verdicts, passed in).

A batch that adds a joiner fixes the *cut*: per origin, the first seq not decided by k.
Where a member delivers that batch it takes a snapshot of the application (the state
right after k's deliveries) and builds the `MWelcome` — k (as its `attempt`), the view
after it, the cut (a `JoinCut`) and the state — and the `Bodies` it holds at or above
the cut (sent before the joiner was a member), which go first. The lowest old member of
the new view sends it at once; every old member keeps its copy until the joiner is known
to have delivered past k, to answer the joiner's retries if the first welcome died with
its sender.

A removed node may ask again (abcast.consensus.lifecycle: a member cut off by a
partition, or falsely suspected, comes back): it is proposed again only on its own
request to this node, not on a member's forward, because a forward can be an old one —
retransmitted across a partition that healed — of the ask that admitted it before.

What it does not know: rounds, quorums, bodies or time (abcast.ordering.chandra_toueg).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from abcast.codec import Header
from abcast.consensus.messages import Bodies
from abcast.errors import LocalProtocolError
from abcast.ids import MsgId, NodeId, View, sorted_nodes
from abcast.membership.state import MAX_PENDING_JOINS, note
from abcast.membership.wire import JoinCut, MWelcome


@dataclass(frozen=True, slots=True)
class Batch:
    """What one consensus instance decides: deliver `ids` in order, then remove `remove`
    from the membership and add `add` to it."""

    ids: tuple[MsgId, ...] = ()
    remove: tuple[NodeId, ...] = ()
    add: tuple[NodeId, ...] = ()

    def __bool__(self) -> bool:
        return bool(self.ids or self.remove or self.add)


EMPTY_BATCH = Batch()


def apply_batch(members: tuple[NodeId, ...], batch: Batch) -> tuple[NodeId, ...]:
    """The membership after `batch` (the same on every member: nothing local in it)."""
    if not batch.remove and not batch.add:
        return members
    kept = [m for m in members if m not in batch.remove]
    added = [a for a in batch.add if a not in kept and a not in batch.remove]
    return sorted_nodes(kept + added)


@dataclass(frozen=True, slots=True)
class _Draft:
    """A welcome waiting for the application's snapshot."""

    k: int
    joiners: tuple[NodeId, ...]
    view: View
    cut: tuple[tuple[NodeId, int], ...]
    send: bool  # this node is the one that sends it at once


@dataclass(frozen=True, slots=True)
class KeptWelcome:
    """A welcome kept for a joiner until it is known to have delivered past `k`."""

    k: int
    welcome: MWelcome
    bodies: Bodies | None  # held at or above the cut: they go first

    def packets(self) -> list[Header]:
        return [self.welcome] if self.bodies is None else [self.bodies, self.welcome]


class MembershipBook:
    def __init__(self, node: NodeId) -> None:
        self.node = node
        self.joiners: dict[NodeId, None] = {}  # asked to join, not yet added (in order)
        #: the newest ask heard of a joiner, pending or added (`MJoin.ask`: its clock when
        #: it asked), at most MAX_PENDING_JOINS (one forgotten is not counted withdrawn)
        self.asks: dict[NodeId, int] = {}
        self.added: set[NodeId] = set()  # members a decision here added (not founders)
        #: joins given up (`MWithdraw`): node -> (the ask withdrawn, when heard), at most
        #: MAX_PENDING_JOINS, the oldest forgotten first
        self.withdrawn: dict[NodeId, tuple[int, int]] = {}
        self.refused = 0  # withdrawals naming a member no decision here added
        self.leavers: dict[NodeId, int] = {}  # asked to leave: their last broadcast seq
        self.gone: set[NodeId] = set()  # removed from the group here (re-added if it asks)
        self.welcomes: dict[NodeId, KeptWelcome] = {}
        self._cuts: dict[int, tuple[tuple[NodeId, int], ...]] = {}
        self._drafts: dict[int, _Draft] = {}
        self._tokens = 0
        self._void: set[int] = set()  # snapshots asked for by an incarnation now over

    def restart(self) -> None:
        """This node comes back as a new incarnation: what the old one knew of requests
        and welcomes is void (snapshots it asked for may still come back: ignored)."""
        self._void.update(self._drafts)
        self.joiners.clear()
        self.leavers.clear()
        self.gone.clear()
        self.asks.clear()
        self.added.clear()
        self.welcomes.clear()
        self._cuts.clear()
        self._drafts.clear()

    # -- requests ------------------------------------------------------------------------
    def note_join(
        self, joiner: NodeId, members: tuple[NodeId, ...], *, direct: bool = True,
        ask: int = 0, now: int = 0, memory_us: int = 0,
    ) -> bool:
        """Record a join request (`direct`: from the joiner itself, not forwarded);
        True when it is new here (forward it then). An ask its joiner withdrew (heard
        within `memory_us`) is stale: a retransmission of the stack that gave up."""
        given_up = self.withdrawn.get(joiner)
        if given_up is not None and ask and ask <= given_up[0] \
                and now - given_up[1] < memory_us:
            return False
        if ask > self.asks.get(joiner, 0):  # the newest ask of it heard, forwarded or not
            note(self.asks, joiner, ask, MAX_PENDING_JOINS)
        if joiner in members or joiner in self.joiners:
            return False
        if joiner in self.gone:
            if not direct:
                return False
            self.gone.discard(joiner)
        self.joiners[joiner] = None
        return True

    def withdraw(
        self, joiner: NodeId, ask: int, members: tuple[NodeId, ...], now: int
    ) -> bool | None:
        """`joiner` gave its join `ask` up and stopped: its request is dropped. True when
        the membership holds it (a decision here added it: the group goes on without
        it); None when refused — a member this node never saw added (a founder, or one
        added before this node joined: a forged or stale frame), or one added by a later
        ask than the one withdrawn."""
        if joiner in members and (joiner not in self.added
                                  or ask < self.asks.get(joiner, 0)):
            self.refused += 1
            return None
        self.joiners.pop(joiner, None)
        held = self.withdrawn.get(joiner, (0, 0))[0]
        note(self.withdrawn, joiner, (max(ask, held), now), MAX_PENDING_JOINS)
        return joiner in members

    def majority(self, members: tuple[NodeId, ...]) -> int:
        """A majority of the `members` that did not withdraw the ask that added them (as
        far as this node knows): they stopped without acting in the view. Two such
        quorums share a live member whatever withdrawals each node heard of, since every
        withdrawal is real; counting the withdrawn as agreeing would not (two members
        that each counted two withdrawn joiners of a view of four decided apart)."""
        withdrawn = sum(1 for m in members if self.withdrew(m)) if self.withdrawn else 0
        return (len(members) - withdrawn) // 2 + 1

    def withdrew(self, member: NodeId) -> bool:
        """Whether `member`, added by a decision here, withdrew the ask that added it
        (the newest ask of it heard here; none heard: not known to, so not counted)."""
        given_up = self.withdrawn.get(member)
        ask = self.asks.get(member, 0)
        return given_up is not None and member in self.added and 0 < ask <= given_up[0]

    def note_leave(self, leaver: NodeId, last: int) -> None:
        self.leavers[leaver] = max(last, self.leavers.get(leaver, 0))

    def pending(self) -> bool:
        return bool(self.joiners or self.leavers)

    def changes(
        self, members: tuple[NodeId, ...], next_after: Mapping[NodeId, int],
        suspects: Iterable[NodeId], cut_short: Iterable[NodeId] = (),
    ) -> tuple[tuple[NodeId, ...], tuple[NodeId, ...]]:
        """(remove, add) this node would propose, given per origin the first seq that
        would still be undecided after the batch's ids. A member is removed only in a
        batch that holds all of its messages this node has (none is `cut_short` by the
        batch limit): what it sent and nobody proposed before its removal is dropped,
        and a leaver must have delivered its own broadcasts before it departs."""
        waiting = set(cut_short)
        suspected = [m for m in members if m in set(suspects) and m != self.node
                     and m not in waiting]
        # A side that suspects a majority of the view is the minority of a partition (or
        # the group has lost its quorum): removing the others would only make sense if
        # they had all crashed, and if this proposal were decided after the partition
        # heals it would expel the majority. Leave removals alone — but those of joiners
        # that withdrew (they stopped: they are on no other side).
        if len(members) - len(suspected) < self.majority(members):
            suspected = [m for m in suspected if self.withdrew(m)]
        leaving = [m for m in members if m in self.leavers and m not in waiting
                   and next_after.get(m, 1) > self.leavers[m]]
        remove = [m for m in members if m in suspected or m in leaving]
        add = [j for j in self.joiners if j not in members and j not in self.gone]
        return tuple(remove), tuple(add)

    # -- decisions -----------------------------------------------------------------------
    def decided(
        self, k: int, batch: Batch, before: tuple[NodeId, ...], after: tuple[NodeId, ...],
        decided_next: Mapping[NodeId, int],
    ) -> None:
        """Instance k decided `batch`, taking the membership from `before` to `after`."""
        for m in before:
            if m not in after:
                self.gone.add(m)
                self.leavers.pop(m, None)
                self.welcomes.pop(m, None)
                self.added.discard(m)
                self.asks.pop(m, None)
        added = [a for a in after if a not in before]
        for a in added:
            self.joiners.pop(a, None)
            self.added.add(a)
        if added:
            self._cuts[k] = tuple(sorted(decided_next.items()))

    def draft(
        self, k: int, before: tuple[NodeId, ...], view: View
    ) -> int | None:
        """Where this node delivers instance k that added members to `before` giving
        `view`: a token for the snapshot to take (None when this node was not an old
        member, or nobody was added)."""
        joiners = tuple(m for m in view.members if m not in before)
        cut = self._cuts.pop(k, None)
        if not joiners or cut is None or self.node not in before:
            return None
        old = [m for m in view.members if m in before]
        self._tokens += 1
        self._drafts[self._tokens] = _Draft(k, joiners, view, cut, send=old[0] == self.node)
        return self._tokens

    def welcome(
        self, token: int, state: bytes,
        pending: Callable[[Mapping[NodeId, int]], list[tuple[NodeId, int, bytes]]],
    ) -> list[tuple[NodeId, KeptWelcome]]:
        """The snapshot for `token` arrived: keep a welcome for each joiner (with the
        `pending` bodies at or above the cut); return the ones to send now."""
        draft = self._drafts.pop(token, None)
        if draft is None and token in self._void:
            self._void.discard(token)
            return []
        if draft is None:
            raise LocalProtocolError(f"{self.node} took no snapshot with token {token}")
        view = draft.view
        cut = JoinCut({o: s - 1 for o, s in draft.cut if s > 1})
        held = pending(dict(draft.cut))
        kept = KeptWelcome(draft.k, MWelcome(view.view_id, draft.k, list(view.members), cut,
                                             state), Bodies(held) if held else None)
        out = []
        for joiner in draft.joiners:
            if joiner in view.members:
                self.welcomes[joiner] = kept
                if draft.send:
                    out.append((joiner, kept))
        return out

    def joiner_progress(self, joiner: NodeId, delivered: int) -> None:
        """The joiner reports instances up to `delivered`: at its welcome's k or past it,
        it has installed the state, so the kept copy can go."""
        kept = self.welcomes.get(joiner)
        if kept is not None and delivered >= kept.k:
            del self.welcomes[joiner]
