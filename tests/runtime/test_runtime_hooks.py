"""The driver's application hooks: a snapshot is taken exactly between the deliveries
before and after it, a joiner's state is installed before what follows it, views reach
`on_view`, a view without this node ends the group here (gracefully after a leave,
as a crash otherwise), partitions that merge get the application's `merge_state`, and
outputs are carried out in the order the application and the group need — driven by a
scripted core, no network."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

import pytest

from abcast.batching import pack
from abcast.codec import FLAG_CONTROL, Header, decode_envelope
from abcast.effects import (
    Deliver,
    Effect,
    InstallState,
    InstallView,
    MergeStates,
    Multicast,
    Send,
    SetTimer,
    TakeSnapshot,
    Transmit,
)
from abcast.errors import LocalProtocolError
from abcast.events import (
    BroadcastRequested,
    Event,
    JoinRequested,
    LeaveRequested,
    SnapshotTaken,
    StatesMerged,
    TimerFired,
    ViewInstalled,
)
from abcast.ids import NodeId, View
from abcast.runtime.driver import AppHooks, GroupDriver
from abcast.runtime.loop import MonotonicClock
from abcast.stack import Layer, Stack
from abcast.testing.virtual_loop import NetHost, VirtualLoop
from abcast.trace.recorder import TraceRecorder

pytestmark = pytest.mark.timeout(20)


class _Nothing(Header, frozen=True):
    pass


class _Script(Layer):
    """A core whose outputs the test dictates: a broadcast of b"snap" delivers m1, asks
    for a snapshot and delivers m2; a join installs a state, a view, then delivers;
    a leave (or the timer "kick") installs a view without this node and delivers once
    more (which must never reach the application)."""

    name = "script"
    header_type = _Nothing

    def __init__(self, node: NodeId) -> None:
        super().__init__(node)
        self.answered: list[tuple[int, bytes]] = []

    def handle(self, event: Event, now: int) -> list[Effect]:
        match event:
            case ViewInstalled():
                return []
            case BroadcastRequested(seq, _):  # the batch of one b"snap"
                return [Deliver(self.node, seq, pack(1, [b"m1"])), TakeSnapshot(7),
                        Deliver(self.node, seq + 100, pack(2, [b"m2"]))]
            case SnapshotTaken(token, state):
                self.answered.append((token, state))
                return []
            case JoinRequested(contacts):
                view = View(5, (self.node, *contacts))
                return [InstallState(b"S"), InstallView(view),
                        Deliver("n9", 1, pack(1, [b"after"]))]
            case LeaveRequested():
                return self._gone()
            case TimerFired("kick"):
                return self._gone()
            case _:
                return []

    def _gone(self) -> list[Effect]:
        return [InstallView(View(9, ("n9",))), Deliver("n9", 2, pack(2, [b"too late"]))]


class _Host(NetHost):
    """On the running loop's real clock, traced."""

    def __init__(self) -> None:
        super().__init__("n1", VirtualLoop(), recorder=TraceRecorder("hooks"))
        self.clock = MonotonicClock()

    def transmit(self, dst: NodeId, data: bytes) -> None:
        raise AssertionError("nothing is sent in this test")


class _App:
    """Records every call, in order; its state is the list of payloads it delivered."""

    def __init__(self) -> None:
        self.log: list[str] = []
        self.delivered: list[bytes] = []

    def on_deliver(self, d: Deliver) -> None:
        self.delivered.append(d.payload)
        self.log.append(f"deliver {d.payload.decode()}")

    def get_state(self) -> bytes:
        self.log.append("snapshot")
        return b",".join(self.delivered)

    def set_state(self, state: bytes) -> None:
        self.log.append(f"state {state.decode()}")

    def on_view(self, view: View) -> None:
        self.log.append(f"view {view.view_id}")

    def on_removed(self, view: View, graceful: bool) -> None:
        self.log.append(f"removed {view.view_id} graceful={graceful}")

    def hooks(self) -> AppHooks:
        return AppHooks(self.get_state, self.set_state, self.on_view, self.on_removed)


def _driver(app: _App, first_view: int = 1) -> tuple[GroupDriver, _Script, _Host]:
    host = _Host()
    layer = _Script("n1")
    stack = Stack("n1", "g", [layer], View(first_view, ("n1",)))
    return GroupDriver(host, stack, app.on_deliver, app.hooks()), layer, host


def _broadcast_snap(driver: GroupDriver) -> None:
    """Start `driver` and broadcast b"snap": the script delivers m1, asks for a snapshot
    and delivers m2."""

    async def main() -> None:
        driver.start()
        driver.broadcast(b"snap")
        driver.flush()

    asyncio.run(main())


