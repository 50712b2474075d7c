"""Optimistic total order: the sequencer family's `optimistic` option.

Every node opt-delivers a message (`Deliver(stage=OPTIMISTIC)`) tentatively once it has
it, after a per-sender compensation delay, and final-delivers it in the sequencer's order
as the plain core does. The delays are the WAN algorithm of Sousa, Pereira, Moura and
Oliveira (optimistic total order in wide area networks): hold each sender's messages so
that the order they are opt-delivered in here matches the order the sequencer gave.

Rules (times in µs; docs/orderings.md, "Optimistic delivery", has the why):

- Receipt of m from origin o (its data packet, or our own broadcast): opt-deliver m at
  receipt + delay[o] — at once when that is now, else held (one timer: the earliest due).
- Final delivery of m: a held m is opt-delivered first, just before it (LOCAL_ORDER:
  never an opt-delivery after the final one); m is never opt-delivered again.
- Compensation (`compensate=True`), on the final delivery of m2 (origin i) right after
  m1 (origin j ≠ i), both received here: d = (opt spacing) − (final spacing), the final
  spacing standing for the sequencer's (its order packets come down one link);
  v = delay[i]·α + (delay[i] − d)·(1 − α); v < 0 → delay[i] = 0, delay[j] += −v (the clamp);
  then every delay less the smallest (only differences order; the rest is waiting).
- Every data packet carries `suggest = max(delay) − delay[sequencer]`; the sequencer
  numbers its own broadcasts after the largest suggestion its members sent (one timer).
- A suggestion below 0 or above MAX_SUGGEST_US is the sender's RemoteProtocolError.
- View changes keep the delays; a message opt-delivered in a view whose flush orders it
  differently is final-delivered in the flush's order (the opt order was only a guess).
"""

from __future__ import annotations

import heapq
from typing import TYPE_CHECKING, Final

from abcast.effects import CancelTimer, Deliver, Effect, SetTimer, Stage
from abcast.errors import RemoteProtocolError
from abcast.ids import MsgId, NodeId
from abcast.ordering.sequencer_state import OptimisticState

if TYPE_CHECKING:
    from abcast.ordering.sequencer_state import SequencerState

#: the timer releasing held opt-deliveries; the one numbering the sequencer's own messages
OPT_TIMER: Final = "opt-deliver"
OWN_TIMER: Final = "opt-own"
#: a suggested delay above this (60 s) is absurd: the sender is broken
MAX_SUGGEST_US: Final = 60_000_000
_OPTIMISTIC: Final = Stage.OPTIMISTIC
_FINAL: Final = Stage.FINAL


def compensate(delay: dict[NodeId, float], i: NodeId, j: NodeId, d: float,
               alpha: float) -> None:
    """m (from i) was opt-delivered `d` µs too late after m' (from j) — too early when
    d < 0: move delay[i] toward the correction with inertia α, clamped at 0, the
    excess going to delay[j] (delaying j's messages is the same as hurrying i's)."""
    old = delay.get(i, 0.0)
    v = old * alpha + (old - d) * (1.0 - alpha)
    if v < 0.0:
        delay[i] = 0.0
        delay[j] = delay.get(j, 0.0) - v
    else:
        delay[i] = v


def suggestion(st: SequencerState, opt: OptimisticState) -> int:
    """The delay this node asks the sequencer to put on its own messages."""
    if not opt.delay or st.view is None:
        return 0
    top = max(opt.delay.values())
    return min(MAX_SUGGEST_US, max(0, int(top - opt.delay.get(st.view.leader, 0.0))))


def check_suggest(sender: NodeId, suggest: int) -> None:
    if not 0 <= suggest <= MAX_SUGGEST_US:
        raise RemoteProtocolError(
            f"{sender} suggested a sequencer delay of {suggest} µs (0..{MAX_SUGGEST_US})")


def own_delay(st: SequencerState, opt: OptimisticState) -> int:
    """Sequencer: how long to hold its own next broadcast before numbering it."""
    if not opt.config.compensate or st.view is None:
        return 0
    members = st.view.members
    return max((s for n, s in opt.requests.items() if n in members), default=0)


def is_fresh(st: SequencerState, opt: OptimisticState, mid: MsgId) -> bool:
    """m is new here: not delivered, not held, never opt-delivered."""
    return (mid.seq > st.delivered.get(mid.origin, 0) and mid not in st.bodies
            and mid not in opt.opted and mid not in opt.held)


