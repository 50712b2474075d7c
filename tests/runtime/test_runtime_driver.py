"""The group driver alone: loop timers for SetTimer/CancelTimer, the monotonic clock, and
`deps` computed exactly as the simulator computes them."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Hashable

import pytest

from abcast.codec import Header
from abcast.effects import CancelTimer, Effect, SetTimer
from abcast.events import Event, TimerFired, ViewInstalled
from abcast.ids import NodeId, View
from abcast.runtime.driver import DeliveredPrefix, GroupDriver
from abcast.runtime.node import MonotonicClock
from abcast.sim.cluster import SimNode
from abcast.stack import Layer, Stack
from abcast.trace.recorder import TraceRecorder

pytestmark = pytest.mark.timeout(20)


class _Nothing(Header, frozen=True):
    pass


class _TimerScript(Layer):
    """Arms a, b, c on start; when b fires it cancels c and moves a earlier."""

    name = "timers"
    header_type = _Nothing

    def __init__(self, node: NodeId) -> None:
        super().__init__(node)
        self.asked: dict[Hashable, int] = {}
        self.fired: list[tuple[Hashable, int]] = []

    def _set(self, key: str, at: int) -> SetTimer:
        self.asked[key] = at
        return SetTimer(key, at)

    def handle(self, event: Event, now: int) -> list[Effect]:
        match event:
            case ViewInstalled():
                return [self._set("a", now + 400_000), self._set("b", now + 20_000),
                        self._set("c", now + 40_000)]
            case TimerFired(key):
                self.fired.append((key, now))
                if key == "b":
                    return [CancelTimer("c"), self._set("a", now + 30_000)]
        return []


class _Host:
    def __init__(self) -> None:
        self.id = "n1"
        self.clock = MonotonicClock()
        self.recorder: TraceRecorder | None = TraceRecorder("drv")

    def transmit(self, dst: NodeId, data: bytes) -> None:
        raise AssertionError("nothing is sent in this test")


async def _play_the_script(driver: GroupDriver, layer: _TimerScript) -> None:
    """Start the driver and wait until b and a fired and c's old deadline passed too."""
    driver.start()
    async with asyncio.timeout(5):
        while len(layer.fired) < 2:
            await asyncio.sleep(0.005)
    await asyncio.sleep(0.06)  # c's old deadline has passed too


def test_timers_fire_once_not_before_their_deadline_and_obey_moves_and_cancels() -> None:
    host = _Host()
    layer = _TimerScript("n1")
    driver = GroupDriver(host, Stack("n1", "g", [layer], View(1, ("n1",))))
    asyncio.run(_play_the_script(driver, layer))
    driver.close()
    assert [key for key, _ in layer.fired] == ["b", "a"]  # c cancelled; a moved before it
    for key, now in layer.fired:
        assert now >= layer.asked[key]
    assert host.recorder is not None
    assert [r.kind for r in host.recorder.rows()] == ["view"]


def test_a_closed_driver_fires_nothing() -> None:
    host = _Host()
    layer = _TimerScript("n1")
    driver = GroupDriver(host, Stack("n1", "g", [layer], View(1, ("n1",))))

    async def main() -> None:
        driver.start()
        driver.close()
        await asyncio.sleep(0.05)

    asyncio.run(main())
    assert layer.fired == []


def test_the_clock_never_runs_backwards_and_honours_a_fired_deadline() -> None:
    clock = MonotonicClock()
    first = clock.now_us()
    ahead = first + 10_000_000
    assert clock.at_least(ahead) == ahead
    assert clock.now_us() >= ahead  # the deadline became "now"; time does not go back
    assert clock.at_least(first) >= ahead


def test_deps_are_the_simulators_delivered_prefixes() -> None:
    rng = random.Random(7)
    origins = ("n1", "n2", "n3")
    for _ in range(50):
        ours, theirs = DeliveredPrefix(), SimNode("n1", stack=None)  # type: ignore[arg-type]
        pending = [(o, s) for o in origins for s in range(1, rng.randint(1, 12))]
        rng.shuffle(pending)
        for origin, seq in pending:
            ours.note(origin, seq)
            theirs.note_delivered(origin, seq)
            assert ours.deps("n1") == theirs.deps()


def test_fired_and_lapsed_timers_leave_no_cycle_for_the_collector() -> None:
    """A loop timer's args hold the driver's `_Timer`, which holds the handle: once a key
    fires (b, a) or lapses after a cancel (c), nothing of it may wait for the cyclic GC
    (it did: ~6 objects per message of cyclic garbage at a lone message)."""
    import gc

    from abcast.runtime import driver as driver_module

    host = _Host()
    layer = _TimerScript("n1")
    driver = GroupDriver(host, Stack("n1", "g", [layer], View(1, ("n1",))))

    def timers_alive() -> int:
        return sum(type(o) is driver_module._Timer for o in gc.get_objects())

    gc.collect()
    gc.disable()
    try:
        before = timers_alive()
        asyncio.run(_play_the_script(driver, layer))  # c's loop timer lapses too
        assert driver._timers == {}
        assert timers_alive() == before  # freed by reference counting, not by the GC
    finally:
        gc.enable()
        driver.close()
