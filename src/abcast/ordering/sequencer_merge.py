"""Extended virtual synchrony for the sequencer family (`evs`): every partition goes on in
views of its own, and partitions that meet again merge into one view, with an
application hook that merges their states.

Rules. Split: a flush needs no majority, view ids are congruent to the coordinator's
hash (abcast.ordering.sequencer_flush.evs_view_id), delivery is SAFE over the whole view,
and a side's flush keeps past the highest safe point heard only its own origins'
messages. Heal: a view's leader probes the nodes its lineage lost (`MProbe`); the lowest
node of both views coordinates the merge: `MPrepare`, each member freezes and answers
`MState`; each side's outcome goes to its lowest member (`MOutcome`), which delivers it
in its old view and sends the application's state (`MSideState`); the coordinator asks
for the merged state (`MergeStates`) and sends `MInstall`. A merge not concluded in
`timeout_us` is given up (`MAbort`). docs/orderings.md has the full rules and what they
do not handle.
"""

from __future__ import annotations

from typing import Final

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
from abcast.ordering import sequencer_flush as flush
from abcast.ordering import sequencer_join as membership
from abcast.ordering import sequencer_numbering as numbering
from abcast.ordering._flush_outcome import fresh_number, outcome
from abcast.ordering.sequencer_state import Flow, MergeRound, Role, SequencerState
from abcast.ordering.sequencer_wire import (
    MERGE_HEADERS,
    MAbort,
    MInstall,
    MOutcome,
    MPrepare,
    MProbe,
    MSide,
    MSideState,
    MState,
    VcBusy,
    VcPrepare,
)

MERGE_PROBE: Final = "merge-probe"
MERGE_TIMEOUT: Final = "merge-timeout"
MERGE_WAIT: Final = "merge-wait"


def dispatch(st: SequencerState, event: Event, now: int) -> list[Effect] | None:
    """The events evs takes before membership and the flush see them; None for the
    others."""
    effects: list[Effect]
    match event:
        case SnapshotTaken(token, state) if token in st.outcome_tokens:
            effects = _side_snapshot(st, token, state)
        case StatesMerged(token, state):
            effects = _states_merged(st, token, state)
        case TimerFired(key) if key == MERGE_PROBE:
            effects = _probe(st)
        case TimerFired(key) if key == MERGE_TIMEOUT:
            effects = _give_up(st) if st.merge is not None else []
        case TimerFired(key) if key == MERGE_WAIT:
            # Answered a merge that neither concluded nor was called off in twice its
            # coordinator's time limit (its `MAbort` overtook its `MPrepare`, say).
            stuck = st.merging is not None and st.merge is None
            effects = _thaw(st) if stuck else []
        case Received(sender, header, _) if isinstance(header, MERGE_HEADERS):
            if st.role not in (Role.MEMBER, Role.LEAVING):
                return []
            effects = _on_message(st, sender, header)
        case Received(sender, VcBusy(), _) if _busy_elsewhere(st, sender):
            # It is forming another side's view: go on without it (a merge follows).
            st.suspects.add(sender)
            effects = flush.on_suspect(st, sender)
        case Received(_, VcPrepare(), _) if st.merging is not None:
            st.deferred.append(event)  # answered once this merge is settled
            return []
        case Suspected(node) if st.merging is not None and node == st.merging[2]:
            return _thaw(st) + st.hub.handle(event, now)
        case Suspected(node) if st.merge is not None and node in st.merge.members:
            return _give_up(st) + st.hub.handle(event, now)
        case _:
            return None
    return effects + membership.after_event(st)


def _busy_elsewhere(st: SequencerState, sender: NodeId) -> bool:
    running = st.flush
    return running is not None and sender in running.members and sender != st.node


