"""The sequencer family's steady state: numbering, announcing and delivering in order.

Rules: the origin keeps the body of its message; the view's leader (the sequencer) admits
each message in its origin's order — in causal order for causal-total — gives it the next
global number and announces ids and numbers in order packets (`SOrder`, at most `batch`
ids, relayed: at most RELAY_ORDER_BYTES of bodies); every node delivers in number order
once it holds number and body, and under SAFE only up to the announced safe point.
Delivered messages go to the log a flush may need (a view change reads and settles
numbers and bodies in sequencer_view; while it runs, the membership layer feeds the core
nothing).

Flow control (issue #21): the sequencer numbers at most `max_unstable` past the group's
stable point (what every member reported delivered, the membership layer); past it, what it
admits waits for the order timer, which numbers as far as the bound allows and re-arms
every half stability period until the slowest member catches up. So its order packets
queued to a slow member, and every member's log, stay within `max_unstable` numbers (plus
what one stability period reports late). The origin's side: `outstanding` — its own
broadcasts not yet delivered here — past `max_unstable` backpressures it (the runtime's
`broadcast()` waits, `broadcast_nowait()` raises `Backpressure`), so the bodies waiting at
the sequencer for a number stay bounded too.

This is the hot path (bench/micro_hotpath.py, tests/unit/test_hotpath_sequencer.py): no
per-message method dispatch beyond these functions, dict lookups hoisted out of loops.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from abcast.codec import Header, Packet
from abcast.effects import Deliver, Effect, Multicast, Send, SetTimer
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.ids import MsgId, NodeId, View
from abcast.ordering import sequencer_optimistic as optimistic
from abcast.ordering._holdback import CausalHoldback
from abcast.ordering.sequencer_state import SequencerState
from abcast.ordering.sequencer_wire import (
    MAX_ORDER_IDS,
    RELAY_ORDER_BYTES,
    CTData,
    OData,
    SData,
    SOrder,
)

NO_DEPS: Final[Mapping[NodeId, int]] = {}
_UNLIMITED: Final = 1 << 62
#: the sequencer's order interval is over: number and announce what it admitted
ORDER_TIMER: Final = "order-interval"


def require_view(st: SequencerState) -> View:
    if st.view is None:
        raise LocalProtocolError(f"sequencer on {st.node} has no view yet")
    return st.view


def data_header(st: SequencerState, seq: int) -> Header:
    """The header our own message `seq` goes out with (causal-total: with our vector)."""
    if st.causal:
        return CTData(seq, {o: k for o, k in st.delivered.items() if o != st.node})
    if st.optimistic is not None:
        return OData(seq, optimistic.suggestion(st, st.optimistic))
    return SData(seq)


def broadcast(
    st: SequencerState, seq: int, payload: bytes, *, hold: bool = False
) -> list[Effect]:
    """Send our message `seq`; the sequencer numbers it at once unless `hold` (the
    optimistic option numbers it later, sequencer_optimistic)."""
    view = require_view(st)
    header = data_header(st, seq)
    st.sent = seq
    st.bodies[MsgId(st.node, seq)] = payload
    leader = view.leader
    effects: list[Effect]
    if not st.relay:
        effects = [Multicast(st.others, header, Packet((), payload))]
    elif leader != st.node:
        effects = [Send(leader, header, Packet((), payload))]
    else:
        effects = []  # our order packet carries it
    if leader == st.node and not hold:
        # What we delivered, we numbered: our own message's dependencies are met.
        effects.extend(admit(st, st.node, seq, NO_DEPS))
    return effects


def on_data(
    st: SequencerState, origin: NodeId, seq: int, deps: Mapping[NodeId, int], payload: bytes
) -> list[Effect]:
    mid = MsgId(origin, seq)
    if seq <= st.delivered.get(origin, 0) or mid in st.bodies:
        return []  # sent again (a fail-over resend): idempotent
    st.bodies[mid] = payload
    if deps:
        st.deps_of[mid] = deps  # kept for a new sequencer after a fail-over
    view = require_view(st)
    if view.leader == st.node:
        return admit(st, origin, seq, deps)
    return deliver_ready(st)


def admit(
    st: SequencerState, origin: NodeId, seq: int, deps: Mapping[NodeId, int]
) -> list[Effect]:
    """Sequencer only: admit the message in origin (or causal) order; number and
    announce whatever that makes ready."""
    released = st.admission.offer(origin, seq, deps, None)
    if not released:
        return []
    if st.order_interval_us or st.interval_ids or (
            st.next_number + len(released) - 1 - st.stable > st.max_unstable):
        return _hold_for_interval(st, [(h.origin, h.seq) for h in released])
    return number(st, [(h.origin, h.seq) for h in released])


def _hold_for_interval(st: SequencerState, ids: list[tuple[NodeId, int]]) -> list[Effect]:
    st.interval_ids.extend(ids)
    if st.interval_armed:
        return []
    st.interval_armed = True
    return [SetTimer(ORDER_TIMER, st.now + (st.order_interval_us or _recheck_us(st)))]


def _recheck_us(st: SequencerState) -> int:
    """How soon a sequencer held back by `max_unstable` looks at the stable point again."""
    return max(1, st.stable_period_us // 2)


def unstable_room(st: SequencerState) -> int:
    """Numbers the sequencer may still give before `max_unstable` (see the rules)."""
    return st.max_unstable - (st.next_number - 1 - st.stable)


def on_order_timer(st: SequencerState) -> list[Effect]:
    """The order interval is over: number its ids in one order packet (`batch` or
    MAX_ORDER_IDS ids each), unless the view changed meanwhile (see the rules) — as many
    as `max_unstable` allows; the rest wait for the next look."""
    st.interval_armed = False
    ids, st.interval_ids = st.interval_ids, []
    view = st.view
    if not ids or view is None or view.leader != st.node:
        return []
    room = unstable_room(st)
    if room < len(ids):
        st.interval_ids = ids[max(room, 0):]
        st.interval_armed = True
        later = SetTimer(ORDER_TIMER, st.now + _recheck_us(st))
        return [*number(st, ids[:room]), later] if room > 0 else [later]
    return number(st, ids)


def outstanding(st: SequencerState) -> int:
    """Our own broadcasts not yet delivered here."""
    return st.sent - st.delivered.get(st.node, 0)


def number(st: SequencerState, ids: list[tuple[NodeId, int]]) -> list[Effect]:
    """Sequencer only: give `ids` the next numbers, announce them, deliver."""
    effects: list[Effect] = []
    size = st.batch or MAX_ORDER_IDS
    if not st.relay:
        for start in range(0, len(ids), size):
            effects += announce(st, ids[start:start + size], [])
        effects.extend(deliver_ready(st))
        return effects
    bodies = st.bodies
    chunk: list[tuple[NodeId, int]] = []
    carried: list[bytes] = []
    carried_bytes = 0
    for origin, seq in ids:
        body = bodies[MsgId(origin, seq)]
        if chunk and (len(chunk) >= size
                      or carried_bytes + len(body) > RELAY_ORDER_BYTES):
            effects += announce(st, chunk, carried)
            chunk, carried, carried_bytes = [], [], 0
        chunk.append((origin, seq))
        carried.append(body)
        carried_bytes += len(body)
    if chunk:
        effects += announce(st, chunk, carried)
    effects.extend(deliver_ready(st))
    return effects


def announce(
    st: SequencerState, chunk: list[tuple[NodeId, int]], carried: list[bytes]
) -> list[Effect]:
    """Number `chunk` from the next free number on; one order packet to the others."""
    first = st.next_number
    numbers = st.numbers
    for offset, (origin, seq) in enumerate(chunk):
        numbers[first + offset] = MsgId(origin, seq)
    st.next_number = first + len(chunk)
    if not st.others:
        return []
    st.order_packets += 1
    return [Multicast(st.others, SOrder(first, chunk, carried))]


def on_order(
    st: SequencerState, sender: NodeId, first: int, ids: list[tuple[str, int]],
    bodies: list[bytes],
) -> list[Effect]:
    view = require_view(st)
    if sender != view.leader or sender == st.node:
        raise RemoteProtocolError(f"{sender} sent an order but the sequencer is {view.leader}")
    if bodies and len(bodies) != len(ids):
        raise RemoteProtocolError(
            f"{sender} sent an order of {len(ids)} ids with {len(bodies)} bodies")
    numbers, held, delivered = st.numbers, st.bodies, st.delivered
    next_delivery = st.next_delivery
    for offset, (origin, seq) in enumerate(ids):
        at = first + offset
        if at < next_delivery:
            continue  # sent again: already delivered
        mid = MsgId(origin, seq)
        known = numbers.get(at)
        if known is not None and known != mid:
            raise RemoteProtocolError(
                f"{sender} numbered {at} as {origin}#{seq}, earlier as "
                f"{known.origin}#{known.seq}"
            )
        numbers[at] = mid
        if bodies and mid not in held and seq > delivered.get(origin, 0):
            held[mid] = bodies[offset]
    return deliver_ready(st)


def deliver_ready(st: SequencerState) -> list[Effect]:
    """Deliver in number order what is here (number and body), up to the safe point
    under SAFE (the membership layer feeds a frozen core nothing)."""
    effects: list[Effect] = []
    limit = st.safe_upto if st.safe else _UNLIMITED
    numbers, bodies, delivered, log = st.numbers, st.bodies, st.delivered, st.log
    deps_of = st.deps_of
    at = st.next_delivery
    while at <= limit:
        mid = numbers.get(at)
        if mid is None or mid not in bodies:
            break
        del numbers[at]
        delivered[mid.origin] = mid.seq
        body = bodies.pop(mid)
        effects.append(Deliver(mid.origin, mid.seq, body))
        log[at] = (mid, body)
        if deps_of:
            deps_of.pop(mid, None)
        at += 1
    st.next_delivery = at
    return effects


def take_over(
    st: SequencerState, last_number: int, deps: Mapping[MsgId, Mapping[NodeId, int]]
) -> list[Effect]:
    """Become the sequencer after a view change in which numbers up to `last_number`
    were fixed: number on from there, starting with the held messages nobody
    numbered (in origin, or causal, order)."""
    st.next_number = last_number + 1
    # The interval's ids were not numbered: admitted again below with the other held
    # ones. Its timer may have fired while we were not a member (joining): arm afresh.
    st.interval_ids = []
    st.interval_armed = False
    numbered = dict(st.delivered)
    for mid in st.numbers.values():
        numbered[mid.origin] = max(numbered.get(mid.origin, 0), mid.seq)
    st.admission = CausalHoldback()
    st.admission.seed(numbered)
    known = set(st.numbers.values())
    pending = sorted((m for m in st.bodies if m not in known),
                     key=lambda m: (m.seq, m.origin))
    effects: list[Effect] = []
    for mid in pending:
        if not st.admission.knows(mid.origin, mid.seq):
            effects.extend(admit(st, mid.origin, mid.seq, deps.get(mid, NO_DEPS)))
    return effects


def held_through(st: SequencerState) -> int:
    """Every number up to this one is known here with its body (or delivered)."""
    at = st.delivered_through()
    while (mid := st.numbers.get(at + 1)) is not None and mid in st.bodies:
        at += 1
    return at
