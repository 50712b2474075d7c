"""The driver records a delivered batch as one run of rows, yet the rows say what the
application saw: a delivery callback that sends a batch finds the rows of the deliveries
up to its own before that batch's send rows (and in their deps), the rest after; a
callback that closes the group leaves no rows for the deliveries it never got."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from abcast.batching import DEFAULT_MAX_MESSAGES, pack
from abcast.codec import Header
from abcast.effects import Deliver, Effect
from abcast.events import Event
from abcast.ids import NodeId, View
from abcast.runtime.driver import GroupDriver
from abcast.runtime.node import MonotonicClock
from abcast.stack import Layer, Stack
from abcast.trace.recorder import TraceRecorder

pytestmark = pytest.mark.timeout(20)


class _Nothing(Header, frozen=True):
    pass


class _Silent(Layer):
    """Orders nothing: the test hands the driver its deliveries itself."""

    name = "silent"
    header_type = _Nothing

    def handle(self, event: Event, now: int) -> list[Effect]:
        return []


class _Host:
    def __init__(self) -> None:
        self.id = "n1"
        self.clock = MonotonicClock()
        self.recorder: TraceRecorder | None = TraceRecorder("runs")

    def transmit(self, dst: NodeId, data: bytes) -> None:
        raise AssertionError("nothing is sent in this test")

    def transmit_many(self, dsts: tuple[NodeId, ...], data: bytes) -> int:
        raise AssertionError("nothing is sent in this test")


def _driver(on_deliver: Callable[[Deliver], None]) -> tuple[GroupDriver, _Host]:
    host = _Host()
    stack = Stack("n1", "g", [_Silent("n1")], View(1, ("n1", "n2")))
    return GroupDriver(host, stack, on_deliver=on_deliver), host


def _deliver_batch(driver: GroupDriver, payloads: list[bytes]) -> None:
    """n2's batch of messages 1, 2, …, delivered as the ordering delivers one message."""

    async def main() -> None:
        driver.start()
        driver._apply([Deliver("n2", 1, pack(1, payloads))])

    asyncio.run(main())


def test_a_callbacks_batch_follows_the_rows_of_the_deliveries_before_it() -> None:
    seen: list[int] = []
    holder: list[GroupDriver] = []

    def on_deliver(d: Deliver) -> None:
        seen.append(d.seq)
        if d.seq == 3:  # a full batch leaves at once, from inside the callback
            for _ in range(DEFAULT_MAX_MESSAGES):
                holder[0].broadcast(b"x")

    driver, host = _driver(on_deliver)
    holder.append(driver)
    rec = host.recorder
    assert rec is not None
    _deliver_batch(driver, [b"a", b"bb", b"c", b"d", b"e"])
    assert seen == [1, 2, 3, 4, 5]
    rows = [r for r in rec.rows_of("n1") if r.kind != "view"]
    shape = [(r.kind, r.origin, r.seq) for r in rows]
    sends = [("send", "n1", s) for s in range(1, DEFAULT_MAX_MESSAGES + 1)]
    assert shape == [("deliver", "n2", 1), ("deliver", "n2", 2), ("deliver", "n2", 3),
                     *sends, ("deliver", "n2", 4), ("deliver", "n2", 5)]
    assert {r.kind: r.deps for r in rows}["send"] == {"n2": 3}
    assert [r.size for r in rows if r.kind == "deliver"] == [1, 2, 1, 1, 1]
    assert [r.index for r in rows if r.kind == "deliver"] == [1, 2, 3, 4, 5]
    t_ns = [r.t_ns for r in rec.rows_of("n1")]
    assert t_ns == sorted(set(t_ns))  # strictly increasing, the sends in between


def test_a_callback_that_closes_the_group_ends_the_rows_there() -> None:
    seen: list[int] = []
    holder: list[GroupDriver] = []

    def on_deliver(d: Deliver) -> None:
        seen.append(d.seq)
        if d.seq == 2:
            holder[0].close()

    driver, host = _driver(on_deliver)
    holder.append(driver)
    _deliver_batch(driver, [b"a", b"bb", b"c"])
    assert seen == [1, 2]
    assert host.recorder is not None
    assert [(r.kind, r.seq) for r in host.recorder.rows_of("n1")] == [
        ("view", None), ("deliver", 1), ("deliver", 2)]
    assert driver.prefix.deps("n1") == {"n2": 2}


def test_an_untraced_driver_delivers_the_same_and_notes_nothing() -> None:
    seen: list[int] = []
    driver, host = _driver(lambda d: seen.append(d.seq))
    host.recorder = None
    _deliver_batch(driver, [b"a", b"bb", b"c"])
    assert seen == [1, 2, 3] and driver.delivered == 3
    assert driver.prefix.deps("n1") == {}