def test_a_snapshot_holds_exactly_the_deliveries_before_it() -> None:
    app = _App()
    driver, layer, _ = _driver(app)

    _broadcast_snap(driver)
    assert app.log == ["view 1", "deliver m1", "snapshot", "deliver m2"]
    assert layer.answered == [(7, b"m1")]  # m2 came after the cut
    assert driver.snapshots == 1


def test_a_joiner_installs_its_state_then_the_view_then_delivers() -> None:
    app = _App()
    driver, _, host = _driver(app, first_view=0)  # a joiner starts in a view of its own

    async def main() -> None:
        driver.start()
        driver.join(("n2", "n3"))

    asyncio.run(main())
    assert app.log == ["view 0", "state S", "view 5", "deliver after"]
    assert host.recorder is not None
    assert [r.kind for r in host.recorder.rows()] == ["view", "view", "deliver"]
    views = [(r.view_id, r.members) for r in host.recorder.rows() if r.kind == "view"]
    assert views == [(0, ("n1",)), (5, ("n1", "n2", "n3"))]
    delivered = [r for r in host.recorder.rows() if r.kind == "deliver"]
    assert [r.view_id for r in delivered] == [5]  # labelled with the view it came in


def test_a_graceful_leave_ends_the_group_and_nothing_after_reaches_the_app() -> None:
    app = _App()
    driver, _, host = _driver(app)

    async def main() -> None:
        driver.start()
        driver.leave()

    asyncio.run(main())
    assert app.log == ["view 1", "removed 9 graceful=True"]
    assert driver.closed and driver.removed == View(9, ("n9",))
    assert host.recorder is not None
    assert [r.kind for r in host.recorder.rows()] == ["view"]  # no crash row for a leaver
    with pytest.raises(LocalProtocolError, match="closed"):
        driver.broadcast(b"x")


def test_a_node_the_group_removed_stops_and_its_trace_says_crashed() -> None:
    app = _App()
    driver, _, host = _driver(app)

    async def main() -> None:
        driver.start()
        driver._apply([SetTimer((0, "kick"), host.clock.now_us())])
        async with asyncio.timeout(5):
            while not driver.closed:
                await asyncio.sleep(0.005)

    asyncio.run(main())
    assert app.log == ["view 1", "removed 9 graceful=False"]
    assert host.recorder is not None
    assert [r.kind for r in host.recorder.rows()] == ["view", "crash"]


def test_join_and_leave_need_a_running_driver() -> None:
    app = _App()
    driver, _, _ = _driver(app)
    with pytest.raises(LocalProtocolError, match="not running"):
        driver.join(("n2",))
    with pytest.raises(LocalProtocolError, match="not running"):
        driver.leave()


def test_without_hooks_a_snapshot_is_empty_and_a_state_is_ignored() -> None:
    host = _Host()
    layer = _Script("n1")
    driver = GroupDriver(host, Stack("n1", "g", [layer], View(1, ("n1",))))

    async def main() -> None:
        driver.start()
        driver.broadcast(b"snap")
        driver.flush()
        driver.join(("n2",))

    asyncio.run(main())
    assert layer.answered == [(7, b"")]
    assert driver.view_id == 5


def test_a_state_for_a_node_already_admitted_marks_a_new_incarnation_in_the_trace() -> None:
    """A member the group cut off and admitted again (the sequencer's rejoin): its trace
    must not pass it off as present throughout, exactly as the simulator records it."""
    app = _App()
    driver, _, host = _driver(app)

    async def main() -> None:
        driver.start()  # view 1: already a member
        driver._apply([InstallState(b"again")])

    asyncio.run(main())
    assert app.log == ["view 1", "state again"]
    assert host.recorder is not None
    assert [r.kind for r in host.recorder.rows()] == ["view", "crash", "recover"]
    assert driver.rejoins == 1 and not driver.closed


# ---------------------------------------------------------------- evs: the merge hook
# A `MergeStates` output is answered at once with the application's `merge_state(states)`
# (or, without one, the first side's state), the answer goes back to the core as
# `StatesMerged`, and the merged state is installed before the merge view's deliveries,
# without the crash/recover rows a rejoin writes.

SIDES = (b"side of n1", b"side of n4")


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


