"""Extended virtual synchrony in the membership layer (`partitions="evs"`): every side of
a partition goes on in views of its own, and sides that meet again merge into one view,
with the application's `merge_state` hook merging their states.

Rules. Split (abcast.membership.flush_coordinator, abcast.membership.layer): a flush
needs no majority; view ids are congruent to the coordinator's hash (`evs_view_id`), so
two sides never install the same id; a member another side left out (`Excluded`,
`MFarewell`; a leaver, by a flush it did not answer) suspects it and goes on, it is not
cut off; each side's flush settles its own reports (`MergingOrdering.settle_side`: the
sequencer keeps, past the highest safe point heard, only its side's origins). Heal, here:

1. Discovery (abcast.membership.discovery): a view's coordinator probes the nodes its
   lineage lost (`MMergeProbe`, every `probe_us` for `probe_for_us`, then every
   `probe_slow_us` for ever; at most MAX_LOST of them, leavers not); a member passes a
   probe to its coordinator; the lowest node of both views coordinates the merge —
   unless a side with a lower node still probed it within two probe periods
   (`lower_probes`): that node merges the sides one by one, and a merge of its own would
   cross it. A node's view ids only grow: a probe naming a node heard in a later view
   since (`seen_in`, from the node itself: a view's list names members that may never
   install it) is stale, dropped.
2. `MMergePrepare(target, attempt, members)` to both sides; each member that is neither
   frozen nor flushing, and whose view the coordinator knows whole, freezes and answers
   `MMergeState` with its view and its ordering's report. One that does not know it
   whole, or answers another merge (it keeps the prepare and answers once that merge
   is off, if heard within the time limit), says its view (`MMergeDecline`). A later
   view of the other side than the probe named (probes come late after a heal, oldest
   first) starts the merge again with the view as it is.
3. With every state in, the coordinator groups them by view (fewer than two sides: give
   up) and settles each side (`settle_side`); each side's outcome goes to its lowest
   member (`MMergeOutcome`), which delivers it in its old view and sends the state it
   leaves (`MMergeSideState`).
4. With every side's state, the coordinator asks the application to merge them
   (`MergeStates`, the side of the lowest member first) and sends `MMergeInstall`:
   each member delivers its side's outcome in its old view, installs the merge view
   with the merged state (`InstallState(merged=True)`) and restarts its ordering from
   the merge cut (`merge_cut`, `start_merged`).

A merge not concluded in `merge_timeout_us` is given up (`MMergeAbort`); a member that
answered one and hears nothing for `merge_wait` (that limit plus the channel's
retransmissions, abcast.membership.state) thaws; an install later still is logged and
dropped. Past step 3 the abort carries the sides' outcomes and each side keeps its
own (its lowest member delivered it): every member delivers it in its view and thaws;
the lowest member passes it on as it thaws, should the abort not come. An earlier
attempt's, come after a member answered a later one, is kept without a thaw. A flush prepare
heard while merging waits for the merge. What a peer sends wrong is a
RemoteProtocolError; what a member notes of other merges is bounded (MAX_MERGE_NOTES).
What it does not handle: docs/orderings.md ("evs").
"""

from __future__ import annotations

import logging
import zlib
from typing import Any, Final

from abcast.codec import EMPTY
from abcast.effects import (
    Effect,
    InstallState,
    InstallView,
    MergeStates,
    Multicast,
    Send,
    SetTimer,
    TakeSnapshot,
)
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.events import Received, ViewInstalled
from abcast.ids import NodeId, View, node_sort_key, sorted_nodes
from abcast.membership.api import MergingOrdering
from abcast.membership.discovery import Discovery
from abcast.membership.state import (
    MERGE_TIMEOUT,
    MERGE_WAIT,
    MembershipState,
    MemberSteps,
    MergeRound,
    Part,
    note,
)
from abcast.membership.wire import (
    MMergeAbort,
    MMergeDecline,
    MMergeInstall,
    MMergeOutcome,
    MMergePrepare,
    MMergeProbe,
    MMergeSideState,
    MMergeState,
    SideOutcome,
)

