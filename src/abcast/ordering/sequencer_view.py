"""The sequencer family's part of a view change under the membership layer: numbers and
bodies, out (`report`) and in (`settle`, `conclude`, `start_from`).

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
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from abcast.effects import Effect
from abcast.ids import MsgId, NodeId
from abcast.membership.wire import FlushMessage, JoinCut, ViewReport
from abcast.ordering import sequencer_numbering as numbering
from abcast.ordering._flush_outcome import outcome
from abcast.ordering.sequencer_state import SequencerState
from abcast.ordering.sequencer_wire import VcState

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
    states = [_as_state(r) for r in reports]
    first, ids, bodies, safe = outcome(states, view.members, view, evs=False)
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
    return settled


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
