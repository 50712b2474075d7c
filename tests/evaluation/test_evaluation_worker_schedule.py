"""When a benchmark node sends (evaluation/worker.py): the launcher's `go` names one start
instant for every node, an open loop's slots count from that instant (not from when a
node's timer happened to fire), and the serial workload sends message k only once the
sender delivered message k−1 — also when that delivery came before the node started.
Driven with stand-ins for the node and the group, on a real event loop."""

from __future__ import annotations

import asyncio
import time

from abcast.effects import Deliver
from abcast.errors import Backpressure
from abcast.evaluation.worker import PipeControl, WorkerConfig, _Run

MEMBERS = ("n1", "n2", "n3")


class _Transport:
    async def drain(self) -> None:
        return None


class _Node:
    def __init__(self, node: str) -> None:
        self.id = node
        self.transport = _Transport()


class _Group:
    """Records when each broadcast was made (loop time) and flushed."""

    def __init__(self) -> None:
        self.members = MEMBERS
        self.sent: list[float] = []

    def broadcast_nowait(self, payload: bytes) -> None:
        self.sent.append(asyncio.get_running_loop().time())

    def send_queued(self) -> None:
        pass


class _RefusingGroup(_Group):
    """Refuses every third broadcast (`Backpressure`), as a group past its credit does."""

    def __init__(self) -> None:
        super().__init__()
        self.calls = 0
        self.refused = 0

    def broadcast_nowait(self, payload: bytes) -> None:
        self.calls += 1
        if self.calls % 3 == 0:
            self.refused += 1
            raise Backpressure("credit queue full")
        super().broadcast_nowait(payload)


def _run(node: str, messages: int, *, rate: float | None = None,
         serial: bool = False, group: _Group | None = None) -> tuple[_Run, _Group]:
    config = WorkerConfig(group="g", ordering="sequencer", transport="mem://", size=3,
                          messages=messages, registry="", run_id="schedule", rate=rate,
                          serial=serial)
    group = _Group() if group is None else group
    run = _Run(config, _Node(node))  # type: ignore[arg-type]
    run.group = group  # type: ignore[assignment]
    run.prepare()
    return run, group


def test_go_carries_the_start_instant_and_a_bare_go_means_now() -> None:
    async def main() -> list[int | None]:
        got = []
        for line in (b"go 1795385614705419201\n", b"go\n"):
            control = PipeControl()
            reader = asyncio.StreamReader()
            reader.feed_data(line)
            reader.feed_eof()
            await control._read_stdin(reader)
            got.append(await control.wait_go())
        return got

    assert asyncio.run(main()) == [1795385614705419201, None]


def test_open_loop_slots_count_from_the_common_start_on_every_node() -> None:
    rate = 500.0  # a slot every 2 ms, the group's slots dealt round robin

    async def main() -> tuple[float, list[list[float]]]:
        runs = [_run(node, 12, rate=rate) for node in MEMBERS]
        loop = asyncio.get_running_loop()
        lead_s = 0.03
        start = loop.time() + lead_s
        start_ns = time.time_ns() + int(lead_s * 1e9)
        for run, _ in runs:
            run.begin(start_ns)
        async with asyncio.timeout(5):
            while any(len(group.sent) < 4 for _, group in runs):
                await asyncio.sleep(0.001)
        return start, [group.sent for _, group in runs]

    start, sent = asyncio.run(main())
    for i, times in enumerate(sent):
        assert len(times) == 4
        for j, t in enumerate(times):  # node i's j-th message is the group's k = i + 3j
            # never before its slot on the common schedule (a little clock slack between
            # time.time_ns and the loop's monotonic clock)
            assert t >= start + (i + 3 * j) / rate - 0.0005, (i, j)


def test_serial_sends_after_the_previous_message_even_if_it_came_before_the_start() -> None:
    async def settle() -> None:
        await asyncio.sleep(0.01)  # the start (a loop timer) and call_soon sends run

    async def main() -> tuple[list[float], list[float]]:
        n1, g1 = _run("n1", 6, serial=True)
        n2, g2 = _run("n2", 6, serial=True)
        # n2 delivers message 0 (n1's first) before it has started: it sends at its start
        n2.on_deliver(Deliver("n1", 1, bytes(8)))
        n1.begin(None)
        await settle()
        assert len(g1.sent) == 1 and g2.sent == []  # message 0 leaves at n1's start
        n2.begin(None)
        await settle()
        assert len(g2.sent) == 1  # message 1, released before the start
        # n2's next (message 4) waits for message 3, n1's second
        n2.on_deliver(Deliver("n3", 1, bytes(8)))  # message 2: not the trigger
        await settle()
        assert len(g2.sent) == 1
        n2.on_deliver(Deliver("n1", 2, bytes(8)))  # message 3
        await settle()
        return g1.sent, g2.sent

    first, second = asyncio.run(main())
    assert len(first) == 1 and len(second) == 2


def test_an_open_loop_refused_by_backpressure_retries_and_sends_its_whole_share() -> None:
    async def main() -> _RefusingGroup:
        run, group = _run("n1", 300, rate=1e6, group=_RefusingGroup())
        run.begin(None)
        async with asyncio.timeout(5):
            while run._pacer is None:  # begin() starts it from a loop timer
                await asyncio.sleep(0.001)
            await run._pacer  # ends (a refusal used to kill the pacer, and the run hung)
        assert isinstance(group, _RefusingGroup)
        return group

    group = asyncio.run(main())
    assert group.refused > 0
    assert len(group.sent) == 100  # n1's share of 300: every message, none lost or doubled


def test_a_closed_loop_send_refused_by_backpressure_is_sent_again_and_counted_once() -> None:
    class _RefusesFirst(_Group):
        def __init__(self) -> None:
            super().__init__()
            self.refused = 0

        def broadcast_nowait(self, payload: bytes) -> None:
            if not self.refused:
                self.refused += 1
                raise Backpressure("credit queue full")
            super().broadcast_nowait(payload)

    async def main() -> tuple[_Run, _RefusesFirst]:
        group = _RefusesFirst()
        run, _ = _run("n1", 6, serial=True, group=group)
        run.begin(None)  # message 0 is n1's: refused once, sent again 1 ms later
        async with asyncio.timeout(5):
            while not group.sent:
                await asyncio.sleep(0.001)
        return run, group

    run, group = asyncio.run(main())
    assert group.refused == 1 and len(group.sent) == 1
    assert run.workload is not None and run.workload.sent_by("n1") == 1
