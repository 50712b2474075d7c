"""The driver's merge hook (extended virtual synchrony, `partitions="evs"`): a
`MergeStates` output is answered at once with the application's `merge_state(states)` —
or, without one, the first side's state — the answer goes back to the core as
`StatesMerged`, and the merged state is installed before the merge view's deliveries,
without the crash/recover rows a rejoin writes. Driven by a scripted core, no network."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from abcast.batching import pack
from abcast.codec import Header
from abcast.effects import Deliver, Effect, InstallState, InstallView, MergeStates
from abcast.events import Event, JoinRequested, StatesMerged, ViewInstalled
from abcast.ids import NodeId, View
from abcast.runtime.driver import AppHooks, GroupDriver
from abcast.runtime.node import MonotonicClock
from abcast.stack import Layer, Stack
from abcast.trace.recorder import TraceRecorder

pytestmark = pytest.mark.timeout(20)

SIDES = (b"side of n1", b"side of n4")


class _Nothing(Header, frozen=True):
    pass


class _Merger(Layer):
    """Asked to join (the test's trigger), it merges two sides: asks for the merged state,
    then installs it, the merge view and one delivery in that view."""

    name = "merger"
    header_type = _Nothing

    def __init__(self, node: NodeId) -> None:
        super().__init__(node)
        self.answers: list[tuple[int, bytes]] = []

    def handle(self, event: Event, now: int) -> list[Effect]:
        match event:
            case JoinRequested():
                return [MergeStates(3, SIDES)]
            case StatesMerged(token, state):
                self.answers.append((token, state))
                return [InstallState(state, merged=True),
                        InstallView(View(9, ("n1", "n2", "n4"))),
                        Deliver("n4", 1, pack(1, [b"after the merge"]))]
            case ViewInstalled():
                return []
        return []


class _Host:
    def __init__(self) -> None:
        self.id = "n1"
        self.clock = MonotonicClock()
        self.recorder: TraceRecorder | None = TraceRecorder("merge")

    def transmit(self, dst: NodeId, data: bytes) -> None:
        raise AssertionError("nothing is sent in this test")


def _run(merge_state: Callable[[list[bytes]], bytes] | None) -> tuple[
        list[str], _Merger, _Host]:
    log: list[str] = []
    host = _Host()
    layer = _Merger("n1")
    hooks = AppHooks(set_state=lambda s: log.append(f"state {s.decode()}"),
                     on_view=lambda v: log.append(f"view {v.view_id}"),
                     merge_state=merge_state)
    driver = GroupDriver(host, Stack("n1", "g", [layer], View(5, ("n1", "n2"))),
                         lambda d: log.append(f"deliver {d.payload.decode()}"), hooks)

    async def main() -> None:
        driver.start()
        driver.join(("n2",))

    asyncio.run(main())
    return log, layer, host


def test_the_merge_hook_gets_every_side_and_its_answer_is_installed_before_delivery() -> None:
    seen: list[list[bytes]] = []

    def merge(states: list[bytes]) -> bytes:
        seen.append(states)
        return b" + ".join(states)

    log, layer, host = _run(merge)
    assert seen == [list(SIDES)]
    assert layer.answers == [(3, b"side of n1 + side of n4")]
    assert log == ["view 5", "state side of n1 + side of n4", "view 9",
                   "deliver after the merge"]
    assert host.recorder is not None
    # a merge is not a rejoin: no crash/recover rows, the node stays one incarnation
    assert [r.kind for r in host.recorder.rows()] == ["view", "view", "deliver"]


def test_without_a_hook_the_first_sides_state_is_kept() -> None:
    log, layer, _ = _run(None)
    assert layer.answers == [(3, SIDES[0])]
    assert log[1] == f"state {SIDES[0].decode()}"
