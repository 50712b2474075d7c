"""Extended virtual synchrony for the sequencer family (`partitions="evs"`): every
partition goes on in views of its own, and partitions that meet again merge into one
view, with an application hook that merges their states.

Rules. With `evs` off this is exactly abcast.ordering.sequencer_membership (primary
partition). With it on:

Split. A flush needs no majority: each side's lowest unsuspected member coordinates
one and installs a view of that side (abcast.ordering.sequencer_failover). View ids are
unique by construction: a view's id is congruent to a 20-bit hash of its coordinator's
node id (`evs_view_id`), so two sides — whose coordinators differ — never install the
same id, and the checkers' VIEW_CONSISTENCY (one id, one member list) still holds.
Delivery is SAFE over the *whole* view (`safe_quorum`): a number is delivered only
once every member holds it, so a number anybody delivered is known on every side of a
later split. A side's flush then delivers in the old view the numbers up to the
highest safe point any of its members heard, and beyond it only messages whose origin
is on the side (the others' origins are on another side, which delivers them there).
So a message both sides deliver has one number, and total order holds across sides;
each message is delivered in one view (its origin's side's, beyond the safe point).
Members on different sides are not owed each other's deliveries after the split. A
member is never cut off: a view of another side that leaves it out (`SFarewell`,
`Excluded`) is a partition, and it goes on without that side. A leaver cut off before
its leave was taken simply departs (it does not rejoin to leave again): its own last
broadcasts are then its side's to deliver, not its own.

Heal. Each member remembers the nodes its views lost (`_lost`); a view's leader sends
them `MProbe(view id, members)` every `probe_us` for `probe_for_us`. A member that
gets a probe from a node outside its view, whose member list shares nobody with its
own, hands it to its leader. The lowest node of both views (the merge coordinator)
starts the merge; the other leader answers a probe with its own so that it does.

Merge. A flush over the union: the coordinator sends `MPrepare`; each member freezes
and answers `MState` (its view and its flush state). With every answer in, the
coordinator settles each side apart, as that side's own flush would (`outcome`), and
sends the side's lowest member its outcome (`MOutcome`); that member delivers it in
its old view and sends the application's state right after it (`TakeSnapshot`,
`MSideState`). With every side's state in, the coordinator asks the application to merge
them (`MergeStates`, answered by `StatesMerged`; the side holding the lowest member
first — a driver without a hook keeps that side's state, and the other sides'
partition-time updates are lost) and sends `MInstall`: each member delivers its side's
outcome in its old view, installs the merge view (an id above every side's), installs
the merged state (`InstallState(merged=True)`) and only then delivers in the merge view.
Delivery points per origin are merged too, so a message the other side delivered apart
is never delivered again here (the merged state holds it). A coordinator that does not
conclude within `timeout_us` (a member crashed) gives up (`MAbort`); so does a member
that suspects its coordinator, or has waited twice that long. A member answers one
merge at a time (later attempts of the same one only), and none while its own view
holds a member it suspects (its side removes it first). The next probe tries again.

What it does not handle: a member cut off (crashed, or partitioned again) after it
answered and before the merge coordinator's `MInstall` reached it — the others
install a merge view listing it, which it never installs (VIEW_CONSISTENCY reports
that); a joiner admitted by two sides at once (a bridging node in a partial
partition): both list it, and their views overlapping, they never merge; and
partitions longer than the open channel's linger time (removed nodes' links are
forgotten then, abcast.ordering._open_channel, so probes no longer get through and the
sides stay apart).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field, replace
from typing import Annotated, Final

import msgspec

from abcast.codec import Count, Header, NodeField, Seq
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
from abcast.errors import LocalProtocolError
from abcast.events import (
    Event,
    Received,
    SnapshotTaken,
    StatesMerged,
    Suspected,
    TimerFired,
)
from abcast.ids import MsgId, NodeId, View, node_sort_key, sorted_nodes
from abcast.ordering.sequencer import SOrder
from abcast.ordering.sequencer_failover import NodeList, SSafe, VcBusy, VcPrepare, VcState
from abcast.ordering.sequencer_membership import MembershipConfig, MembershipSequencer

_MANY: Final = 10_000_000
MERGE_PROBE: Final = "merge-probe"
MERGE_TIMEOUT: Final = "merge-timeout"
MERGE_WAIT: Final = "merge-wait"
#: view ids are congruent to the coordinator's hash modulo this
VIEW_ID_SPAN: Final = 1 << 20


def evs_view_id(target: int, coordinator: NodeId) -> int:
    """The smallest id at least `target` that is congruent to `coordinator`'s hash."""
    residue = zlib.crc32(coordinator.encode()) % VIEW_ID_SPAN
    base = target - target % VIEW_ID_SPAN + residue
    return base if base >= target else base + VIEW_ID_SPAN


