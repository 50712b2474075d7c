"""A flooding peer cannot grow the holdback of causal, skeen or matrix past `max_held`
(abcast.ordering._credit, issue #21), and an honest member is not affected; the origin's
own credit backpressures it until the stable point catches up.

The flooder n2 sends messages that can never be delivered here: causal ones depending on
a message of n3 that never comes, skeen ones that never get a final timestamp, matrix
writes that the silent n3 keeps below the row minimum (and stream packets far ahead of
n2's stream). Past the cap each one is refused with RemoteProtocolError (the driver's
one log line and drop) and counted (`refused_far`). A planted core without the cap holds
the whole flood.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abcast.codec import Packet
from abcast.effects import Deliver
from abcast.errors import RemoteProtocolError
from abcast.events import BroadcastRequested, Received, ViewInstalled
from abcast.ids import View
from abcast.ordering import _credit
from abcast.ordering._matrix_wire import MatrixWire, MxWrite
from abcast.ordering.causal import Causal, CData
from abcast.ordering.matrix import Matrix
from abcast.ordering.registry import OrderingOptions
from abcast.ordering.skeen import KData, Skeen

VIEW = View(1, ("n1", "n2", "n3"))
BODY = Packet((), b"x")
NO_CLOCK = MatrixWire([], [])


Core = Causal | Skeen | Matrix


def _causal(cap: int) -> Causal:
    return Causal("n1", max_held=cap)


def _skeen(cap: int) -> Skeen:
    return Skeen("n1", max_held=cap)


def _matrix(cap: int) -> Matrix:
    return Matrix("n1", max_held=cap)


def _flood(core: Core, n: int) -> Received:
    """The flooder's n-th message: never deliverable here."""
    if isinstance(core, Causal):
        return Received("n2", CData(n, {"n3": 1_000_000}), BODY)
    if isinstance(core, Skeen):
        return Received("n2", KData(n, n), BODY)
    return Received("n2", MxWrite(1, n, n, n, NO_CLOCK), BODY)


def _honest(core: Core) -> Received:
    """n3's first message."""
    if isinstance(core, Causal):
        return Received("n3", CData(1, {}), BODY)
    if isinstance(core, Skeen):
        return Received("n3", KData(1, 1), BODY)
    return Received("n3", MxWrite(1, 1, 1, 1, NO_CLOCK), BODY)


CORES: dict[str, Callable[[int], Core]] = {
    "causal": _causal, "skeen": _skeen, "matrix": _matrix}


def _feed(core: Core, ns: list[int]) -> int:
    """The flood, in this order; how many were refused."""
    core.handle(ViewInstalled(VIEW), 0)
    refused = 0
    for n in ns:
        try:
            core.handle(_flood(core, n), 0)
        except RemoteProtocolError:
            refused += 1
    return refused


@pytest.mark.parametrize("ordering", sorted(CORES))
@settings(max_examples=40, deadline=None)
@given(ns=st.lists(st.integers(1, 100_000), max_size=200, unique=True),
       cap=st.integers(1, 64))
def test_a_flooding_peer_never_holds_more_than_the_cap(
        ordering: str, ns: list[int], cap: int) -> None:
    core = CORES[ordering](cap)
    refused = _feed(core, ns)
    assert core.waiting() <= cap
    assert refused == max(0, len(ns) - cap)
    assert core.inspect().counters["refused_far"] == refused
    # n3 is not held to n2's flood: its message is taken (and matrix queues it).
    core.handle(_honest(core), 0)
    assert core.waiting() <= cap + 1


@pytest.mark.parametrize("ordering", sorted(CORES))
def test_without_the_cap_the_flood_is_held(ordering: str) -> None:
    # The planted variant: the cap never reached.
    core = CORES[ordering](10**9)
    assert _feed(core, list(range(1, 201))) == 0
    assert core.waiting() == 200


@pytest.mark.parametrize("ordering", sorted(CORES))
def test_own_broadcasts_past_the_credit_backpressure_until_stable(ordering: str) -> None:
    core = {"causal": lambda: Causal("n1", max_unstable=3),
            "skeen": lambda: Skeen("n1", max_unstable=3),
            "matrix": lambda: Matrix("n1", max_unstable=3)}[ordering]()
    core.handle(ViewInstalled(VIEW), 0)
    for seq in (1, 2):
        core.handle(BroadcastRequested(seq, b"x"), 0)
    assert not core.backpressured()
    core.handle(BroadcastRequested(3, b"x"), 0)
    assert core.backpressured()
    core.forget({"n1": 1})  # the membership layer's stable point: n1#1 everywhere
    assert not core.backpressured()
    assert core.inspect().clock["credit"] == {"sent": 3, "stable": 1, "limit": 3}


def test_a_view_change_settles_the_credit() -> None:
    core = Causal("n1", max_unstable=2)
    core.handle(ViewInstalled(VIEW), 0)
    effects = [e for seq in (1, 2) for e in core.handle(BroadcastRequested(seq, b"x"), 0)]
    assert core.backpressured()
    assert [e.seq for e in effects if isinstance(e, Deliver)] == [1, 2]
    core.conclude(core.settle([core.report()]))
    assert not core.backpressured()


def test_the_credit_default_is_the_options_default() -> None:
    assert OrderingOptions().max_unstable == _credit.MAX_UNSTABLE


def test_each_origin_has_its_own_cap() -> None:
    core = Causal("n1", max_held=2)
    core.handle(ViewInstalled(VIEW), 0)
    for n in (1, 2):
        core.handle(_flood(core, n), 0)
    with pytest.raises(RemoteProtocolError):
        core.handle(_flood(core, 3), 0)
    delivered = [(e.origin, e.seq) for e in core.handle(_honest(core), 0)
                 if isinstance(e, Deliver)]
    assert delivered == [("n3", 1)]
    assert core.inspect().counters["refused_far"] == 1
