"""The native lane reads and writes a slot at its offset only while its type says so.

The lane keeps, per attribute name, the offset of the slot that holds it in the instances
of a type (src/abcast/_native/lane.h): where the type has a writable object member for the
name and the generic getattr and setattr. Anything else goes through getattr and setattr,
and a class changed since (a class attribute set: CPython moves the type's version tag)
must be looked at again.

Rules: test_native_lane.py's differential harness (`run`: the Python path against the
lane, every output and state compared after every step). Halfway through the lane's
calls, each class of the objects a step reads (the stack, its three layers, the
ordering, their states, the admission) gets a property for every slot of its own and of
its bases, which reads and writes the slot through its member descriptor and counts the
calls made from within the lane (the classes are restored after the test). From then on
the lane must go through the properties — offsets cached before the change would bypass
them — and both groups must still agree.
"""

from __future__ import annotations

import gc
from collections import Counter
from typing import Any

import pytest
from test_native_lane import OPTIONS, SEEDS, Lane, lane, run

from abcast.group.failure_detector import _State
from abcast.membership.layer import Membership
from abcast.membership.state import MembershipState
from abcast.ordering._holdback import CausalHoldback
from abcast.ordering._open_channel import OpenChannel
from abcast.ordering._open_detector import OpenDetector
from abcast.ordering.sequencer import Sequencer
from abcast.ordering.sequencer_state import SequencerState
from abcast.stack import Stack

__all__ = ["lane"]  # the C lane's fixture, shared with test_native_lane.py

#: the classes of the objects the lane reads, exactly (it declines subclasses of layers)
READ = (Stack, OpenDetector, _State, OpenChannel, Membership, MembershipState, Sequencer,
        SequencerState, CausalHoldback)
#: names the lane reads or writes on them each step (each must reach its property)
READ_BY_THE_LANE = {"layers", "_next_seq", "_s", "peers", "_tick_set", "_in", "s", "status",
                    "ordering", "st", "now", "next_delivery", "numbers"}


class Watched:
    """What the properties saw from within the lane."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.monkeypatch = monkeypatch
        self.in_lane = False
        self.hits: Counter[str] = Counter()
        self.installed = False

    def install(self) -> None:
        """A property for every slot of each class and its bases: the classes change."""
        for cls in READ:
            for klass in cls.__mro__:
                slots = vars(klass).get("__slots__", ())
                for name in (slots,) if isinstance(slots, str) else slots:
                    if not isinstance(vars(cls).get(name), property):
                        self.monkeypatch.setattr(cls, name, self.through(name, vars(klass)[name]))
        self.installed = True

    def through(self, name: str, slot: Any) -> property:
        def get(obj: object) -> Any:
            if self.in_lane:
                self.hits[name] += 1
            return slot.__get__(obj, type(obj))

        def set_(obj: object, value: Any) -> None:
            if self.in_lane:
                self.hits[name] += 1
            slot.__set__(obj, value)

        return property(get, set_, slot.__delete__)


class WatchedLane:
    """The C lane, each call marked (the properties count only those), the properties
    installed after its `install_at`-th call."""

    def __init__(self, lane: Lane, watched: Watched, install_at: int) -> None:
        self.lane, self.watched, self.install_at = lane, watched, install_at
        self.calls = 0
        self.taken_after = 0

    def _call(self, step: Any, *args: Any) -> Any:
        self.calls += 1
        self.watched.in_lane = True
        try:
            out = step(*args)
        finally:
            self.watched.in_lane = False
        self.taken_after += self.watched.installed and out is not None
        if self.calls == self.install_at:
            self.watched.install()
        return out

    def receive(self, *args: Any) -> Any:
        return self._call(self.lane.receive, *args)

    def broadcast(self, *args: Any) -> Any:
        return self._call(self.lane.broadcast, *args)

    def backpressured(self, *args: Any) -> Any:  # (not a step: neither marked nor counted)
        return self.lane.backpressured(*args)

    def counts(self) -> dict[str, int]:
        return self.lane.counts()

    def reset_counts(self) -> None:
        self.lane.reset_counts()

    def plant(self, k: int, /) -> None:
        self.lane.plant(k)


@pytest.mark.parametrize("seed", SEEDS[:4])
def test_the_lane_follows_a_class_changed_after_it_cached_its_slots(
    lane: Lane, monkeypatch: pytest.MonkeyPatch, seed: int,
) -> None:
    watched = Watched(monkeypatch)
    stepped = WatchedLane(lane, watched, install_at=150)
    # The harness counts the references to the stack's objects around each lane call: a
    # collection there (more allocations here: the properties) could free earlier
    # histories' garbage that holds some of them (the view) and move the count.
    gc.collect()
    gc.disable()
    try:
        tally = run(seed, stepped, options=OPTIONS[seed % len(OPTIONS)])
    finally:
        gc.enable()
    assert watched.installed and tally.taken > 50, tally
    assert stepped.taken_after > 20, (stepped.taken_after, tally)
    assert not READ_BY_THE_LANE - set(watched.hits), sorted(READ_BY_THE_LANE - set(watched.hits))
