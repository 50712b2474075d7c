"""The native lane in a running group (abcast.runtime.lane, abcast._lane).

Real nodes over tcp on loopback, one process: with the lane on, a message's frames and
its broadcast take it, and every node still delivers every message once, all in one
order, the same one with the lane off (a serial workload, so the order is the round
robin's). With metrics on no frame takes it (broadcasts still do); switched off, nothing
does. A build from other sources than the checkout's is refused, not run. (That the lane
gives exactly the Python path's outputs and state, step by step, is
tests/unit/test_native_lane.py.)
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Iterator

import pytest

from abcast import Delivery, Group, Node
from abcast.ids import View
from abcast.ordering.registry import OrderingOptions, build_stack
from abcast.runtime import lane
from abcast.runtime.stack_options import for_streams
from abcast.testing.polling import until

_lane = pytest.importorskip(
    "abcast._lane", reason="abcast._lane is not built here (no C compiler or Python "
    "headers at set-up: the pure-Python path runs; bench/build_native.py builds it in a "
    "checkout)")

pytestmark = pytest.mark.timeout(60)

IDS = ("n1", "n2", "n3")
ROUNDS = 30
_until = functools.partial(until, timeout_s=15.0)


@pytest.fixture
def counts() -> Iterator[None]:
    _lane.reset_counts()
    yield
    _lane.reset_counts()


async def _serial_run(*, metrics: bool = False) -> dict[str, list[tuple[str, int]]]:
    """ROUNDS rounds of one message per node, each sent once the previous one is
    delivered everywhere: what each node delivered, in order."""
    nodes = [await Node("tcp://127.0.0.1:0", node=n,
                        metrics_port=0 if metrics else None).start() for n in IDS]
    seen: dict[str, list[tuple[str, int]]] = {n: [] for n in IDS}
    groups: list[Group] = []
    try:
        for node in nodes:
            peers = {other.id: other.address for other in nodes if other is not node}

            def record(d: Delivery, me: str = node.id) -> None:
                seen[me].append((d.origin, d.seq))

            groups.append(await Group("g", ordering="sequencer", host=node, peers=peers,
                                      on_deliver=record).open())
        sent = 0
        for _ in range(ROUNDS):
            for group in groups:
                await group.broadcast(f"m{sent}".encode())
                sent += 1
                await _until(lambda n=sent: all(len(s) >= n for s in seen.values()))
    finally:
        for group in groups:
            await group.close()
        for node in nodes:
            await node.close()
    return seen


def test_the_build_is_of_the_checked_out_sources() -> None:
    assert lane.STATUS == "on", lane.STATUS


def test_a_group_delivers_alike_with_the_lane_and_without(
    counts: None, monkeypatch: pytest.MonkeyPatch,
) -> None:
    with_lane = asyncio.run(_serial_run())
    taken = _lane.counts()
    monkeypatch.setattr(lane, "RECEIVE", None)  # (the broadcasts' step goes with it)
    _lane.reset_counts()
    without = asyncio.run(_serial_run())
    assert _lane.counts()["taken"] == _lane.counts()["declined"] == 0
    expected = [(IDS[i % 3], i // 3 + 1) for i in range(3 * ROUNDS)]
    for node in IDS:
        assert with_lane[node] == expected
        assert without[node] == expected
    # a message's four frames and its broadcast took the lane, bar the first frame on
    # each link (the channel learns of a link on the Python path) and any a tick's ack
    # made late
    assert taken["frames"] >= 4 * 3 * ROUNDS * 0.8, taken
    assert taken["broadcasts"] >= 3 * ROUNDS * 0.8, taken


def test_metrics_keep_every_frame_on_the_python_path(counts: None) -> None:
    """(The node counts each frame's sender; the broadcasts' step has nothing to count.)"""
    seen = asyncio.run(_serial_run(metrics=True))
    assert all(len(s) == 3 * ROUNDS for s in seen.values())
    taken = _lane.counts()
    assert taken["frames"] == 0
    assert taken["broadcasts"] >= 3 * ROUNDS * 0.8, taken


def test_a_stale_build_or_the_switch_keeps_the_lane_off(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert "rebuild it" in lane._stale("0" * 16)
    assert lane._stale(_lane.SOURCE_HASH) == ""
    monkeypatch.setenv(lane.SWITCH, "0")
    receive, broadcast, why = lane._load()
    assert receive is None and broadcast is None and lane.SWITCH in why


@pytest.mark.parametrize(("ordering", "options", "expected"), [
    ("sequencer", OrderingOptions(), True),
    ("sequencer", OrderingOptions(relay=True), False),
    ("sequencer", OrderingOptions(safe=True), False),
    ("causal-total", OrderingOptions(), False),
    ("skeen", OrderingOptions(), False),
])
def test_only_the_plain_sequencers_stack_is_offered(
    ordering: str, options: OrderingOptions, expected: bool,
) -> None:
    """The options the lane declines every frame of keep a group off it altogether."""
    stack = build_stack("n1", "g", ordering, View(1, IDS), for_streams(options))
    assert lane.eligible(stack) is expected
