"""Busy polling (`TransportOptions.busy_poll_us`): the poller's window on a fake loop and
clock, the option from a URL query, and every transport carrying a link in order with it
on, its poller stopped by `close`."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from transport_harness import SCHEMES, Inbox, Nodes, bind_url, numbered, run

from abcast.errors import ConfigError
from abcast.transport import TransportOptions, _common, transport_from_url
from abcast.transport._common import BusyPoll, QueuedTransport
from abcast.transport.base import MAX_BUSY_POLL_US


class FakeLoop:
    """Records `call_soon`; `turn()` runs what was scheduled, as one loop turn would."""

    def __init__(self) -> None:
        self.ready: list[Callable[[], Any]] = []

    def call_soon(self, callback: Callable[[], Any]) -> None:
        self.ready.append(callback)

    def turn(self) -> None:
        ready, self.ready = self.ready, []
        for callback in ready:
            callback()


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    now = [0]
    monkeypatch.setattr(_common.time, "perf_counter_ns", lambda: now[0])
    yields: list[int] = []
    monkeypatch.setattr(_common.os, "sched_yield", lambda: yields.append(now[0]))
    return now


def test_the_poller_runs_each_turn_until_the_window_after_the_last_touch(
    clock: list[int],
) -> None:
    loop = FakeLoop()
    poll = BusyPoll(loop, 200)  # type: ignore[arg-type]
    poll.touch()
    poll.touch()
    assert len(loop.ready) == 1  # one poller, however often it is touched
    for t in (50_000, 150_000):
        clock[0] = t
        loop.turn()
        assert len(loop.ready) == 1
    poll.touch()  # at 150 µs: the window now ends at 350 µs
    clock[0] = 349_000
    loop.turn()
    assert len(loop.ready) == 1
    clock[0] = 350_000
    loop.turn()
    assert loop.ready == []  # the window passed: the loop may sleep again
    poll.touch()
    assert len(loop.ready) == 1  # and the next activity starts a new one


def test_stop_ends_the_window_at_the_next_turn(clock: list[int]) -> None:
    loop = FakeLoop()
    poll = BusyPoll(loop, 1_000)  # type: ignore[arg-type]
    poll.touch()
    poll.stop()
    loop.turn()
    assert loop.ready == []


def test_the_option_comes_from_a_url_query_and_is_bounded() -> None:
    transport = transport_from_url("tcp://127.0.0.1:0?busy_poll_us=150")
    assert isinstance(transport, QueuedTransport)
    assert transport.options.busy_poll_us == 150
    assert TransportOptions().busy_poll_us == 0
    for bad in (-1, MAX_BUSY_POLL_US + 1):
        with pytest.raises(ConfigError, match="busy_poll_us"):
            TransportOptions(busy_poll_us=bad)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_link_in_order_with_busy_polling_and_no_poller_after_close(scheme: str) -> None:
    async def main() -> None:
        inbox = Inbox()
        # the longest window: still open after close unless close stops it
        options = TransportOptions(busy_poll_us=MAX_BUSY_POLL_US)
        async with Nodes() as nodes:
            a = await nodes.start(scheme, "a", Inbox(), options, bind_url(scheme))
            b = await nodes.start(scheme, "b", inbox, options, bind_url(scheme))
            a.add_peer("b", b.address)
            for seq in range(300):
                a.send("b", numbered(seq, 64))
                if seq % 50 == 0:
                    await asyncio.sleep(0)  # several bursts, each with its own window
            await inbox.wait_until(lambda: len(inbox.got("a")) == 300, "every frame")
            assert inbox.got("a") == list(range(300))
            assert inbox.corrupt == 0
            pollers = [t._busy for t in (a, b) if isinstance(t, QueuedTransport)]
            assert all(p is not None for p in pollers)
            await a.close()
            await b.close()
            for _ in range(3):
                await asyncio.sleep(0)
            assert not any(p._armed for p in pollers if p is not None)

    run(main)
