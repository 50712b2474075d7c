"""The sequencer family's part of views under the membership layer: numbers and bodies,
out (`report`) and in (`settle`, `conclude`, `start_from`; under evs `settle_side`,
`conclude_side`, `merge_cut`, `start_merged`), taking a view (`adopt_view`), and SAFE
delivery within a view (acks to the sequencer, its safe point announced).

Rules (abcast.membership.api's methods, for a core that numbers): a member reports what
it delivered and still logs, every number it learnt (`FlushMessage.stamp`; `held=False`
when it has the number only) and every body it holds, numbered or not. The coordinator
settles the reports as the flush always did (abcast.ordering._flush_outcome): the known
numbers in number order, as far as some survivor holds the body (at least as far as
anyone delivered), then the unnumbered bodies in an order a sequencer could have given
them; each gets its number as `stamp`. Under SAFE only the messages up to the point the
old sequencer may have announced safe are `final`: every member delivers those in the old
view, the rest keep their numbers and are delivered in the next view once its sequencer
has them acked. The next view's sequencer numbers on after the outcome's last number.
A joiner starts from the cut: per origin what the state holds, the global number it is
delivered through, and the numbered messages past it (SAFE). Stability: each member's
per-origin delivery counts; what every member delivered leaves the log.

SAFE: a member acks (`SAck`) the highest number through which it holds every number and
body; the sequencer announces (`SSafe`) the highest number a quorum holds — a majority,
or under evs the whole view — and everyone delivers through it. Under evs a side settles
its own reports (`settle_side`: past the highest safe point heard, only its own origins'
messages, renumbered) and spends every number the old sequencer may have given, so an
order of it still in flight finds its numbers delivered, never reused.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from abcast.effects import Effect, Multicast, Send
from abcast.ids import MsgId, NodeId, View
from abcast.membership.wire import FlushMessage, JoinCut, ViewReport
from abcast.ordering import sequencer_numbering as numbering
from abcast.ordering._flush_outcome import fresh_number, outcome
from abcast.ordering.sequencer_state import SequencerState
from abcast.ordering.sequencer_wire import SAck, SSafe, VcState

#: the report's and the cut's clock: the global number delivered through, the safe point
THROUGH: Final = "#through"
SAFE: Final = "#safe"


def report(st: SequencerState) -> ViewReport:
    """What this member delivered and logs, the numbers it knows, the bodies it holds."""
    messages = [FlushMessage(mid.origin, mid.seq, body, stamp=at, delivered=True)
                for at, (mid, body) in sorted(st.log.items())]
    bodies, deps_of = st.bodies, st.deps_of
    numbered: set[MsgId] = set()
    for at, mid in sorted(st.numbers.items()):
        numbered.add(mid)
        body = bodies.get(mid)
        if body is None:
            messages.append(FlushMessage(mid.origin, mid.seq, b"", stamp=at, held=False))
        else:
            messages.append(FlushMessage(mid.origin, mid.seq, body,
                                         dict(deps_of.get(mid, {})), stamp=at))
    messages += [FlushMessage(mid.origin, mid.seq, body, dict(deps_of.get(mid, {})))
                 for mid, body in bodies.items() if mid not in numbered]
    return ViewReport(dict(st.delivered), messages,
                      {THROUGH: st.delivered_through(), SAFE: st.safe_upto})


def _as_state(report: ViewReport) -> VcState:
    """A report in the shape the outcome is computed from (one home: _flush_outcome)."""
    messages = report.messages
    return VcState(
        0, 0, 0, report.clock.get(THROUGH, 0), dict(report.delivered),
        [(m.stamp, m.origin, m.seq) for m in messages if m.stamp],
        [(m.origin, m.seq, dict(m.deps), m.body) for m in messages if m.held],
        0, report.clock.get(SAFE, 0))


def settle(st: SequencerState, reports: Sequence[ViewReport]) -> list[FlushMessage]:
    """The coordinator's outcome: every message of the closing view the survivors
    deliver, numbered (`stamp`), `final` up to the safe point (all of them unless SAFE)."""
    view = numbering.require_view(st)
    return _settled(st, reports, view.members, view, evs=False)[0]


def settle_side(
    st: SequencerState, reports: Sequence[ViewReport], members: tuple[NodeId, ...], old: View
) -> tuple[list[FlushMessage], int]:
    """evs: one side's outcome (`members` of view `old` reported): past the highest safe
    point heard, only its own origins' messages, renumbered; and the numbers spent
    (every number the old sequencer may have given: orders of it still in flight must
    find them delivered, never reused)."""
    return _settled(st, reports, members, old, evs=True)


def _settled(
    st: SequencerState, reports: Sequence[ViewReport], members: tuple[NodeId, ...],
    old: View, *, evs: bool,
) -> tuple[list[FlushMessage], int]:
    states = [_as_state(r) for r in reports]
    first, ids, bodies, safe = outcome(states, members, old, evs=evs)
    deps: dict[MsgId, dict[NodeId, int]] = {}
    for r in reports:
        for m in r.messages:
            if m.deps:
                deps.setdefault(MsgId(m.origin, m.seq), dict(m.deps))
    settled: list[FlushMessage] = []
    for offset, mid in enumerate(ids):
        at = first + offset
        body = bodies.get(mid)
        settled.append(FlushMessage(
            mid.origin, mid.seq, body if body is not None else b"", deps.get(mid, {}),
            stamp=at, final=not st.safe or at <= safe, held=body is not None))
    return settled, fresh_number(states, first + len(ids) - 1, evs=evs) - 1


def conclude(st: SequencerState, settled: Sequence[FlushMessage]) -> list[Effect]:
    """Take the outcome: its numbers replace whatever this member knew past what it
    delivered; deliver (in the old view) through its last final number."""
    through = st.delivered_through()
    last = settled[-1].stamp if settled else through
    numbers = {at: mid for at, mid in st.numbers.items() if at <= last}
    bodies, delivered = st.bodies, st.delivered
    safe = through
    for m in settled:
        if m.final:
            safe = max(safe, m.stamp)
        if m.stamp <= through:
            continue
        mid = MsgId(m.origin, m.seq)
        numbers[m.stamp] = mid
        if m.held and m.seq > delivered.get(m.origin, 0):
            bodies.setdefault(mid, m.body)
    st.numbers = numbers
    # Exactly the flush's safe point, not what this node heard before: every member
    # delivers the same numbers in the old view (virtual synchrony).
    st.safe_upto = safe if st.safe else last
    st.settled_through = max(last, through)
    st.interval_ids = []  # admitted, not numbered: the outcome numbered them
    return numbering.deliver_ready(st)


def conclude_side(st: SequencerState, settled: Sequence[FlushMessage], spent: int
                  ) -> list[Effect]:
    """evs: take a side's outcome, then skip the numbers it spent (once everything
    through its last is delivered here, as on every member of the side). Numbers past
    `spent` known here are the side's sequencer's, given afresh after it (a member that
    takes a given-up merge's outcome late, abcast.membership.merge): they stay."""
    later = {at: mid for at, mid in st.numbers.items() if at > spent} if spent else {}
    effects = conclude(st, settled)
    last = settled[-1].stamp if settled else st.delivered_through()
    if spent > last and st.delivered_through() == last:
        st.next_delivery = spent + 1
        st.safe_upto = max(st.safe_upto, spent)
        st.settled_through = max(st.settled_through, spent)
    if later:
        st.numbers.update(later)
        effects += numbering.deliver_ready(st)
        if st.safe:
            effects += ack_holdings(st)
    return effects


def merge_cut(reports: Sequence[ViewReport], outcomes: Sequence[Sequence[FlushMessage]],
              spent: int) -> JoinCut:
    """evs: where the merge view starts — per origin the highest seq any side delivered
    (its state holds it), numbering after every side's spent numbers."""
    delivered: dict[NodeId, int] = {}
    for r in reports:
        for origin, seq in r.delivered.items():
            delivered[origin] = max(delivered.get(origin, 0), seq)
    for side in outcomes:
        for m in side:
            delivered[m.origin] = max(delivered.get(m.origin, 0), m.seq)
    return JoinCut(delivered, {THROUGH: spent, SAFE: spent})


def start_merged(st: SequencerState, cut: JoinCut) -> None:
    """evs: restart from the merge cut, like a joiner's welcome. Bodies nobody delivered
    stay (members that installed the merge view first may already send in it); our own
    go out again, same ids, for those that lost them (`resend`, taken at the view)."""
    through = cut.clock.get(THROUGH, 0)
    delivered = dict(st.delivered)
    for origin, seq in cut.delivered.items():
        delivered[origin] = max(delivered.get(origin, 0), seq)
    st.delivered = delivered
    st.numbers, st.log, st.deps_of = {}, {}, {}
    st.bodies = {m: b for m, b in st.bodies.items() if m.seq > delivered.get(m.origin, 0)}
    st.resend = sorted((m.seq, b) for m, b in st.bodies.items() if m.origin == st.node)
    for seq, _ in st.resend:
        del st.bodies[MsgId(st.node, seq)]
    st.next_delivery = through + 1
    st.stable = st.reported = st.safe_upto = st.settled_through = through
    st.interval_ids = []


def join_cut(st: SequencerState) -> JoinCut:
    """Right after the flush: what the snapshot holds, and the numbers fixed past it."""
    through = st.delivered_through()
    bodies = st.bodies
    messages = []
    for at in range(through + 1, st.settled_through + 1):
        mid = st.numbers.get(at)
        if mid is not None:
            body = bodies.get(mid)
            messages.append(FlushMessage(mid.origin, mid.seq, body or b"", stamp=at,
                                         held=body is not None))
    return JoinCut(dict(st.delivered), {THROUGH: through, SAFE: st.safe_upto}, messages)


def start_from(st: SequencerState, cut: JoinCut) -> None:
    """A joiner starts at the cut: nothing before it is its to deliver or report."""
    through = cut.clock.get(THROUGH, 0)
    st.numbers = {m.stamp: MsgId(m.origin, m.seq) for m in cut.messages}
    st.bodies = {MsgId(m.origin, m.seq): m.body for m in cut.messages if m.held}
    st.delivered = dict(cut.delivered)
    st.next_delivery = through + 1
    st.log = {}
    st.deps_of = {}
    st.stable = st.reported = through
    last = max((m.stamp for m in cut.messages), default=through)
    st.safe_upto = cut.clock.get(SAFE, through) if st.safe else last
    st.settled_through = last


def stable_point(st: SequencerState) -> dict[NodeId, int]:
    return dict(st.delivered)


def forget(st: SequencerState, stable: Mapping[NodeId, int]) -> None:
    """Drop from the log what every member delivered: a prefix of the total order."""
    log = st.log
    done: list[int] = []
    for at, (mid, _) in log.items():
        if mid.seq > stable.get(mid.origin, 0):
            break
        done.append(at)
    for at in done:
        del log[at]
    if done:
        st.stable = max(st.stable, done[-1])


# -- taking a view, and SAFE within it ---------------------------------------------------
def adopt_view(st: SequencerState, view: View) -> list[Effect]:
    """Switch to `view`; its sequencer numbers on after the last number the flush (or
    the cut) fixed."""
    last = st.settled_through
    if st.evs:
        # Numbers past the flush's are the old sequencer's (maybe another side's): the
        # new one numbers afresh. Bodies from another side's origins are its to deliver.
        st.numbers = {n: m for n, m in st.numbers.items() if n <= last}
        numbered = set(st.numbers.values())
        st.bodies = {m: b for m, b in st.bodies.items()
                     if m.origin in view.members or m in numbered}
    st.view = view
    st.others = view.others(st.node)
    st.holds = {}
    st.acked = 0
    if view.leader != st.node:
        return []
    return numbering.take_over(st, last, st.deps_of)


def safe_quorum(st: SequencerState, view: View) -> int:
    """SAFE: how many members must hold a number before it is delivered (evs: all)."""
    return len(view.members) if st.evs else view.majority


def ack_holdings(st: SequencerState) -> list[Effect]:
    """Batched per event under SAFE: tell the sequencer how far we hold everything."""
    view = st.view
    if view is None:
        return []
    held = numbering.held_through(st)
    if held <= st.acked:
        return []
    st.acked = held
    if view.leader != st.node:
        return [Send(view.leader, SAck(held))]
    st.holds[st.node] = held
    return _announce_safe(st)


def on_safe_message(st: SequencerState, sender: NodeId, header: SAck | SSafe
                    ) -> list[Effect]:
    view = st.view
    if view is None:
        return []
    if type(header) is SSafe:
        st.safe_upto = max(st.safe_upto, header.upto)
        return numbering.deliver_ready(st)
    if view.leader != st.node:
        return []  # to a former sequencer: the flush settles what it was for
    st.holds[sender] = max(st.holds.get(sender, 0), header.upto)
    return _announce_safe(st)


def _announce_safe(st: SequencerState) -> list[Effect]:
    view = st.view
    assert view is not None
    holds = sorted((st.holds.get(m, 0) for m in view.members), reverse=True)
    safe = holds[safe_quorum(st, view) - 1]
    if safe <= st.safe_upto:
        return []
    st.safe_upto = safe
    effects: list[Effect] = [Multicast(st.others, SSafe(safe))] if st.others else []
    return effects + numbering.deliver_ready(st)