def receive(opt: OptimisticState, mid: MsgId, payload: bytes, now: int) -> list[Effect]:
    """m is here (received, or our own broadcast): opt-deliver it now or hold it."""
    opt.received[mid] = now
    due = now + int(opt.delay.get(mid.origin, 0.0)) if opt.config.compensate else now
    if due <= now:
        opt.opted.add(mid)
        opt.opt_deliveries += 1
        return [Deliver(mid.origin, mid.seq, payload, _OPTIMISTIC)]
    opt.held[mid] = payload
    heapq.heappush(opt.due, (due, mid.origin, mid.seq))
    return _arm(opt)


def on_timer(opt: OptimisticState, now: int) -> list[Effect]:
    """OPT_TIMER: opt-deliver what is due (what was final-delivered meanwhile is gone)."""
    opt.armed = None
    effects: list[Effect] = []
    due, held = opt.due, opt.held
    while due and due[0][0] <= now:
        _, origin, seq = heapq.heappop(due)
        mid = MsgId(origin, seq)
        payload = held.pop(mid, None)
        if payload is not None:
            opt.opted.add(mid)
            opt.opt_deliveries += 1
            effects.append(Deliver(origin, seq, payload, _OPTIMISTIC))
    return effects + _arm(opt)


def _arm(opt: OptimisticState) -> list[Effect]:
    due = opt.due
    while due and MsgId(due[0][1], due[0][2]) not in opt.held:
        heapq.heappop(due)
    if not due:
        if opt.armed is None:
            return []
        opt.armed = None
        return [CancelTimer(OPT_TIMER)]
    at = due[0][0]
    if opt.armed == at:
        return []
    opt.armed = at
    return [SetTimer(OPT_TIMER, at)]


def scan(opt: OptimisticState, effects: list[Effect], now: int) -> list[Effect]:
    """Put each held message's opt-delivery just before its final one, and learn from
    the final deliveries (compensation). The core's effects in, the node's out."""
    if not any(type(e) is Deliver and e.stage is _FINAL for e in effects):
        return effects
    out: list[Effect] = []
    held, opted, received = opt.held, opt.opted, opt.received
    for effect in effects:
        if type(effect) is Deliver and effect.stage is _FINAL:
            mid = MsgId(effect.origin, effect.seq)
            payload = held.pop(mid, None)
            if payload is not None:
                opt.opt_deliveries += 1
                out.append(Deliver(mid.origin, mid.seq, payload, _OPTIMISTIC))
            opted.discard(mid)
            _learn(opt, mid, received.pop(mid, None), now)
        out.append(effect)
    return out + _arm(opt)


def _learn(opt: OptimisticState, mid: MsgId, at: int | None, now: int) -> None:
    if at is None:  # its body came with a flush: no receipt time to compare
        opt.last = None
        return
    opt_time = at + opt.delay.get(mid.origin, 0.0)
    last = opt.last
    opt.last = (mid.origin, now, opt_time)
    if last is None or not opt.config.compensate or last[0] == mid.origin:
        return
    d = (opt_time - last[2]) - (now - last[1])
    delay = opt.delay
    compensate(delay, mid.origin, last[0], d, opt.config.alpha)
    # Only the differences order anything: keep the smallest delay at 0, or the clamp
    # turns the links' jitter into a creeping wait (and the window shrinks to nothing).
    low = min(delay.values())
    if low > 0.0:
        for sender in delay:
            delay[sender] -= low
    opt.corrections += 1


def hold_own(opt: OptimisticState, seq: int, now: int, wait: int) -> list[Effect]:
    """Sequencer: number our own message `seq` once `wait` has passed (in FIFO order)."""
    due = max(now + wait, opt.own[-1][0] if opt.own else 0)
    opt.own.append((due, seq))
    return [SetTimer(OWN_TIMER, opt.own[0][0])]


def due_own(opt: OptimisticState, now: int) -> tuple[list[int], list[Effect]]:
    """OWN_TIMER: our own messages now due for numbering, and the timer for the rest."""
    ready: list[int] = []
    while opt.own and opt.own[0][0] <= now:
        ready.append(opt.own.pop(0)[1])
    rearm: list[Effect] = [SetTimer(OWN_TIMER, opt.own[0][0])] if opt.own else []
    return ready, rearm


def snapshot(opt: OptimisticState) -> dict[str, object]:
    """For the core's inspect(): the delays and what is held."""
    return {"delay_us": {n: round(v) for n, v in sorted(opt.delay.items())},
            "opt_held": len(opt.held), "opt_deliveries": opt.opt_deliveries,
            "corrections": opt.corrections, "own_waiting": len(opt.own)}


__all__ = ["MAX_SUGGEST_US", "OptimisticState", "compensate"]
