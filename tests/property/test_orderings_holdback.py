"""The causal holdback (abcast.ordering._holdback) on random causal histories offered in
random order: everything is released, once, each message only after all it depends on,
and each origin's messages in their own order."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abcast.errors import RemoteProtocolError
from abcast.ordering._holdback import CausalHoldback

NODES = ("n1", "n2", "n3", "n4")

Message = tuple[str, int, dict[str, int]]


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """Messages in creation order; each depends on a prefix of every other origin's
    messages created before it, never less than its origin's previous message did."""
    made: dict[str, int] = dict.fromkeys(NODES, 0)
    last_deps: dict[str, dict[str, int]] = {n: {} for n in NODES}
    out: list[Message] = []
    for _ in range(draw(st.integers(1, 30))):
        origin = draw(st.sampled_from(NODES))
        deps: dict[str, int] = {}
        for other in NODES:
            if other == origin:
                continue
            low = last_deps[origin].get(other, 0)
            k = draw(st.integers(low, made[other]))
            if k:
                deps[other] = k
        made[origin] += 1
        last_deps[origin] = deps
        out.append((origin, made[origin], deps))
    return out


@settings(max_examples=300, deadline=None)
@given(history=histories(), data=st.data())
def test_every_message_comes_out_once_after_its_predecessors(
    history: list[Message], data: st.DataObject
) -> None:
    order = data.draw(st.permutations(history))
    holdback: CausalHoldback[str] = CausalHoldback()
    released: list[tuple[str, int]] = []
    for origin, seq, deps in order:
        for h in holdback.offer(origin, seq, deps, f"{origin}#{seq}"):
            assert h.item == f"{h.origin}#{h.seq}"
            released.append((h.origin, h.seq))
    assert sorted(released) == sorted((o, s) for o, s, _ in history)
    assert holdback.held() == 0
    position = {m: i for i, m in enumerate(released)}
    for origin, seq, deps in history:
        here = position[(origin, seq)]
        if seq > 1:
            assert position[(origin, seq - 1)] < here
        for other, k in deps.items():
            assert position[(other, k)] < here
    assert holdback.vector() == {o: max(s for oo, s, _ in history if oo == o)
                                 for o in NODES if any(oo == o for oo, _, _ in history)}


def test_a_message_offered_twice_is_the_peers_fault() -> None:
    holdback: CausalHoldback[None] = CausalHoldback()
    holdback.offer("n2", 2, {}, None)  # held: n2#1 is missing
    with pytest.raises(RemoteProtocolError):
        holdback.offer("n2", 2, {}, None)
    holdback.offer("n2", 1, {}, None)
    with pytest.raises(RemoteProtocolError):
        holdback.offer("n2", 1, {}, None)
    assert holdback.released("n2") == 2
