"""A slow receiver keeps every queue under its bound while a fast sender runs (issue #21):
a real 3-node sequencer group over tcp, n3 reading its sockets 5 ms in every 200 ms, n2
broadcasting as fast as `broadcast()` lets it for 4 s (bench/slow_receiver.py runs the
60 s version). Sampled on every node: the packets unacked on one link never exceed the
channel's window, the credit queue never outgrows max_waiting by more than what the
protocol adds while a broadcast waits, nothing is buffered above a receiver's mark beyond
the window, and everything broadcast is delivered everywhere in the end."""

from __future__ import annotations

import asyncio

import pytest

from abcast.testing.slow_receiver import run

# not `slow`: the only test of these bounds on a real group, and 4 s of it
pytestmark = pytest.mark.timeout(120)

WINDOW = 32
MAX_WAITING = 32


def test_a_slow_receiver_keeps_every_queue_under_its_bound() -> None:
    peaks = asyncio.run(run(4.0, window=WINDOW, max_waiting=MAX_WAITING, period_s=0.2,
                            open_s=0.005))
    assert peaks.samples > 10 and peaks.broadcasts > 100
    assert max(peaks.unacked_per_link.values()) <= WINDOW
    assert max(peaks.held_above.values()) <= WINDOW
    # the sender's own credit queue: broadcast() waits at max_waiting (the batch being
    # numbered when it filled may go past by one packet)
    assert peaks.backlog["n2"] <= MAX_WAITING + 1
    # the sequencer's queue to the slow node holds its orders for everybody's traffic:
    # held back by the senders' credit, not by its own (60 s, window 32: peak 88; see
    # docs/operations.md, "Limits")
    assert peaks.backlog["n1"] <= 8 * MAX_WAITING
    assert set(peaks.delivered.values()) == {peaks.broadcasts}
