"""A sequencer-family flush's outcome from its members' states: which messages the old
view delivers, in which order.

Rules: pure functions of the reported states (`VcState`, abcast.ordering.sequencer_wire:
the sequencer's `ViewReport`s as abcast.ordering.sequencer_view reads them), for the
membership layer's flush and, under evs, each side's outcome at a flush or a merge
(abcast.membership.merge). The known numbers come first,
contiguous from the lowest delivery point, as far as some member holds the body (at
least as far as anyone delivered — those were in someone's log); then every message
still unnumbered, in an order a sequencer could have numbered it: each origin's in
sequence, each after its causal dependencies. What can never be ready (its predecessor
is lost with a crashed node) is left out. It knows nothing of quorums or who
coordinates: the view it is given only bounds what may have been safe.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from abcast.ids import MsgId, NodeId, View
from abcast.ordering.sequencer_wire import VcState

Order = Callable[
    [list[MsgId], dict[NodeId, int], Mapping[MsgId, Mapping[NodeId, int]]], list[MsgId]]


def settle(
    states: list[VcState], order: Order | None = None
) -> tuple[int, list[MsgId], dict[MsgId, bytes], int]:
    """The flush's outcome from the members' states: (the lowest delivery point, the ids
    numbered after it in order, their bodies, the highest delivery point). The known
    numbers, contiguous from the lowest delivery point, as far as some member holds the
    body (at least as far as anyone delivered); then every message still unnumbered, in
    an order a sequencer could have numbered it."""
    numbers: dict[int, MsgId] = {}
    bodies: dict[MsgId, bytes] = {}
    deps: dict[MsgId, Mapping[NodeId, int]] = {}
    done: dict[NodeId, int] = {}
    for st in states:
        for number, origin, seq in st.numbers:
            numbers.setdefault(number, MsgId(origin, seq))
        for origin, seq, d, body in st.held:
            bodies.setdefault(MsgId(origin, seq), body)
            if d:
                deps.setdefault(MsgId(origin, seq), d)
        for origin, seq in st.per_origin.items():
            done[origin] = max(done.get(origin, 0), seq)
    low = min(st.delivered for st in states)
    high = max(st.delivered for st in states)
    ids: list[MsgId] = []
    number = low + 1
    while (mid := numbers.get(number)) is not None and (mid in bodies or number <= high):
        ids.append(mid)
        number += 1
    numbered = set(ids) | {mid for g, mid in numbers.items() if g <= low}
    for mid in ids:
        done[mid.origin] = max(done.get(mid.origin, 0), mid.seq)
    ids += (order or admission_order)(
        [m for m in bodies if m not in numbered and m.seq > done.get(m.origin, 0)],
        done, deps,
    )
    return low, ids, bodies, high


def admission_order(
    pending: list[MsgId], done: dict[NodeId, int], deps: Mapping[MsgId, Mapping[NodeId, int]]
) -> list[MsgId]:
    """Unnumbered messages in an order a sequencer could have numbered them: each origin's
    in sequence, each after its causal dependencies; what can never be ready (its
    predecessor is lost with a crashed node) is left out."""
    waiting = {m: True for m in sorted(pending, key=lambda m: (m.seq, m.origin))}
    released = dict(done)
    out: list[MsgId] = []
    progress = True
    while waiting and progress:
        progress = False
        for mid in list(waiting):
            if released.get(mid.origin, 0) != mid.seq - 1:
                continue
            if any(released.get(o, 0) < k for o, k in deps.get(mid, {}).items()):
                continue
            del waiting[mid]
            released[mid.origin] = mid.seq
            out.append(mid)
            progress = True
    return out



def outcome(
    states: list[VcState], members: tuple[NodeId, ...], old: View, *, evs: bool
) -> tuple[int, list[MsgId], dict[MsgId, bytes], int]:
    """What the members whose `states` these are deliver before leaving their view `old`:
    (first number, ids in number order, their bodies, safe point). Under evs, beyond
    the highest safe point heard, another side may have numbered messages differently:
    only those whose origin is among `members` are kept."""
    low, ids, bodies, high = settle(states, _admission_order)
    first, safe = low + 1, possibly_safe(states, high, old)
    if not evs:
        return first, ids, bodies, safe
    heard = max(st.safe for st in states)
    side = set(members)
    kept = [m for i, m in enumerate(ids) if first + i <= heard or m.origin in side]
    return first, kept, bodies, first + len(kept) - 1


def fresh_number(states: list[VcState], last: int, *, evs: bool) -> int:
    """The next view's first number, after an outcome ending at `last`. Under evs the
    outcome renumbered what it kept past the safe point: orders of the old sequencer
    still in flight must find their numbers delivered, never reused."""
    if not evs:
        return last + 1
    known = max((number for st in states for number, _, _ in st.numbers), default=0)
    return max(last, known) + 1


def possibly_safe(states: list[VcState], high: int, old: View) -> int:
    """SAFE: the highest number the old sequencer may have announced safe. It did
    once a majority of the old view held everything up to it, so at least that
    majority less the members left out of this flush still hold it here; whoever
    delivered such a number did so in the old view, and so must everyone now."""
    need = max(1, old.majority - (len(old.members) - len(states)))
    holds = sorted((held_through(st) for st in states), reverse=True)
    return max(high, holds[need - 1]) if len(holds) >= need else high


def held_through(state: VcState) -> int:
    """The highest number up to which the member of `state` held every number and body."""
    known = {number: MsgId(origin, seq) for number, origin, seq in state.numbers}
    bodies = {MsgId(origin, seq) for origin, seq, _, _ in state.held}
    number = state.delivered
    while (mid := known.get(number + 1)) is not None and mid in bodies:
        number += 1
    return number


#: how unnumbered messages are ordered in a flush (a module name, so tests can plant a
#: forgetful variant)
_admission_order = admission_order
