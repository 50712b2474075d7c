"""The steady-state fast paths of the sequencer family change nothing but their cost.

`Sequencer.handle` sends its own broadcast, a member's data packet (`SData`, or `CTData`
for causal-total) and the leader's `SOrder` straight to the steady state (abcast.ordering.
sequencer_numbering) when nothing else can apply (role "member", flow "steady"), by exact
type. An instance of a `Received` or `BroadcastRequested` subclass never takes those
shortcuts, so the general `match` chains still see it. Each test runs a real
simulation — loss, duplicates, joins, leaves, crashes, partitions — and shadows every
sequencer layer with a twin deep-copied before its first event: the layer gets each event
as it is (fast path), the twin the same event as a subclass instance (general path).
Effects, errors and the whole state must be equal after every event. A planted shortcut
that skips the leader check must be caught.
"""

from __future__ import annotations

import copy
import dataclasses
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import msgspec
import pytest
from stack_harness import fields_of

from abcast.codec import EMPTY
from abcast.effects import Effect
from abcast.errors import AbcastError
from abcast.events import BroadcastRequested, Event, Received, ViewInstalled
from abcast.ids import View
from abcast.ordering import sequencer_numbering
from abcast.ordering.registry import OrderingOptions
from abcast.ordering.sequencer import Sequencer
from abcast.ordering.sequencer_wire import CTData, SData, SOrder
from abcast.sim import SimConfig, SimResult, run_simulation
from abcast.stack import Layer

NET = "drop=0.03,dup=0.02,delay=1-20ms"

Handle = Callable[[Any, Event, int], list[Effect]]


class SlowReceived(Received, frozen=True, gc=False):
    """Takes the general path only."""


class SlowBroadcastRequested(BroadcastRequested, frozen=True, gc=False):
    """Takes the general path only."""


def slow(event: Event) -> Event:
    if type(event) is Received:
        return SlowReceived(event.sender, event.header, event.inner)
    if type(event) is BroadcastRequested:
        return SlowBroadcastRequested(event.seq, event.payload)
    return event


def plain(value: Any) -> Any:
    """A comparable picture of a value: slow events read as plain ones, sets and dicts
    in sorted order (a deep copy may lay them out differently), objects by their fields."""
    if isinstance(value, SlowReceived):
        value = Received(value.sender, value.header, value.inner)
    if isinstance(value, SlowBroadcastRequested):
        value = BroadcastRequested(value.seq, value.payload)
    if isinstance(value, (str, bytes, int, float, bool)) or value is None:
        return value
    if isinstance(value, msgspec.Struct):
        fields = value.__struct_fields__
        return (type(value).__name__, tuple(plain(getattr(value, f)) for f in fields))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__,
                tuple(plain(getattr(value, f.name)) for f in dataclasses.fields(value)))
    if isinstance(value, dict):
        return ("dict", sorted(((repr(plain(k)), plain(v)) for k, v in value.items()),
                               key=lambda kv: kv[0]))
    if isinstance(value, (set, frozenset)):
        return ("set", sorted(repr(plain(v)) for v in value))
    if isinstance(value, (list, tuple, deque)):
        return (type(value).__name__, tuple(plain(v) for v in value))
    if hasattr(value, "__dict__"):
        return (type(value).__name__, plain(vars(value)))
    if hasattr(type(value), "__slots__"):  # (those of every class of its MRO)
        return (type(value).__name__, plain(fields_of(value)))
    return repr(value)


def state_of(layer: Layer) -> Any:
    """The whole state of a layer; a sequencer's (`st`) without its back-reference."""
    fields = fields_of(layer)
    st = fields.pop("st", None)
    if st is not None:
        fields["st"] = plain({k: v for k, v in fields_of(st).items() if k != "hub"})
    return plain(fields)


def outcome(handle: Handle, layer: Layer, event: Event, now: int) -> tuple[str, Any]:
    try:
        return "effects", handle(layer, event, now)
    except AbcastError as exc:  # the message may name the event's class: Slow… or not
        return type(exc).__name__, str(exc).replace("Slow", "")


@dataclasses.dataclass
class Shadow:
    """What the shadowing saw: events compared, and how many were steady-state ones."""

    events: int = 0
    steady: int = 0
    broadcasts: int = 0  # own broadcasts (the third fast path)
    busy: bool = False  # inside a compared call: the layers' own re-entrant calls pass
    twins: dict[int, tuple[Layer, Layer]] = dataclasses.field(default_factory=dict)


@contextmanager
def shadowed(monkeypatch: pytest.MonkeyPatch, kind: type[Layer]) -> Iterator[Shadow]:
    """Compare every `kind.handle` call on a layer with the same call on its twin."""
    original: Handle = kind.handle
    shadow = Shadow()

    def handle(layer: Layer, event: Event, now: int) -> list[Effect]:
        if type(layer) is not kind or shadow.busy:
            return original(layer, event, now)  # a replay of kept events: part of the call
        pair = shadow.twins.get(id(layer))
        if pair is None:  # keep the layer too, so its id is not reused
            pair = shadow.twins[id(layer)] = (layer, copy.deepcopy(layer))
        twin = pair[1]
        shadow.busy = True
        try:
            got = outcome(original, layer, event, now)
            want = outcome(original, twin, slow(event), now)
        finally:
            shadow.busy = False
        where = f"{getattr(layer, 'node', '?')} at {now}: {event!r}"
        assert plain(got) == plain(want), where
        assert state_of(layer) == state_of(twin), where
        shadow.events += 1
        shadow.steady += (type(event) is Received
                          and type(event.header) in (SData, CTData, SOrder))
        shadow.broadcasts += type(event) is BroadcastRequested
        kind_of_outcome, value = got
        if kind_of_outcome != "effects":
            raise AbcastError(value)  # the simulations raise nothing: seen as a failure
        effects: list[Effect] = value
        return effects

    monkeypatch.setattr(kind, "handle", handle)
    for name in VIEW_METHODS:
        monkeypatch.setattr(kind, name, _twinned(getattr(kind, name), kind, shadow))
    yield shadow