def _on_message(st: SequencerState, sender: NodeId, header: object) -> list[Effect]:
    match header:
        case MProbe(view_id, members):
            return _on_probe(st, sender, view_id, tuple(members))
        case MPrepare(target, attempt, members):
            return _on_merge_prepare(st, sender, target, attempt, tuple(members))
        case MState() as state:
            return _on_merge_state(st, sender, state)
        case MOutcome(target, attempt, side) if st.merging == (target, attempt, sender):
            return _deliver_side(st, target, attempt, side, sender)
        case MSideState(target, attempt, view_id, state):
            merge = st.merge
            if merge is None or (target, attempt) != (merge.target, merge.attempt):
                return []
            merge.snapshots[view_id] = state
            return _maybe_merge_states(st, merge)
        case MInstall() as install if st.merging == (install.target, install.attempt,
                                                      sender):
            return _on_merge_install(st, install)
        case MAbort(target, attempt) if st.merging == (target, attempt, sender):
            return _thaw(st)
        case MAbort(target, attempt):
            st.aborted.add((sender, target, attempt))
            return []
        case _:
            return []


def view_installed(st: SequencerState, old: View, new: View) -> list[Effect]:
    """Remember whom the new view lost, and probe for them."""
    st.lost.update({m: st.now for m in old.members if m not in new.members})
    return _arm_probe(st)


def partitioned(st: SequencerState, by: NodeId) -> list[Effect]:
    """Another side installed a view without us: a partition, not our removal. Go on
    without it (our side's own view), and merge once we meet again."""
    st.suspects.add(by)
    return flush.on_suspect(st, by)


# -- discovering the other side ------------------------------------------------------------
def _arm_probe(st: SequencerState) -> list[Effect]:
    if st.probe_armed or not st.lost:
        return []
    st.probe_armed = True
    return [SetTimer(MERGE_PROBE, st.now + st.merge_config.probe_us)]


def _probe(st: SequencerState) -> list[Effect]:
    st.probe_armed = False
    horizon = st.now - st.merge_config.probe_for_us
    st.lost = {n: t for n, t in st.lost.items() if t >= horizon}
    view = st.view
    effects: list[Effect] = []
    if (view is not None and view.leader == st.node and st.flow is Flow.STEADY
            and st.role in (Role.MEMBER, Role.LEAVING)):
        probe = MProbe(view.view_id, list(view.members))
        effects += [Send(n, probe, control=True) for n in sorted_nodes(list(st.lost))
                    if n not in view.members]
    return effects + _arm_probe(st)


def _on_probe(
    st: SequencerState, sender: NodeId, view_id: int, members: tuple[NodeId, ...]
) -> list[Effect]:
    view = st.view
    if view is None or not members or set(members) & set(view.members):
        return []  # one of ours, or an old probe of a view we merged with since
    if view.leader != st.node:
        return [Send(view.leader, MProbe(view_id, list(members)), control=True)]
    if (st.flow is not Flow.STEADY or st.merge is not None or st.merging is not None
            or st.suspects & set(view.members)):
        return []  # busy, or a flush of our own comes first; the next probe comes
    ours = [m for m in view.members if m not in st.suspects]
    union = sorted_nodes([*ours, *members])
    if union[0] == st.node:
        return _start_merge(st, view_id, union)
    other = members[0]
    last = st.probe_answered.get(other)
    if last is not None and st.now - last < st.merge_config.probe_us:
        return []
    st.probe_answered[other] = st.now
    return [Send(other, MProbe(view.view_id, list(view.members)), control=True)]


# -- the merge coordinator -----------------------------------------------------------------
def _start_merge(
    st: SequencerState, other_view_id: int, members: tuple[NodeId, ...]
) -> list[Effect]:
    view = st.view
    assert view is not None
    st.attempts = max(st.attempts, st.answered[1]) + 1
    target = flush.next_view_id(st, max(view.view_id, other_view_id) + 1)
    merge = st.merge = MergeRound(target, st.attempts, members)
    others = tuple(m for m in members if m != st.node)
    effects: list[Effect] = [
        Multicast(others, MPrepare(target, merge.attempt, list(members))),
        SetTimer(MERGE_TIMEOUT, st.now + st.merge_config.timeout_us),
    ]
    st.merging = (target, merge.attempt, st.node)
    return effects + _on_merge_state(st, st.node, _merge_state(st, target, merge.attempt))


def _merge_state(st: SequencerState, target: int, attempt: int) -> MState:
    """Freeze, and describe this member for the merge (like a flush's VcState)."""
    view = st.view
    assert view is not None
    st.go_flow(Flow.MERGING)
    st.merge_view = view.view_id
    return MState(target, attempt, list(view.members), numbering.report(st, target, attempt))