class MProbe(Header, frozen=True):
    """A view's leader → a node its lineage lost: I lead this view; merge if you can."""

    view_id: Seq
    members: NodeList


class MPrepare(Header, frozen=True):
    """Merge coordinator → every proposed member: freeze, send me your state."""

    target: Seq
    attempt: Count
    members: NodeList


class MState(Header, frozen=True):
    """Member → merge coordinator: my view and what the flush needs of me."""

    target: Seq
    attempt: Count
    members: NodeList
    state: VcState


class MSide(msgspec.Struct, frozen=True, array_like=True):
    """What one side delivers in its last view before the merge view."""

    view_id: Count
    first: Seq  # ids[i] has number first + i
    ids: Annotated[list[tuple[NodeField, Seq]], msgspec.Meta(max_length=_MANY)]
    bodies: Annotated[list[tuple[NodeField, Seq, bytes]], msgspec.Meta(max_length=_MANY)]
    next_number: Seq  # above every number the side's sequencer may have given


class MOutcome(Header, frozen=True):
    """Merge coordinator → a side's lowest member: deliver this, then send your state."""

    target: Seq
    attempt: Count
    side: MSide


class MSideState(Header, frozen=True):
    """A side's lowest member → merge coordinator: the state after the side's outcome."""

    target: Seq
    attempt: Count
    view_id: Count
    state: bytes


class MInstall(Header, frozen=True):
    """Merge coordinator → every member: the sides' outcomes, the merge view, its state."""

    target: Seq
    attempt: Count
    members: NodeList
    sides: Annotated[list[MSide], msgspec.Meta(max_length=4096)]
    state: bytes
    per_origin: dict[NodeField, Count]  # highest seq delivered per origin, any side
    next_number: Seq  # the merge view's first number


class MAbort(Header, frozen=True):
    """Merge coordinator → every proposed member: this merge is off; thaw."""

    target: Seq
    attempt: Count


MERGE_HEADERS = MProbe | MPrepare | MState | MOutcome | MSideState | MInstall | MAbort


@dataclass(frozen=True, slots=True)
class MergeConfig:
    """Knobs in microseconds."""

    probe_us: int = 300_000  # a leader probes the nodes its lineage lost this often
    probe_for_us: int = 60_000_000  # ...for this long after losing them
    timeout_us: int = 3_000_000  # a merge not concluded by then is given up

    def __post_init__(self) -> None:
        if min(self.probe_us, self.probe_for_us, self.timeout_us) <= 0:
            raise LocalProtocolError(f"merge knobs must be positive: {self}")


@dataclass(slots=True)
class _Merge:
    """The merge coordinator's side of a merge."""

    target: int
    attempt: int
    members: tuple[NodeId, ...]
    states: dict[NodeId, MState] = field(default_factory=dict)
    sides: dict[int, MSide] = field(default_factory=dict)  # view id → outcome
    lowest: dict[int, NodeId] = field(default_factory=dict)  # view id → its lowest member
    snapshots: dict[int, bytes] = field(default_factory=dict)  # view id → state after
    per_origin: dict[NodeId, int] = field(default_factory=dict)
    token: int = 0  # the MergeStates token, once asked