#: what the membership layer calls on the core besides `handle` (abcast.membership.api):
#: the twin takes each call too, so that both go through the same view changes
VIEW_METHODS = ("report", "settle", "conclude", "join_cut", "start_from", "stable_point",
                "forget", "settle_side", "conclude_side", "merge_cut", "start_merged")


def _twinned(method: Callable[..., Any], kind: type[Layer], shadow: Shadow
             ) -> Callable[..., Any]:
    def call(layer: Layer, *args: Any) -> Any:
        pair = shadow.twins.get(id(layer))
        if type(layer) is not kind or shadow.busy or pair is None:
            return method(layer, *args)
        shadow.busy = True
        try:
            got = method(layer, *args)
            want = method(pair[1], *args)
        finally:
            shadow.busy = False
        where = f"{getattr(layer, 'node', '?')}: {method.__name__}"
        assert plain(got) == plain(want), where
        assert state_of(layer) == state_of(pair[1]), where
        return got
    return call


def simulate(ordering: str, nodes: int, faults: str, *, seed: int, safe: bool = False,
             partitions: str = "primary", messages: int = 80,
             rate: float | None = None) -> SimResult:
    options = OrderingOptions(safe=safe, partitions=partitions)
    return run_simulation(SimConfig(ordering, nodes=nodes, messages=messages, seed=seed,
                                    faults=faults, options=options, rate=rate))


SCENARIOS = {
    "steady": (3, NET, "primary"),
    "the-sequencer-crashes": (4, f"{NET},crash=n1@60ms", "primary"),
    "join-and-leave": (4, f"{NET},join=n5@30ms,leave=n2@50ms", "primary"),
    "the-sequencer-leaves-while-a-join-waits": (5, f"{NET},join=n6@40ms,leave=n1@41ms",
                                                "primary"),
    "a-minority-is-cut-off-and-rejoins": (5, f"{NET},partition=n1+n2|n3+n4+n5@60ms-1500ms",
                                          "primary"),
    "partitions-merge-evs": (4, f"{NET},partition=n1+n2|n3+n4@60ms-1500ms", "evs"),
    "join-and-leave-open-loop": (4, f"{NET},join=n5@30ms,leave=n2@50ms", "primary"),
}
#: scenarios whose broadcasts leave on a schedule (broadcasts/s), so some fall into a view
#: change (a closed loop broadcasts on delivery: never while frozen)
OPEN_LOOP = {"join-and-leave-open-loop": 2000.0}
ORDERINGS = ["causal-total", "sequencer"]


@pytest.mark.parametrize("safe", [False, True], ids=["plain", "safe"])
@pytest.mark.parametrize("ordering", ORDERINGS)
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_sequencer_fast_paths_match_the_general_path(
    monkeypatch: pytest.MonkeyPatch, name: str, ordering: str, safe: bool
) -> None:
    nodes, faults, partitions = SCENARIOS[name]
    with shadowed(monkeypatch, Sequencer) as shadow:
        rate = OPEN_LOOP.get(name)
        result = simulate(ordering, nodes, faults, seed=len(name), safe=safe,
                          partitions=partitions, rate=rate, messages=160 if rate else 80)
    # (an open loop's leaver does not send its share scheduled after it left)
    assert result.quiescent or name in OPEN_LOOP
    assert len(shadow.twins) >= nodes
    # Steady-state data and orders are a good share: the fast paths were exercised.
    assert shadow.steady > shadow.events // 10 > 0
    assert shadow.broadcasts > 0


def test_a_fast_path_that_skips_the_leader_check_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Planted: any `SOrder` (not only the leader's) goes to the steady state, so an order
    of a former view's sequencer, still a member (a side's, replayed in the merge view
    after the merge that froze its receiver), is applied instead of dropped."""
    correct = Sequencer.handle

    def broken(layer: Sequencer, event: Event, now: int) -> list[Effect]:
        st = layer.st
        header = event.header if type(event) is Received else None
        if type(header) is SOrder and st.view is not None and st.view.leader != layer.node:
            assert isinstance(event, Received)
            st.now = now
            return (sequencer_numbering.on_order(st, event.sender, header.first, header.ids,
                                                 header.bodies)
                    + layer._after())
        return correct(layer, event, now)

    monkeypatch.setattr(Sequencer, "handle", broken)
    with pytest.raises(AssertionError), shadowed(monkeypatch, Sequencer):
        # A member that was a side's sequencer before a merge view led by another
        # (its orders buffered while the receiver was frozen reach the core after)
        layer = Sequencer("n2")
        layer.handle(ViewInstalled(View(3, ("n1", "n2", "n3"))), 0)
        layer.handle(Received("n3", SOrder(1, [("n3", 1)]), EMPTY), 10)
