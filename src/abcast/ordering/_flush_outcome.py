"""A sequencer-family flush's outcome from its members' states: which messages the old
view delivers, in which order.

Rules: pure functions of the reported states (abcast.ordering.sequencer_failover's
`VcState`), shared by the flush and by the merge of extended virtual synchrony
(abcast.ordering.sequencer_merge). The known numbers come first, contiguous from the
lowest delivery point, as far as some member holds the body (at least as far as anyone
delivered — those were in someone's log); then every message still unnumbered, in an
order a sequencer could have numbered it: each origin's in sequence, each after its
causal dependencies. What can never be ready (its predecessor is lost with a crashed
node) is left out. It knows nothing of views, quorums or who coordinates.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from abcast.ids import MsgId, NodeId

if TYPE_CHECKING:
    from abcast.ordering.sequencer_failover import VcState


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