_log = logging.getLogger(__name__)

#: evs: view ids are congruent to the coordinator's hash modulo this
VIEW_ID_SPAN: Final = 1 << 20


def evs_view_id(target: int, coordinator: NodeId) -> int:
    """The smallest id at least `target` that is congruent to `coordinator`'s hash: two
    sides of a partition (different coordinators) never install the same view id."""
    residue = zlib.crc32(coordinator.encode()) % VIEW_ID_SPAN
    base = target - target % VIEW_ID_SPAN + residue
    return base if base >= target else base + VIEW_ID_SPAN


class Merger(Part):
    """The merge of sides (a part of the membership layer, under evs only): it reads and
    writes the layer's state `s` and takes the member's steps from `member`; finding the
    sides to merge is its part's (`discovery`, abcast.membership.discovery)."""

    def __init__(self, s: MembershipState, member: MemberSteps) -> None:
        super().__init__(s, member)
        self.discovery = Discovery(s, member, self)

    @property
    def ordering(self) -> MergingOrdering:
        ordering = self.s.ordering
        assert isinstance(ordering, MergingOrdering)
        return ordering

    @property
    def busy(self) -> bool:
        return self.s.merge is not None or self.s.merging is not None

    def inspect(self) -> dict[str, Any]:
        """The merge under way, for `Membership.inspect()` (plain data)."""
        s = self.s
        out: dict[str, Any] = {"lost": sorted_nodes(list(s.lost)),
                               "side_delivered": s.side_delivered}
        if s.merging is not None:
            target, attempt, coordinator = s.merging
            out["answered"] = {"target": target, "attempt": attempt,
                               "coordinator": coordinator, "view_id": s.merge_view}
        merge = s.merge
        if merge is not None:
            step = ("states" if not merge.sides else "side states" if not merge.token
                    else "state merge")
            out["coordinating"] = {
                "target": merge.target, "attempt": merge.attempt, "step": step,
                "members": list(merge.members), "reported": sorted_nodes(list(merge.states)),
                "sides": sorted(merge.sides), "side_states": sorted(merge.snapshots)}
        return out

    # -- the merge coordinator -----------------------------------------------------------
    def start(self, other_view_id: int, members: tuple[NodeId, ...]) -> list[Effect]:
        s = self.s
        view = s.view
        assert view is not None
        s.attempts = max(s.attempts, s.answered[1]) + 1
        target = evs_view_id(max(view.view_id, other_view_id) + 1, s.node)
        merge = s.merge = MergeRound(target, s.attempts, members, other_view_id)
        s.merges_coordinated += 1
        others = tuple(m for m in members if m != s.node)
        effects: list[Effect] = [
            Multicast(others, MMergePrepare(target, merge.attempt, list(members))),
            SetTimer(MERGE_TIMEOUT, s.now + s.config.merge_timeout_us),
        ]
        s.merging = (target, merge.attempt, s.node)
        return effects + self._on_state(s.node, self._freeze(target, merge.attempt))

    def _freeze(self, target: int, attempt: int) -> MMergeState:
        """Freeze, and describe this member for the merge."""
        s = self.s
        view = s.view
        assert view is not None
        s.frozen = True
        s.merge_view = view.view_id
        return MMergeState(target, attempt, view.view_id, list(view.members),
                           s.ordering.report())

    def _on_state(self, sender: NodeId, state: MMergeState) -> list[Effect]:
        s = self.s
        merge = s.merge
        if merge is None or (state.target, state.attempt) != (merge.target, merge.attempt):
            return []  # a merge given up meanwhile
        if sender not in merge.members:
            raise RemoteProtocolError(f"merge state from {sender}, not in {merge.members}")
        if sender not in state.members:
            raise RemoteProtocolError(f"merge state from {sender} of a view without it: "
                                      f"{state.members}")
        same_view = next((a for a in merge.states.values() if a.view_id == state.view_id), None)
        if same_view is not None and same_view.members != state.members:
            raise RemoteProtocolError(
                f"merge state from {sender} lists view {state.view_id} as {state.members}, "
                f"another member as {same_view.members}")
        if merge.sides:
            return []
        merge.states[sender] = state
        stale = self._stale_probe(merge, state.view_id, state.members)
        if stale is not None:
            return stale
        if set(merge.states) != set(merge.members):
            return []
        by_view: dict[int, list[NodeId]] = {}
        for node, answer in merge.states.items():
            by_view.setdefault(answer.view_id, []).append(node)
        if len(by_view) < 2:
            return self.give_up()  # the other side is gone or joined us meanwhile
        effects: list[Effect] = []
        outcomes = []
        spent = 0
        for view_id, nodes in sorted(by_view.items()):
            side_nodes = sorted_nodes(nodes)
            answer = merge.states[side_nodes[0]]
            old = View(view_id, tuple(answer.members))
            reports = [merge.states[n].report for n in side_nodes]
            outcome, side_spent = self.ordering.settle_side(reports, side_nodes, old)
            side = SideOutcome(view_id, outcome, side_spent)
            merge.sides[view_id] = side
            merge.lowest[view_id] = side_nodes[0]
            outcomes.append(outcome)
            spent = max(spent, side_spent, *(m.stamp for m in outcome))
            if side_nodes[0] == s.node:
                effects += self._deliver_side(merge.target, merge.attempt, side, s.node)
            else:
                effects.append(Send(side_nodes[0],
                                    MMergeOutcome(merge.target, merge.attempt, side)))
        merge.cut = self.ordering.merge_cut([a.report for a in merge.states.values()],
                                            outcomes, spent)
        return effects

    def _stale_probe(self, merge: MergeRound, view_id: int, members: list[NodeId]
                     ) -> list[Effect] | None:
        """The merge's other side is the view a probe named; a member of it that reports
        (`MMergeState`, `MMergeDecline`) a later view (ids grow along a lineage) with other
        members says the probe was stale — a retransmission the heal let through late
        (the channel keeps no order): the side has changed since, a member crashed, left
        or went to another side. Start again at once with the view as reported (or leave
        the merge to its lowest node, our probes reach it), rather than wait out the time
        limit for members that will never answer. None if the probe held."""
        s = self.s
        view = s.view
        assert view is not None
        others = set(merge.members) - set(view.members)
        reported = set(members) - set(view.members)
        if view_id == view.view_id or view_id <= merge.probed or reported == others:
            return None
        ours = [m for m in merge.members if m in view.members]
        union = sorted_nodes([*ours, *reported])
        effects = self.give_up()
        if union[0] == s.node and not (s.frozen or self.busy or s.flush is not None):
            effects += self.start(view_id, union)
        return effects

    def _maybe_merge_states(self, merge: MergeRound) -> list[Effect]:
        if merge.token or set(merge.snapshots) != set(merge.sides):
            return []
        self.s.tokens += 1
        merge.token = self.s.tokens
        order = sorted(merge.sides, key=lambda v: node_sort_key(merge.lowest[v]))
        return [MergeStates(merge.token, tuple(merge.snapshots[v] for v in order))]

    def states_merged(self, token: int, state: bytes) -> list[Effect]:
        s = self.s
        merge = s.merge
        if merge is None or merge.token != token or merge.cut is None:
            raise LocalProtocolError(f"{s.node} asked for no state merge with token {token}")
        install = MMergeInstall(merge.target, merge.attempt, list(merge.members),
                                list(merge.sides.values()), state, merge.cut)
        others = tuple(m for m in merge.members if m != s.node)
        return [Multicast(others, install), *self._on_install(install)]

    def give_up(self) -> list[Effect]:
        s = self.s
        merge, s.merge = s.merge, None
        if merge is None:
            return []
        others = tuple(m for m in merge.members if m != s.node)
        # Past `_on_state` the sides' outcomes are fixed and a side's lowest member may
        # have delivered its own: the abort carries them, and every side keeps its.
        sides = list(merge.sides.values())
        abort = MMergeAbort(merge.target, merge.attempt, sides)
        kept = self._keep_side(merge.target, merge.attempt, sides)
        return [Multicast(others, abort), *kept, *self.thaw()]

    # -- every member --------------------------------------------------------------------
    def _stale(self, view_id: int, members: list[NodeId]) -> bool:
        """One of `members` was heard in a later view than `view_id` since: the news is
        stale (a node's view ids only grow, whatever its lineage: a flush's id and a
        merge's are above the view it leaves)."""
        return any(self.s.seen_in.get(m, 0) > view_id for m in members)

    def _seen(self, view_id: int, members: list[NodeId], effects: list[Effect]
              ) -> list[Effect]:
        """Note that `members` were in view `view_id` (once the message was taken): only
        its sender, on its own word. Hearsay — the members a view's list names — would
        make a member that never installed the view (cut off after it answered the
        merge, docs/orderings.md, Not handled) stale for ever to us: its lineage's ids
        stay below that view's, and its side's probes would be dropped (seed 33 of
        `--evs --flapping --rate 5`: the sides never merged)."""
        seen = self.s.seen_in
        for m in members:
            if seen.get(m, 0) < view_id:
                note(seen, m, view_id)
        return effects

    def on_message(self, sender: NodeId, header: Any) -> list[Effect]:
        s = self.s
        match header:
            case MMergeProbe(view_id, members):
                if self._stale(view_id, members):
                    return []  # a probe retransmitted late: its view is gone
                return self._seen(view_id, [sender] if sender in members else [],
                                  self.discovery.on_probe(sender, view_id, tuple(members)))
            case MMergePrepare(target, attempt, members):
                if sender not in members or s.node not in members:
                    raise RemoteProtocolError(
                        f"merge prepare from {sender} for {members}, without it or us")
                return self._on_prepare(sender, target, attempt, tuple(members))
            case MMergeState(view_id=view_id, members=members):
                effects = self._on_state(sender, header)
                return self._seen(view_id, [sender], effects) if sender in members else effects
            case MMergeDecline(target, attempt, view_id, members):
                if sender not in members:
                    raise RemoteProtocolError(f"merge decline from {sender} of a view "
                                              f"without it: {members}")
                self._seen(view_id, [sender], [])
                merge = s.merge  # a member's view, as it is
                if (merge is None or (target, attempt) != (merge.target, merge.attempt)
                        or sender not in merge.members or merge.sides):
                    return []  # a merge given up meanwhile, or past its states
                return self._stale_probe(merge, view_id, members) or []
            case MMergeOutcome(target, attempt, side) if s.merging == (target, attempt,
                                                                       sender):
                if side.view_id != s.merge_view:
                    raise RemoteProtocolError(
                        f"{sender} sent the outcome of view {side.view_id} to a member of "
                        f"view {s.merge_view}")
                return self._deliver_side(target, attempt, side, sender)
            case MMergeSideState(target, attempt, view_id, state):
                merge = s.merge
                if merge is None or (target, attempt) != (merge.target, merge.attempt):
                    return []  # given up meanwhile
                if merge.lowest.get(view_id) != sender:
                    raise RemoteProtocolError(
                        f"side state of view {view_id} from {sender}, not its lowest member")
                merge.snapshots[view_id] = state
                return self._maybe_merge_states(merge)
            case MMergeInstall() as install if s.merging == (install.target, install.attempt,
                                                              sender):
                return self._on_install(install)
            case MMergeInstall(target, attempt) | MMergeOutcome(target, attempt) if (
                    s.merging is not None and s.merging[:2] == (target, attempt)):
                # Merge ids are congruent to their coordinator's hash: no other node
                # coordinates this one.
                raise RemoteProtocolError(
                    f"{type(header).__name__} of merge {target} (attempt {attempt}) from "
                    f"{sender}, not its coordinator {s.merging[2]}")
            case MMergeInstall(target) | MMergeOutcome(target) if (
                    s.view is not None and target <= s.view.view_id
                    and sender not in s.view.members):
                raise RemoteProtocolError(
                    f"merge message for old view {target} from {sender}, not in {s.view}")
            case MMergeInstall(target, attempt) if s.merge_given_up == (target, attempt,
                                                                         sender):
                # Not a peer's mistake: our wait (`merge_wait`, derived from the channel's
                # retransmission bound) ran out first. We went on in our view.
                s.merge_installs_late += 1
                _log.warning("%s got %s's install of merge view %d after it gave the merge "
                             "up: dropped (it goes on in view %s)", s.node, sender, target,
                             s.view.view_id if s.view is not None else None)
                return []
            case MMergeAbort(target, attempt, sides) if sides and all(
                    x.view_id != s.merge_view for x in sides) and (
                    s.merging == (target, attempt, sender) or self._passed_on(
                        sender, target, attempt)):
                raise RemoteProtocolError(
                    f"{sender} gave merge {target} up with the outcomes of views "
                    f"{[x.view_id for x in sides]}, not of ours ({s.merge_view})")
            case MMergeAbort(target, attempt, sides) if s.merging == (target, attempt,
                                                                     sender):
                return self._keep_side(target, attempt, sides) + self.thaw()
            case MMergeAbort(target, attempt, sides) if sides and self._passed_on(
                    sender, target, attempt):
                # Our side's lowest member passes on the outcome it delivered: the
                # coordinator's abort may never come (it crashed, or we stopped waiting).
                if s.side_kept == (target, attempt):
                    return []  # the abort brought it first
                if s.merging is not None and attempt < s.merging[1]:
                    # An earlier attempt's outcome, come after we answered a later one
                    # (its coordinator gave the earlier up once the side delivered it):
                    # keep it, and wait for the later attempt, which may install a view
                    # that lists us.
                    return self._keep_side(target, attempt, sides)
                if s.merging is not None:
                    return self._keep_side(target, attempt, sides) + self.thaw()
                if s.ordering.stable_point() != s.thawed_at:
                    _log.warning("%s delivered in view %d since it gave merge %d up: the "
                                 "side's outcome from %s comes too late, dropped", s.node,
                                 s.merge_view, target, sender)
                    return []
                # Thawed, nothing delivered since: take it now, keeping what the side's
                # sequencer numbered since (it took our view afresh after the outcome).
                effects = self._keep_side(target, attempt, sides)
                s.side_delivered = False
                return effects
            case MMergeAbort(target, attempt):
                note(s.merge_aborted, (sender, target, attempt), None)
                return []
            case _:
                return []  # a merge we left for another, or given up

    def _on_prepare(
        self, sender: NodeId, target: int, attempt: int, members: tuple[NodeId, ...]
    ) -> list[Effect]:
        s = self.s
        view = s.view
        if view is None:
            return []
        if target <= view.view_id or not set(view.members) <= set(members):
            # It does not know our view as it is (its probe was stale, or this prepare
            # is): tell it. (A coordinator past this merge drops the answer.)
            return [Send(sender, MMergeDecline(target, attempt, view.view_id,
                                               list(view.members)))]
        if s.suspects & set(view.members):
            return []  # our side removes them first (a crashed member would hold it up)
        if s.merging is not None:
            # Now only a later attempt of the merge we answered (same coordinator, same
            # view): another merge may install a view we are listed in while we went on
            # with this one. Any other waits until ours is off (its abort, which may
            # carry our side's outcome, can come after this: the channel keeps no order)
            # and is answered then, if still current; its coordinator may be waiting.
            if s.merging[2] == sender and s.merging[1] >= attempt:
                return []
            if s.merging[2] != sender or s.merging[0] != target or s.side_delivered:
                return self._defer_prepare(sender, target, attempt, members)
        elif s.frozen or s.merge is not None or s.flush is not None:
            return []  # a flush of our own is running; the coordinator tries again
        if (sender, target, attempt) in s.merge_aborted:
            return []
        s.merging = (target, attempt, sender)
        wait = SetTimer(MERGE_WAIT, s.now + s.config.merge_wait)
        return [Send(sender, self._freeze(target, attempt)), wait]

    def _defer_prepare(self, sender: NodeId, target: int, attempt: int,
                       members: tuple[NodeId, ...]) -> list[Effect]:
        """Keep a merge prepare heard while merging (the newest of each coordinator), to
        be answered once our merge is off (`thaw`) or concluded (`_on_install`); tell
        its coordinator our view meanwhile (`MMergeDecline`: its probe may have been stale)."""
        s = self.s
        view = s.view
        assert view is not None
        kept = next((e.header for _, e in s.merge_deferred if e.sender == sender
                     and isinstance(e.header, MMergePrepare)), None)
        if kept is None or kept.attempt < attempt:  # not one retransmitted late
            s.merge_deferred = [(t, e) for t, e in s.merge_deferred if e.header is not kept]
            prepare = MMergePrepare(target, attempt, list(members))
            s.merge_deferred.append((s.now, Received(sender, prepare, EMPTY)))
        return [Send(sender, MMergeDecline(target, attempt, view.view_id, list(view.members)))]

    def _deliver_side(self, target: int, attempt: int, side: SideOutcome,
                      coordinator: NodeId) -> list[Effect]:
        """Deliver our side's outcome in our old view, then snapshot the state it leaves."""
        s = self.s
        effects = self.ordering.conclude_side(side.outcome, side.spent)
        s.side_delivered = True
        s.side_kept = (target, attempt)
        s.side_to_pass = MMergeAbort(target, attempt, [side])
        s.tokens += 1
        s.side_tokens[s.tokens] = (target, attempt, side.view_id, coordinator)
        return [*effects, TakeSnapshot(s.tokens)]

    def _keep_side(self, target: int, attempt: int, sides: list[SideOutcome]
                   ) -> list[Effect]:
        """A merge given up after the sides' outcomes were fixed: deliver our side's in
        our view unless we did (its lowest member did at `MMergeOutcome`; the abort and
        that member's word may both come), so the whole side holds its numbers; `thaw`
        then has the ordering take our view afresh."""
        s = self.s
        side = next((x for x in sides if x.view_id == s.merge_view), None)
        if side is None or s.side_kept == (target, attempt):
            return []
        s.side_delivered = True
        s.side_kept = (target, attempt)
        return self.ordering.conclude_side(side.outcome, side.spent)

    def _passed_on(self, sender: NodeId, target: int, attempt: int) -> bool:
        """A side's outcome from a member of our view, for the merge we answered (still
        waiting, or given up with nothing of our view moved on since)."""
        s = self.s
        view = s.view
        if view is None or sender not in view.members or view.view_id != s.merge_view:
            return False
        # By target: a later attempt of the same merge (same views) may have come
        # between, and our side's lowest member answers none once it delivered. (The
        # abort branch thaws only for the attempt we answered, or a later one.)
        if s.merging is not None:
            return s.merging[0] == target
        given_up = s.merge_given_up
        return not s.frozen and given_up is not None and given_up[0] == target

    def side_snapshot(self, token: int, state: bytes) -> list[Effect]:
        s = self.s
        target, attempt, view_id, coordinator = s.side_tokens.pop(token)
        if coordinator != s.node:
            return [Send(coordinator, MMergeSideState(target, attempt, view_id, state))]
        merge = s.merge
        if merge is None or (merge.target, merge.attempt) != (target, attempt):
            return []
        merge.snapshots[view_id] = state
        return self._maybe_merge_states(merge)

    def _on_install(self, install: MMergeInstall) -> list[Effect]:
        s = self.s
        old = s.view
        sides = {side.view_id: side for side in install.sides}
        side = sides.get(s.merge_view)
        if old is None:
            return []
        if side is None or s.node not in install.members:
            raise RemoteProtocolError(
                f"merge install of view {install.target} without this member's side "
                f"(view {s.merge_view}) or without it: {install.members}")
        effects = self.ordering.conclude_side(side.outcome, side.spent)
        view = View(install.target, tuple(install.members))
        self.ordering.start_merged(install.cut)
        s.merge = s.merging = None
        s.side_delivered = False
        s.side_to_pass = None
        s.flush = None
        s.last_install = None
        s.frozen = False
        s.answered = (install.target, install.attempt)
        s.answered_to = s.node
        s.answered_for = {}
        s.pledged = set()
        s.attempts = max(s.attempts, install.attempt)
        s.suspects -= set(view.members) - set(old.members)
        s.merges += 1
        s.views_installed += 1
        effects += [InstallView(view), InstallState(install.state, merged=True)]
        effects += self.discovery.view_installed(old, view)
        effects += self.member.adopt(view)
        effects += self.member.resume()
        # A flush of the merge view may have asked while we were still merging.
        effects += self._replay_deferred()
        return effects + self.member.recheck()  # e.g. a member suspected meanwhile

    def on_suspect(self, node: NodeId, in_view: int = 0) -> list[Effect]:
        """A suspected merge coordinator (we thaw) or merge member (we give up); or a
        member of our view that another view (`in_view`, from its `MFarewell` or the
        detector's `Excluded`) holds now, not the merge's: it left the merge we answered,
        which can install nothing our side goes into whole. Thaw then rather than wait
        out `merge_wait` (the coordinator's abort may never come: it left the group).
        The callers that pass `in_view` have checked `node` is a member of our view."""
        s = self.s
        merging, merge = s.merging, s.merge
        if merge is not None and node in merge.members:
            return self.give_up()
        if merging is None or merge is not None:
            return []
        moved = in_view and in_view != merging[0]
        return self.thaw() if node == merging[2] or moved else []

    def defer(self, event: Received) -> list[Effect]:
        """A flush prepare heard while merging: answered once the merge is settled."""
        self.s.merge_deferred.append((self.s.now, event))
        return []

    def thaw(self) -> list[Effect]:
        """The merge is off: go on in our view (a flush heard meanwhile goes first)."""
        s = self.s
        if s.merging is not None and s.merge is None:
            s.merge_given_up = s.merging  # its install may still come (one log line)
            # ...and our side's outcome, passed on: usable while we deliver nothing
            s.thawed_at = s.ordering.stable_point()
        if s.merging is not None or s.merge is not None:
            s.merges_given_up += 1
        s.merging = None
        s.merge = None
        effects: list[Effect] = []
        if s.side_delivered and s.view is not None:
            # The side's outcome we delivered may have numbered past what we had: the
            # ordering takes our view afresh (its sequencer numbers on after it). Its
            # lowest member, which delivered it first, passes it on to the side. The
            # channel keeps no order: what it sends in the view again may come first,
            # numbered past the outcome, and waits there for it; a member that stopped
            # waiting and delivered since drops it (docs/orderings.md, "Not handled").
            s.side_delivered = False
            passed, s.side_to_pass = s.side_to_pass, None
            others = tuple(m for m in s.view.members if m != s.node)
            if passed is not None and others:
                effects.append(Multicast(others, passed))
            effects += s.ordering.handle(ViewInstalled(s.view), s.now)
        if s.frozen and s.flush is None and s.status in ("member", "leaving"):
            s.frozen = False
            s.pledged = set()
            effects += self.member.resume()
        effects += self._replay_deferred()
        return effects + self.member.recheck()  # e.g. a member suspected meanwhile

    def _replay_deferred(self) -> list[Effect]:
        """What we held back while merging, handled now; but a merge prepare heard more
        than the merge's time limit ago is dropped: its coordinator gave that merge up
        by then (it needs our state to install), and answering would freeze us for a
        merge wait (its abort may never come: it was cut off, or crashed)."""
        s = self.s
        deferred, s.merge_deferred = s.merge_deferred, []
        horizon = s.now - s.config.merge_timeout_us
        effects: list[Effect] = []
        for heard, event in deferred:
            if heard >= horizon or not isinstance(event.header, MMergePrepare):
                effects += self.member.replay(event)
        return effects