class EvsSequencer(MembershipSequencer):
    """The membership sequencer, optionally with extended virtual synchrony."""

    name = "sequencer"
    header_type = MembershipSequencer.header_type | MERGE_HEADERS

    def __init__(
        self, node: NodeId, batch: int | None = None, *, safe: bool = False,
        stable_period_us: int = 50_000, membership: MembershipConfig | None = None,
        evs: bool = False, merge: MergeConfig | None = None, relay: bool = False,
    ) -> None:
        if evs and membership is not None and membership.rejoin:
            # A leaver cut off by a partition just goes (it was leaving); a member never
            # rejoins under evs, it merges.
            membership = replace(membership, rejoin=False)
        # Under evs delivery waits for the whole view to hold a number (see the rules).
        super().__init__(node, batch, safe=safe or evs, stable_period_us=stable_period_us,
                         membership=membership, relay=relay)
        self.evs = evs
        self.partitionable = evs
        self.merge_config = merge or MergeConfig()
        self._lost: dict[NodeId, int] = {}  # node our views left out → when
        self._probe_armed = False
        self._probe_answered: dict[NodeId, int] = {}  # leader → when we answered its probe
        self._merge: _Merge | None = None  # coordinating
        self._merging: tuple[int, int, NodeId] | None = None  # answered (target, attempt, by)
        self._merge_view: int = 0  # our view id when we answered
        self._outcome_tokens: dict[int, tuple[int, int, int, NodeId]] = {}
        self._deferred: list[Received] = []  # flush prepares heard while merging
        #: merges given up that we may still be asked to join (packets cross)
        self._aborted: set[tuple[NodeId, int, int]] = set()
        self.merges = 0

    # -- hooks into the fail-over flush ---------------------------------------------------
    def safe_quorum(self, view: View) -> int:
        return len(view.members) if self.evs else view.majority

    def next_view_id(self, target: int) -> int:
        return evs_view_id(target, self.node) if self.evs else target

    def outcome(
        self, states: list[VcState], members: tuple[NodeId, ...]
    ) -> tuple[int, list[MsgId], dict[MsgId, bytes], int]:
        first, ids, bodies, safe = super().outcome(states, members)
        if not self.evs:
            return first, ids, bodies, safe
        # Beyond the highest safe point heard, another side may have numbered messages
        # differently: deliver only those whose origin is here (the rules).
        heard = max(st.safe for st in states)
        side = set(members)
        kept = [m for i, m in enumerate(ids) if first + i <= heard or m.origin in side]
        return first, kept, bodies, first + len(kept) - 1

    def fresh_number(self, states: list[VcState], last: int) -> int:
        if not self.evs:
            return super().fresh_number(states, last)
        # The outcome renumbered what it kept past the safe point: orders of the old
        # sequencer still in flight must find their numbers delivered, never reused.
        known = max((number for st in states for number, _, _ in st.numbers), default=0)
        return max(last, known) + 1

    def _on_prepare(
        self, sender: NodeId, target: int, attempt: int, members: tuple[NodeId, ...]
    ) -> list[Effect]:
        view = self.view
        if (self.evs and view is not None and self._frozen and self._flush is None
                and self._answered_to not in (sender, self.node)
                and self._answered_to not in self._suspects
                and self._answered[0] > view.view_id and sender in view.members):
            # Frozen for another coordinator's view: under evs two sides may be forming
            # at once, and a member must end up in one of them only.
            return [Send(sender, VcBusy(*self._answered))]
        return super()._on_prepare(sender, target, attempt, members)

    def _maybe_coordinate(self, target: int) -> list[Effect]:
        if self._merge is not None or self._merging is not None:
            return []  # the merge settles this view; a flush may follow it
        return super()._maybe_coordinate(target)

    def adopt_view(self, view: View, last_number: int) -> list[Effect]:
        if self.evs:
            # Numbers past the flush's are the old sequencer's (maybe another side's):
            # the new one numbers afresh. Bodies from another side's origins are that
            # side's to deliver.
            self._numbers = {n: m for n, m in self._numbers.items() if n <= last_number}
            numbered = set(self._numbers.values())
            self._bodies = {m: b for m, b in self._bodies.items()
                            if m.origin in view.members or m in numbered}
            for node in view.members:
                self._lost.pop(node, None)
        return super().adopt_view(view, last_number)

    def view_installed(self, old: View, new: View, last_number: int) -> list[Effect]:
        effects = super().view_installed(old, new, last_number)
        if self.evs:
            self._lost.update({m: self._now for m in old.members if m not in new.members})
            effects += self._arm_probe()
        return effects

    def excluded(self, by: NodeId, view_id: int) -> list[Effect]:
        if not self.evs or self.status != "member":
            return super().excluded(by, view_id)  # a leaver's view without it, say
        # Another side installed a view without us: a partition, not our removal. Go on
        # without it (our side's own view), and merge once we meet again.
        self._suspects.add(by)
        return self._on_suspect(by)

    # -- events --------------------------------------------------------------------------
    def handle(self, event: Event, now: int) -> list[Effect]:
        if not self.evs or self.stopped:
            return super().handle(event, now)
        self._now = now
        effects: list[Effect]
        match event:
            case SnapshotTaken(token, state) if token in self._outcome_tokens:
                effects = self._side_snapshot(token, state)
            case StatesMerged(token, state):
                effects = self._states_merged(token, state)
            case TimerFired(key) if key == MERGE_PROBE:
                effects = self._probe()
            case TimerFired(key) if key == MERGE_TIMEOUT:
                effects = self._give_up() if self._merge is not None else []
            case TimerFired(key) if key == MERGE_WAIT:
                # Answered a merge that neither concluded nor was called off in twice its
                # coordinator's time limit (its `MAbort` overtook its `MPrepare`, say).
                stuck = self._merging is not None and self._merge is None
                effects = self._thaw() if stuck else []
            case Received(sender, header, _) if isinstance(header, MERGE_HEADERS):
                if self.status not in ("member", "leaving"):
                    return []
                effects = self._merge_message(sender, header)
            case Received(sender, VcBusy(), _) if self._busy_elsewhere(sender):
                # It is forming another side's view: go on without it (a merge follows).
                self._suspects.add(sender)
                return self._on_suspect(sender) + self._after_event()
            case Received(_, VcPrepare(), _) if self._merging is not None:
                self._deferred.append(event)  # answered once this merge is settled
                return []
            case Suspected(node) if self._merging is not None and node == self._merging[2]:
                effects = self._thaw() + super().handle(event, now)
                return effects
            case Suspected(node) if self._merge is not None and node in self._merge.members:
                return self._give_up() + super().handle(event, now)
            case _:
                return super().handle(event, now)
        return effects + self._after_event()

    def _busy_elsewhere(self, sender: NodeId) -> bool:
        flush = self._flush
        return flush is not None and sender in flush.members and sender != self.node

    def _merge_message(self, sender: NodeId, header: object) -> list[Effect]:
        match header:
            case MProbe(view_id, members):
                return self._on_probe(sender, view_id, tuple(members))
            case MPrepare(target, attempt, members):
                return self._on_merge_prepare(sender, target, attempt, tuple(members))
            case MState() as state:
                return self._on_merge_state(sender, state)
            case MOutcome(target, attempt, side) if self._merging == (target, attempt, sender):
                return self._deliver_side(target, attempt, side, sender)
            case MSideState(target, attempt, view_id, state):
                merge = self._merge
                if merge is None or (target, attempt) != (merge.target, merge.attempt):
                    return []
                merge.snapshots[view_id] = state
                return self._maybe_merge_states(merge)
            case MInstall() as install if self._merging == (install.target, install.attempt,
                                                            sender):
                return self._on_merge_install(install)
            case MAbort(target, attempt) if self._merging == (target, attempt, sender):
                return self._thaw()
            case MAbort(target, attempt):
                self._aborted.add((sender, target, attempt))
                return []
            case _:
                return []

    # -- discovering the other side ------------------------------------------------------
    def _arm_probe(self) -> list[Effect]:
        if self._probe_armed or not self._lost:
            return []
        self._probe_armed = True
        return [SetTimer(MERGE_PROBE, self._now + self.merge_config.probe_us)]

    def _probe(self) -> list[Effect]:
        self._probe_armed = False
        horizon = self._now - self.merge_config.probe_for_us
        self._lost = {n: t for n, t in self._lost.items() if t >= horizon}
        view = self.view
        effects: list[Effect] = []
        if (view is not None and view.leader == self.node and not self._frozen
                and self.status in ("member", "leaving")):
            probe = MProbe(view.view_id, list(view.members))
            effects += [Send(n, probe, control=True) for n in sorted_nodes(list(self._lost))
                        if n not in view.members]
        return effects + self._arm_probe()

    def _on_probe(
        self, sender: NodeId, view_id: int, members: tuple[NodeId, ...]
    ) -> list[Effect]:
        view = self.view
        if view is None or not members or set(members) & set(view.members):
            return []  # one of ours, or an old probe of a view we merged with since
        if view.leader != self.node:
            return [Send(view.leader, MProbe(view_id, list(members)), control=True)]
        if (self._frozen or self._merge is not None or self._merging is not None
                or self._suspects & set(view.members)):
            return []  # busy, or a flush of our own comes first; the next probe comes
        ours = [m for m in view.members if m not in self._suspects]
        union = sorted_nodes([*ours, *members])
        if union[0] == self.node:
            return self._start_merge(view_id, union)
        other = members[0]
        last = self._probe_answered.get(other)
        if last is not None and self._now - last < self.merge_config.probe_us:
            return []
        self._probe_answered[other] = self._now
        return [Send(other, MProbe(view.view_id, list(view.members)), control=True)]

    # -- the merge coordinator -------------------------------------------------------------
    def _start_merge(self, other_view_id: int, members: tuple[NodeId, ...]) -> list[Effect]:
        view = self.view
        assert view is not None
        self._attempts = max(self._attempts, self._answered[1]) + 1
        target = self.next_view_id(max(view.view_id, other_view_id) + 1)
        merge = self._merge = _Merge(target, self._attempts, members)
        others = tuple(m for m in members if m != self.node)
        effects: list[Effect] = [
            Multicast(others, MPrepare(target, merge.attempt, list(members))),
            SetTimer(MERGE_TIMEOUT, self._now + self.merge_config.timeout_us),
        ]
        self._merging = (target, merge.attempt, self.node)
        return effects + self._on_merge_state(self.node, self._merge_state(target, merge.attempt))

    def _merge_state(self, target: int, attempt: int) -> MState:
        """Freeze, and describe this member for the merge (like a flush's VcState)."""
        view = self.view
        assert view is not None
        self._frozen = True
        self._merge_view = view.view_id
        numbers = [(g, mid.origin, mid.seq) for g, (mid, _) in sorted(self._log.items())]
        numbers += [(g, mid.origin, mid.seq) for g, mid in sorted(self._numbers.items())]
        held = [(mid.origin, mid.seq, dict(self._deps_of.get(mid, {})), body)
                for mid, body in self._bodies.items()]
        held += [(mid.origin, mid.seq, {}, body) for mid, body in self._log.values()]
        state = VcState(target, attempt, view.view_id, self.delivered_through(),
                        dict(self._delivered), numbers, held, 0, self._safe_upto)
        return MState(target, attempt, list(view.members), state)

    def _on_merge_state(self, sender: NodeId, state: MState) -> list[Effect]:
        merge = self._merge
        if merge is None or (state.target, state.attempt) != (merge.target, merge.attempt):
            return []
        if sender not in merge.members or merge.sides:
            return []
        merge.states[sender] = state
        if set(merge.states) != set(merge.members):
            return []
        by_view: dict[int, list[NodeId]] = {}
        for node, answer in merge.states.items():
            by_view.setdefault(answer.state.view_id, []).append(node)
        if len(by_view) < 2:
            return self._give_up()  # the other side is gone or joined us meanwhile
        effects: list[Effect] = []
        for view_id, nodes in sorted(by_view.items()):
            side_nodes = sorted_nodes(nodes)
            states = [merge.states[n].state for n in side_nodes]
            first, ids, bodies, _ = self.outcome(states, side_nodes)
            side = MSide(view_id, first, [(m.origin, m.seq) for m in ids],
                         [(m.origin, m.seq, bodies[m]) for m in ids if m in bodies],
                         self.fresh_number(states, first + len(ids) - 1))
            merge.sides[view_id] = side
            merge.lowest[view_id] = side_nodes[0]
            for st in states:
                for origin, seq in st.per_origin.items():
                    merge.per_origin[origin] = max(merge.per_origin.get(origin, 0), seq)
            for mid in ids:
                merge.per_origin[mid.origin] = max(merge.per_origin.get(mid.origin, 0), mid.seq)
            if side_nodes[0] == self.node:
                effects += self._deliver_side(merge.target, merge.attempt, side, self.node)
            else:
                effects.append(Send(side_nodes[0], MOutcome(merge.target, merge.attempt, side)))
        return effects

    def _maybe_merge_states(self, merge: _Merge) -> list[Effect]:
        if merge.token or set(merge.snapshots) != set(merge.sides):
            return []
        self._tokens += 1
        merge.token = self._tokens
        order = sorted(merge.sides, key=lambda v: node_sort_key(merge.lowest[v]))
        return [MergeStates(merge.token, tuple(merge.snapshots[v] for v in order))]

    def _states_merged(self, token: int, state: bytes) -> list[Effect]:
        merge = self._merge
        if merge is None or merge.token != token:
            raise LocalProtocolError(f"{self.node} asked for no state merge with token {token}")
        next_number = max(side.next_number for side in merge.sides.values())
        install = MInstall(merge.target, merge.attempt, list(merge.members),
                           list(merge.sides.values()), state, dict(merge.per_origin),
                           next_number)
        others = tuple(m for m in merge.members if m != self.node)
        return [Multicast(others, install), *self._on_merge_install(install)]

    def _give_up(self) -> list[Effect]:
        merge, self._merge = self._merge, None
        if merge is None:
            return []
        others = tuple(m for m in merge.members if m != self.node)
        return [Multicast(others, MAbort(merge.target, merge.attempt)), *self._thaw()]

    # -- every member ----------------------------------------------------------------------
    def _on_merge_prepare(
        self, sender: NodeId, target: int, attempt: int, members: tuple[NodeId, ...]
    ) -> list[Effect]:
        view = self.view
        if view is None or self.node not in members or target <= view.view_id:
            return []
        if self._suspects & set(view.members):
            return []  # our side removes them first (a crashed member would hold it up)
        if not set(view.members) <= set(members):
            return []  # it does not know our view as it is: a later probe corrects that
        if self._merging is not None:
            # Only a later attempt of the merge we answered (same coordinator, same view):
            # another merge may install a view we are listed in while we went on with
            # this one — whose install may still be on its way. Its coordinator gives
            # up, and its next probe finds the merged view.
            if self._merging[2] != sender or self._merging[0] != target:
                return []
            if self._merging[1] >= attempt:
                return []
        elif self._frozen or self._merge is not None:
            return []  # a flush of our own is running; the coordinator tries again
        if (sender, target, attempt) in self._aborted:
            return []
        self._merging = (target, attempt, sender)
        wait = SetTimer(MERGE_WAIT, self._now + 2 * self.merge_config.timeout_us)
        return [Send(sender, self._merge_state(target, attempt)), wait]

    def _deliver_side(
        self, target: int, attempt: int, side: MSide, coordinator: NodeId
    ) -> list[Effect]:
        """Deliver our side's outcome in our old view, then snapshot the state it leaves."""
        effects = self._apply_side(side)
        self._tokens += 1
        self._outcome_tokens[self._tokens] = (target, attempt, side.view_id, coordinator)
        return [*effects, TakeSnapshot(self._tokens)]

    def _side_snapshot(self, token: int, state: bytes) -> list[Effect]:
        target, attempt, view_id, coordinator = self._outcome_tokens.pop(token)
        if coordinator != self.node:
            return [Send(coordinator, MSideState(target, attempt, view_id, state))]
        merge = self._merge
        if merge is None or (merge.target, merge.attempt) != (target, attempt):
            return []
        merge.snapshots[view_id] = state
        return self._maybe_merge_states(merge)

    def _apply_side(self, side: MSide) -> list[Effect]:
        for origin, seq, body in side.bodies:
            if seq > self._delivered.get(origin, 0):
                self._bodies.setdefault(MsgId(origin, seq), body)
        for offset, (origin, seq) in enumerate(side.ids):
            number = side.first + offset
            if number > self.delivered_through():
                self._numbers[number] = MsgId(origin, seq)
        self._frozen = False
        self._safe_upto = max(self._safe_upto, side.first + len(side.ids) - 1)
        effects = self._deliver_ready()
        self._frozen = True
        return effects

    def _on_merge_install(self, install: MInstall) -> list[Effect]:
        old = self.view
        sides = {side.view_id: side for side in install.sides}
        side = sides.get(self._merge_view)
        if old is None or side is None:
            return []
        effects = self._apply_side(side)
        view = View(install.target, tuple(install.members))
        delivered = dict(self._delivered)
        for origin, seq in install.per_origin.items():
            delivered[origin] = max(delivered.get(origin, 0), seq)
        last = install.next_number - 1
        # Like a joiner's welcome: the merge view starts from the merged cut.
        self._delivered = delivered
        self._numbers, self._log, self._deps_of, self._reports = {}, {}, {}, {}
        # Bodies nobody delivered stay (members that installed the merge view first may
        # already send in it); our own go out again, same ids, for those that lost them.
        self._bodies = {m: b for m, b in self._bodies.items()
                        if m.seq > delivered.get(m.origin, 0)}
        resend = sorted((m.seq, b) for m, b in self._bodies.items() if m.origin == self.node)
        for seq, _ in resend:
            del self._bodies[MsgId(self.node, seq)]
        self._next_delivery = install.next_number
        self._stable = self._reported = self._safe_upto = last
        self._frozen = False
        self._merge = self._merging = None
        self._flush = None
        self._last_install = None
        self._answered = (install.target, install.attempt)
        self._answered_for = {}
        self._attempts = max(self._attempts, install.attempt)
        self._suspects -= set(view.members) - set(old.members)
        self.merges += 1
        effects += [InstallView(view), InstallState(install.state, merged=True)]
        effects += self.adopt_view(view, last)
        for seq, body in resend:
            effects += self._broadcast(seq, body)
        effects += self._resume(view)
        # A flush of the merge view may have asked while we were still merging.
        deferred, self._deferred = self._deferred, []
        for event in deferred:
            effects += super().handle(event, self._now)
        return effects

    def _thaw(self) -> list[Effect]:
        """The merge is off: go on in our view (a flush heard meanwhile goes first)."""
        self._merging = None
        self._merge = None
        self._frozen = False
        view = self.view
        effects: list[Effect] = []
        if view is not None and view.leader == self.node:
            # An outcome we delivered may have numbered past what we had: number on from
            # whichever is higher.
            last = max(self._next_number - 1, self.delivered_through())
            effects += self.take_over(last, self._deps_of)
        deferred, self._deferred = self._deferred, []
        for event in deferred:
            effects += super().handle(event, self._now)
        if view is not None and not self._frozen:
            effects += self._resume(view)
            if self._suspects & set(view.members):  # suspected meanwhile: remove them now
                effects += self._maybe_coordinate(view.view_id + 1)
        return effects

    def _resume(self, view: View) -> list[Effect]:
        """Packets kept while frozen, then our own broadcasts queued meanwhile."""
        effects: list[Effect] = []
        early, self._early = self._early, []
        for event in early:
            ordering = isinstance(event.header, SOrder | SSafe)
            if event.sender == view.leader if ordering else event.sender in view.members:
                effects += self.handle(event, self._now)
        queued, self._queued = self._queued, []
        for seq, payload in queued:
            effects += self._broadcast(seq, payload)
        return effects