def _on_merge_state(st: SequencerState, sender: NodeId, state: MState) -> list[Effect]:
    merge = st.merge
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
        return _give_up(st)  # the other side is gone or joined us meanwhile
    view = st.view
    assert view is not None
    effects: list[Effect] = []
    for view_id, nodes in sorted(by_view.items()):
        side_nodes = sorted_nodes(nodes)
        states = [merge.states[n].state for n in side_nodes]
        first, ids, bodies, _ = outcome(states, side_nodes, view, evs=st.evs)
        side = MSide(view_id, first, [(m.origin, m.seq) for m in ids],
                     [(m.origin, m.seq, bodies[m]) for m in ids if m in bodies],
                     fresh_number(states, first + len(ids) - 1, evs=st.evs))
        merge.sides[view_id] = side
        merge.lowest[view_id] = side_nodes[0]
        for state_ in states:
            for origin, seq in state_.per_origin.items():
                merge.per_origin[origin] = max(merge.per_origin.get(origin, 0), seq)
        for mid in ids:
            merge.per_origin[mid.origin] = max(merge.per_origin.get(mid.origin, 0), mid.seq)
        if side_nodes[0] == st.node:
            effects += _deliver_side(st, merge.target, merge.attempt, side, st.node)
        else:
            effects.append(Send(side_nodes[0], MOutcome(merge.target, merge.attempt, side)))
    return effects


def _maybe_merge_states(st: SequencerState, merge: MergeRound) -> list[Effect]:
    if merge.token or set(merge.snapshots) != set(merge.sides):
        return []
    st.tokens += 1
    merge.token = st.tokens
    order = sorted(merge.sides, key=lambda v: node_sort_key(merge.lowest[v]))
    return [MergeStates(merge.token, tuple(merge.snapshots[v] for v in order))]


def _states_merged(st: SequencerState, token: int, state: bytes) -> list[Effect]:
    merge = st.merge
    if merge is None or merge.token != token:
        raise LocalProtocolError(f"{st.node} asked for no state merge with token {token}")
    next_number = max(side.next_number for side in merge.sides.values())
    install = MInstall(merge.target, merge.attempt, list(merge.members),
                       list(merge.sides.values()), state, dict(merge.per_origin),
                       next_number)
    others = tuple(m for m in merge.members if m != st.node)
    return [Multicast(others, install), *_on_merge_install(st, install)]


def _give_up(st: SequencerState) -> list[Effect]:
    merge, st.merge = st.merge, None
    if merge is None:
        return []
    others = tuple(m for m in merge.members if m != st.node)
    return [Multicast(others, MAbort(merge.target, merge.attempt)), *_thaw(st)]


# -- every member --------------------------------------------------------------------------
def _on_merge_prepare(
    st: SequencerState, sender: NodeId, target: int, attempt: int,
    members: tuple[NodeId, ...],
) -> list[Effect]:
    view = st.view
    if view is None or st.node not in members or target <= view.view_id:
        return []
    if st.suspects & set(view.members):
        return []  # our side removes them first (a crashed member would hold it up)
    if not set(view.members) <= set(members):
        return []  # it does not know our view as it is: a later probe corrects that
    if st.merging is not None:
        # Only a later attempt of the merge we answered (same coordinator, same view):
        # another merge may install a view we are listed in while we went on with
        # this one — whose install may still be on its way. Its coordinator gives
        # up, and its next probe finds the merged view.
        if st.merging[2] != sender or st.merging[0] != target:
            return []
        if st.merging[1] >= attempt:
            return []
    elif st.flow is not Flow.STEADY or st.merge is not None:
        return []  # a flush of our own is running; the coordinator tries again
    if (sender, target, attempt) in st.aborted:
        return []
    st.merging = (target, attempt, sender)
    wait = SetTimer(MERGE_WAIT, st.now + 2 * st.merge_config.timeout_us)
    return [Send(sender, _merge_state(st, target, attempt)), wait]