def _merge_run(merge_state: Callable[[list[bytes]], bytes] | None) -> tuple[
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

    log, layer, host = _merge_run(merge)
    assert seen == [list(SIDES)]
    assert layer.answers == [(3, b"side of n1 + side of n4")]
    assert log == ["view 5", "state side of n1 + side of n4", "view 9",
                   "deliver after the merge"]
    assert host.recorder is not None
    # a merge is not a rejoin: no crash/recover rows, the node stays one incarnation
    assert [r.kind for r in host.recorder.rows()] == ["view", "view", "deliver"]


def test_without_a_hook_the_first_sides_state_is_kept() -> None:
    log, layer, _ = _merge_run(None)
    assert layer.answers == [(3, SIDES[0])]
    assert log[1] == f"state {SIDES[0].decode()}"


# ---------------------------------------------------------------- output order, batching
# The driver carries a delivery out only after the protocol packets and timers that
# follow it (the group should not wait for this node's application), but before any
# view, state, snapshot or control packet after it; and `send_queued` sends a turn's
# broadcasts at once, as one batch, except from inside an application callback.


class _Announcer(Layer):
    """A broadcast delivers m1, announces it, installs view 2, delivers m2, acks (a
    control packet), delivers m3 and announces again; the timer "deliver" delivers m4."""

    name = "announcer"
    header_type = _Nothing

    def handle(self, event: Event, now: int) -> list[Effect]:
        match event:
            case BroadcastRequested(seq, _):
                return [Deliver("n1", seq, pack(1, [b"m1"])),
                        Multicast(("n2", "n3"), _Nothing()),
                        InstallView(View(2, ("n1", "n2", "n3"))),
                        Deliver("n1", seq + 1, pack(2, [b"m2"])),
                        Send("n2", _Nothing(), control=True),
                        Deliver("n1", seq + 2, pack(3, [b"m3"])),
                        Multicast(("n2",), _Nothing())]
            case TimerFired("deliver"):
                return [Deliver("n2", 1, pack(1, [b"m4"]))]
        return []


class _SendingHost(_Host):
    def __init__(self, log: list[str]) -> None:
        super().__init__()
        self.recorder = None
        self.log = log

    def transmit(self, dst: NodeId, data: bytes) -> None:
        control = decode_envelope(data).flags & FLAG_CONTROL
        self.log.append(f"{'ack' if control else 'send'} {dst}")

    def transmit_run(self, run: list[Transmit]) -> int:
        self.log.append("run")
        for transmit in run:
            for dst in transmit.to:
                self.transmit(dst, transmit.data)
        return sum(len(transmit.to) for transmit in run)


def _announcing_driver(
    on_deliver: Callable[[Deliver], None] | None = None,
) -> tuple[GroupDriver, list[str]]:
    log: list[str] = []
    stack = Stack("n1", "g", [_Announcer("n1")], View(1, ("n1", "n2", "n3")))

    def deliver(d: Deliver) -> None:
        log.append(f"deliver {d.payload.decode()}")
        if on_deliver is not None:
            on_deliver(d)

    hooks = AppHooks(on_view=lambda v: log.append(f"view {v.view_id}"))
    return GroupDriver(_SendingHost(log), stack, deliver, hooks), log


def test_packets_announcing_a_delivery_leave_before_the_application_hears_it() -> None:
    driver, log = _announcing_driver()

    async def main() -> None:
        driver.start()
        log.clear()
        driver.broadcast(b"x")

    asyncio.run(main())
    # each run of protocol packets is one call: one write per peer, before anything else
    assert log == ["run", "send n2", "send n3", "deliver m1", "view 2",
                   "deliver m2", "ack n2", "run", "send n2", "deliver m3"]


def test_send_queued_sends_the_turns_broadcasts_at_once_as_one_batch() -> None:
    driver, _ = _announcing_driver()
    counts: list[int] = []

    async def main() -> None:
        driver.start()
        for payload in (b"a", b"b", b"c"):
            driver.broadcast(payload)
            counts.append(driver.stack.broadcasts)
        driver.send_queued()
        counts.append(driver.stack.broadcasts)
        await asyncio.sleep(0)  # the turn ends: nothing is left to send
        counts.append(driver.stack.broadcasts)

    asyncio.run(main())
    assert counts == [0, 0, 0, 1, 1]
    assert driver.broadcasts == 3


def test_inside_a_delivery_callback_send_queued_waits_for_the_end_of_the_turn() -> None:
    inside: list[int] = []
    driver: GroupDriver | None = None

    def reply(d: Deliver) -> None:
        assert driver is not None
        if d.payload == b"m4":  # once: the reply's own deliveries do not answer again
            driver.broadcast(b"reply")
            driver.send_queued()
            inside.append(driver.stack.broadcasts)  # not yet: the stack is mid-output

    driver, log = _announcing_driver(reply)

    async def main() -> None:
        driver.start()
        driver._apply([SetTimer((0, "deliver"), driver.host.clock.now_us())])
        async with asyncio.timeout(5):
            while "deliver m4" not in log:
                await asyncio.sleep(0.001)
        await asyncio.sleep(0)
        inside.append(driver.stack.broadcasts)

    asyncio.run(main())
    assert inside == [0, 1]


# ------------------------------------------------------ the application's code raising
# The stack has moved past the outputs being carried out, on every member alike: a
# callback that raises is logged (with its traceback at the 1st, 2nd, 4th... failure) and
# counted, and the driver carries out the rest — nothing after it is lost here only.


class _Raising(_App):
    """`_App`, with the callbacks named in `failing` raising instead of answering (or,
    for get_state, answering a str)."""

    def __init__(self, *failing: str) -> None:
        super().__init__()
        self.failing = set(failing)

    def on_deliver(self, d: Deliver) -> None:
        super().on_deliver(d)
        if "on_deliver" in self.failing:
            raise RuntimeError(f"cannot take {d.payload.decode()}")

    def get_state(self) -> bytes:
        state = super().get_state()
        if "get_state" in self.failing:
            raise RuntimeError("cannot snapshot")
        if "get_state str" in self.failing:
            return state.decode()  # type: ignore[return-value]  # the misuse under test
        return state

    def set_state(self, state: bytes) -> None:
        super().set_state(state)
        if "set_state" in self.failing:
            raise RuntimeError("cannot install")

    def on_view(self, view: View) -> None:
        super().on_view(view)
        if "on_view" in self.failing:
            raise RuntimeError("cannot see")

    def on_removed(self, view: View, graceful: bool) -> None:
        super().on_removed(view, graceful)
        if "on_removed" in self.failing:
            raise RuntimeError("cannot leave")


def _errors(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if "the application's" in r.getMessage()]


def test_a_delivery_callback_that_raises_loses_nothing_after_it(
        caplog: pytest.LogCaptureFixture) -> None:
    app = _Raising("on_deliver")
    driver, layer, _ = _driver(app)

    _broadcast_snap(driver)  # an escaping exception would lose the rest
    assert app.log == ["view 1", "deliver m1", "snapshot", "deliver m2"]
    assert layer.answered == [(7, b"m1")]
    assert driver.app_errors == 2 and driver.delivered == 2 and not driver.closed
    (first, second) = _errors(caplog)  # the 1st and 2nd failures are both logged
    assert "on_deliver raised RuntimeError: cannot take m1" in first.getMessage()
    assert first.exc_info is not None and "cannot take m2" in second.getMessage()


def test_a_callback_that_always_raises_is_logged_at_powers_of_two(
        caplog: pytest.LogCaptureFixture) -> None:
    driver, _, _ = _driver(_Raising())
    failure = RuntimeError("again")

    async def main() -> None:
        driver.start()
        for _ in range(100):
            driver._app_failed("on_deliver", failure)

    asyncio.run(main())
    assert driver.app_errors == 100
    assert [f"({n} so far" in r.getMessage() for r, n in
            zip(_errors(caplog), (1, 2, 4, 8, 16, 32, 64), strict=True)] == [True] * 7


@pytest.mark.parametrize("failing", ["get_state", "get_state str"])
def test_a_failed_snapshot_is_not_answered_and_the_deliveries_go_on(
        failing: str, caplog: pytest.LogCaptureFixture) -> None:
    app = _Raising(failing)
    driver, layer, _ = _driver(app)

    _broadcast_snap(driver)
    assert layer.answered == []  # no state handed to the joiner: not a wrong one
    assert driver.snapshots == 0 and driver.app_errors == 1
    assert app.log == ["view 1", "deliver m1", "snapshot", "deliver m2"]
    (record,) = _errors(caplog)
    expected = "must return bytes, not str" if failing.endswith("str") else "cannot snapshot"
    assert "get_state raised" in record.getMessage() and expected in record.getMessage()


def test_a_state_or_view_callback_that_raises_still_delivers_what_follows(
        caplog: pytest.LogCaptureFixture) -> None:
    app = _Raising("set_state", "on_view")
    driver, _, _ = _driver(app, first_view=0)

    async def main() -> None:
        driver.start()
        driver.join(("n2", "n3"))

    asyncio.run(main())
    assert app.log == ["view 0", "state S", "view 5", "deliver after"]
    assert driver.view_id == 5 and driver.app_errors == 3  # view 0, the state, view 5
    assert len(_errors(caplog)) == 2  # the 1st and 2nd; the 3rd waits for the 4th


def test_a_removal_callback_that_raises_still_ends_the_group() -> None:
    app = _Raising("on_removed")
    driver, _, _ = _driver(app)

    async def main() -> None:
        driver.start()
        driver.leave()

    asyncio.run(main())
    assert app.log == ["view 1", "removed 9 graceful=True"]
    assert driver.closed and driver.app_errors == 1


def test_a_merge_hook_that_raises_keeps_the_first_sides_state() -> None:
    def merge(states: list[bytes]) -> bytes:
        raise RuntimeError("cannot merge")

    log, layer, _ = _merge_run(merge)
    assert layer.answers == [(3, SIDES[0])]  # as without a hook
    assert log == ["view 5", f"state {SIDES[0].decode()}", "view 9", "deliver after the merge"]
