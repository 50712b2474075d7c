"""The driver's lazy loop timers fire exactly what an eager timer table would.

`GroupDriver` leaves a key's loop timer alone when the key is moved later or cancelled:
the timer re-arms or lapses when it fires. On a virtual loop (exact time, no waiting), a
seeded random history of sets, moves, cancels and time advances must fire the same keys
at the same times as a plain model (`due[key]`, fired in time order), leave no timer
behind, and call the loop less often than one `call_later` per `SetTimer`. A driver
whose cancel does nothing, or whose timer ignores a later move, must be caught.
"""

from __future__ import annotations

import random
from collections.abc import Hashable

import pytest

from abcast.codec import Header
from abcast.effects import CancelTimer, Effect, Output, SetTimer
from abcast.events import Event, TimerFired
from abcast.ids import NodeId, View
from abcast.runtime.driver import GroupDriver
from abcast.stack import Layer, Stack
from abcast.testing.virtual_loop import NetHost, VirtualLoop

KEYS = ("ack", "rto", "tick", "stable")


class _Nothing(Header, frozen=True):
    pass


class _Recorder(Layer):
    name = "timers"
    header_type = _Nothing

    def __init__(self, node: NodeId) -> None:
        super().__init__(node)
        self.fired: list[tuple[Hashable, int]] = []

    def handle(self, event: Event, now: int) -> list[Effect]:
        if isinstance(event, TimerFired):
            self.fired.append((event.key, now))
        return []


class _Host(NetHost):
    def __init__(self, loop: VirtualLoop) -> None:
        super().__init__("n1", loop)

    def transmit(self, dst: NodeId, data: bytes) -> None:
        raise AssertionError("nothing is sent in this test")


def run_history(seed: int, steps: int = 400) -> tuple[int, int]:
    """Drive a driver and the model alike; return (loop calls, SetTimer outputs)."""
    rng = random.Random(seed)
    loop = VirtualLoop()
    layer = _Recorder("n1")
    driver = GroupDriver(_Host(loop), Stack("n1", "g", [layer], View(1, ("n1",))))
    driver._loop = loop  # type: ignore[assignment]  # the virtual loop stands in for asyncio
    due: dict[Hashable, int] = {}

    def advance(target: int) -> None:
        want = sorted((at, str(key)) for key, at in due.items() if at <= target)
        for _, key in want:
            del due[key]
        before = len(layer.fired)
        loop.advance_to(target)
        got = sorted((now, str(key)) for key, now in layer.fired[before:])
        assert got == want, f"seed {seed}: up to {target}"

    sets = 0
    for _ in range(steps):
        roll, key = rng.random(), rng.choice(KEYS)
        outputs: list[Output] = []
        if roll < 0.5:  # set or move, mostly later (a channel's ack and rto timers)
            at = loop.now + rng.choice((rng.randrange(0, 500), rng.randrange(500, 6_000)))
            outputs.append(SetTimer((0, key), at))
            due[key] = at
            sets += 1
        elif roll < 0.7:
            outputs.append(CancelTimer((0, key)))
            due.pop(key, None)
        else:
            advance(loop.now + rng.randrange(0, 4_000))
        driver._apply(outputs)
    advance(loop.now + 10_000)
    assert due == {}
    assert driver._timers == {}, "a timer stayed behind"
    assert loop.pending() == 0
    return loop.calls, sets


@pytest.mark.parametrize("seed", range(20))
def test_lazy_timers_fire_what_an_eager_table_fires(seed: int) -> None:
    calls, sets = run_history(seed)
    assert sets > 100
    assert calls < sets  # moves later and cancels left the loop alone


def test_a_cancel_that_does_nothing_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(GroupDriver, "_cancel_timer", lambda self, key: None)
    with pytest.raises(AssertionError):
        for seed in range(5):
            run_history(seed)


def test_a_timer_that_ignores_a_later_move_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    correct = GroupDriver._set_timer

    def early(self: GroupDriver, key: Hashable, at: int) -> None:
        timer = self._timers.get(key)
        if timer is not None and timer.due is not None and timer.armed <= at:
            return  # planted: the move is forgotten, the old deadline fires
        correct(self, key, at)

    monkeypatch.setattr(GroupDriver, "_set_timer", early)
    with pytest.raises(AssertionError):
        for seed in range(5):
            run_history(seed)