def _deliver_side(
    st: SequencerState, target: int, attempt: int, side: MSide, coordinator: NodeId
) -> list[Effect]:
    """Deliver our side's outcome in our old view, then snapshot the state it leaves."""
    effects = _apply_side(st, side)
    st.tokens += 1
    st.outcome_tokens[st.tokens] = (target, attempt, side.view_id, coordinator)
    return [*effects, TakeSnapshot(st.tokens)]


def _side_snapshot(st: SequencerState, token: int, state: bytes) -> list[Effect]:
    target, attempt, view_id, coordinator = st.outcome_tokens.pop(token)
    if coordinator != st.node:
        return [Send(coordinator, MSideState(target, attempt, view_id, state))]
    merge = st.merge
    if merge is None or (merge.target, merge.attempt) != (target, attempt):
        return []
    merge.snapshots[view_id] = state
    return _maybe_merge_states(st, merge)


def _apply_side(st: SequencerState, side: MSide) -> list[Effect]:
    numbering.settle(st, side.first, side.ids, side.bodies)
    st.safe_upto = max(st.safe_upto, side.first + len(side.ids) - 1)
    return numbering.deliver_ready(st, thawed=True)


def _on_merge_install(st: SequencerState, install: MInstall) -> list[Effect]:
    old = st.view
    sides = {side.view_id: side for side in install.sides}
    side = sides.get(st.merge_view)
    if old is None or side is None:
        return []
    effects = _apply_side(st, side)
    view = View(install.target, tuple(install.members))
    delivered = dict(st.delivered)
    for origin, seq in install.per_origin.items():
        delivered[origin] = max(delivered.get(origin, 0), seq)
    last = install.next_number - 1
    # Like a joiner's welcome: the merge view starts from the merged cut.
    st.delivered = delivered
    st.numbers, st.log, st.deps_of, st.reports = {}, {}, {}, {}
    # Bodies nobody delivered stay (members that installed the merge view first may
    # already send in it); our own go out again, same ids, for those that lost them.
    st.bodies = {m: b for m, b in st.bodies.items() if m.seq > delivered.get(m.origin, 0)}
    resend = sorted((m.seq, b) for m, b in st.bodies.items() if m.origin == st.node)
    for seq, _ in resend:
        del st.bodies[MsgId(st.node, seq)]
    st.next_delivery = install.next_number
    st.stable = st.reported = st.safe_upto = last
    st.go_flow(Flow.STEADY)
    st.merge = st.merging = None
    st.flush = None
    st.last_install = None
    st.answered = (install.target, install.attempt)
    st.answered_for = {}
    st.attempts = max(st.attempts, install.attempt)
    st.suspects -= set(view.members) - set(old.members)
    st.merges += 1
    effects += [InstallView(view), InstallState(install.state, merged=True)]
    effects += flush.adopt_view(st, view, last)
    for seq, body in resend:
        effects += numbering.broadcast(st, seq, body)
    effects += _resume(st, view)
    # A flush of the merge view may have asked while we were still merging.
    deferred, st.deferred = st.deferred, []
    for event in deferred:
        effects += st.hub.handle(event, st.now)
    return effects


def _thaw(st: SequencerState) -> list[Effect]:
    """The merge is off: go on in our view (a flush heard meanwhile goes first)."""
    st.merging = None
    st.merge = None
    st.go_flow(Flow.STEADY)
    view = st.view
    effects: list[Effect] = []
    if view is not None and view.leader == st.node:
        # An outcome we delivered may have numbered past what we had: number on from
        # whichever is higher.
        last = max(st.next_number - 1, st.delivered_through())
        effects += numbering.take_over(st, last, st.deps_of)
    deferred, st.deferred = st.deferred, []
    for event in deferred:
        effects += st.hub.handle(event, st.now)
    if view is not None and st.flow is Flow.STEADY:
        effects += _resume(st, view)
        if st.suspects & set(view.members):  # suspected meanwhile: remove them now
            effects += flush.coordinate(st, view.view_id + 1)
    return effects


def _resume(st: SequencerState, view: View) -> list[Effect]:
    """Packets kept while frozen, then our own broadcasts queued meanwhile."""
    return flush.replay_early(st, view) + flush.send_queued(st)
