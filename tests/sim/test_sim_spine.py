"""The simulator with the spine's orderings: properties over seeds and faults,
determinism, and a planted FIFO bug that the checks must catch."""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys

import pytest

from abcast.errors import ConfigError
from abcast.ids import NodeId, View
from abcast.ordering import registry
from abcast.ordering.registry import build_stack, get_ordering
from abcast.ordering.unordered import Unordered
from abcast.reliability.channel import ReliableChannel
from abcast.sim import SimConfig, run_simulation
from abcast.stack import Stack
from abcast.testing import FIFO_ORDER

NETWORK_FAULTS = "drop=0.1,dup=0.05,delay=1-30ms"


@pytest.mark.parametrize("ordering", ["unordered", "fifo"])
@pytest.mark.parametrize("seed", range(4))
def test_no_violations_under_loss_duplication_and_reordering(ordering: str, seed: int) -> None:
    result = run_simulation(SimConfig(ordering, nodes=4, messages=300, seed=seed,
                                      faults=NETWORK_FAULTS))
    assert result.quiescent
    assert result.delivered == 4 * 300
    assert result.violations == []
    assert result.retransmissions > 0  # the faults really hit


def test_fifo_survives_a_partition_that_heals() -> None:
    result = run_simulation(SimConfig(
        "fifo", nodes=5, messages=400, seed=11,
        faults="drop=0.05,delay=1-10ms,partition=n1+n2|n3+n4+n5@50ms-900ms,"
               "partition=n5>n1@1s-1.5s"))
    assert result.delivered == 5 * 400 and result.violations == []


class _DeliverOnReceipt(Unordered):
    """A FIFO ordering with its holdback removed: the planted bug."""

    name = "broken-fifo"


def _broken_stack(node: NodeId, view: View) -> Stack:
    return Stack(node, "g", [ReliableChannel(node), _DeliverOnReceipt(node)], view)


def test_broken_fifo_is_caught_when_the_network_reorders() -> None:
    result = run_simulation(
        SimConfig("fifo", nodes=3, messages=300, seed=5, faults="delay=1-30ms,drop=0.05"),
        stack_factory=_broken_stack,
    )
    assert result.counts.get(FIFO_ORDER, 0) > 0
    example = next(v for v in result.violations if v.code == FIFO_ORDER)
    assert example.nodes and example.messages


def test_broken_fifo_passes_when_nothing_reorders() -> None:
    """The same bug is invisible on a FIFO network: the check is about order, not noise."""
    result = run_simulation(
        SimConfig("fifo", nodes=3, messages=100, seed=5, faults="delay=5-5ms"),
        stack_factory=_broken_stack,
    )
    assert result.violations == []


def test_same_seed_same_rows_different_seed_different_rows() -> None:
    cfg = SimConfig("fifo", nodes=3, messages=200, seed=7, faults=NETWORK_FAULTS)
    first, second = run_simulation(cfg), run_simulation(cfg)
    assert first.recorder.rows() == second.recorder.rows()
    other = run_simulation(SimConfig("fifo", nodes=3, messages=200, seed=8, faults=NETWORK_FAULTS))
    assert [r.t_ns for r in other.recorder.rows()] != [r.t_ns for r in first.recorder.rows()]


def test_rows_do_not_depend_on_the_interpreter_hash_seed(tmp_path: object) -> None:
    """Set iteration order changes with PYTHONHASHSEED; the trace must not."""
    code = (
        "from abcast.sim import SimConfig, run_simulation;"
        "r = run_simulation(SimConfig('fifo', nodes=4, messages=150, seed=3,"
        " faults='drop=0.1,dup=0.05,delay=1-30ms'));"
        "import hashlib; print(hashlib.sha256(repr(r.recorder.rows()).encode()).hexdigest())"
    )
    digests = {
        subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                       env={**os.environ, "PYTHONHASHSEED": str(h)}).stdout
        for h in (1, 2, 3)
    }
    assert len(digests) == 1


def test_open_loop_rate_spreads_broadcasts_in_time() -> None:
    result = run_simulation(SimConfig("fifo", nodes=3, messages=90, seed=1, rate=1000.0))
    sends = sorted(r.t_ns for r in result.recorder.rows() if r.kind == "send")
    assert result.delivered == 270 and result.violations == []
    assert sends[-1] >= 89 * 1_000_000  # the 90th broadcast goes out at 89 ms


def test_open_loop_senders_are_the_only_origins() -> None:
    result = run_simulation(SimConfig("fifo", nodes=4, messages=40, seed=1, rate=1000.0,
                                      senders=("n2", "n4")))
    origins = [r.origin for r in result.recorder.rows() if r.kind == "send"]
    assert origins.count("n2") == origins.count("n4") == 20 and len(origins) == 40
    assert result.delivered == 160 and result.violations == []


@pytest.mark.parametrize(("rate", "senders", "says"),
                         [(None, ("n1",), "open-loop"), (100.0, ("n9",), "outside n1..n3")])
def test_senders_need_an_open_loop_and_members(rate: float | None, senders: tuple[str, ...],
                                               says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        run_simulation(SimConfig("fifo", nodes=3, messages=10, seed=1, rate=rate,
                                 senders=senders))


def test_packets_per_broadcast_is_n_minus_one_for_unordered_and_fifo() -> None:
    for n in (2, 3, 5):
        result = run_simulation(SimConfig("fifo", nodes=n, messages=60, seed=1, net_trace=True))
        sends = sum(1 for r in result.recorder.rows() if r.kind == "net_send")
        assert result.packets_per_broadcast == n - 1 == sends / 60


def test_faults_the_ordering_cannot_honour_are_refused() -> None:
    # Every registered ordering tolerates every fault now; the refusal stays for one
    # that would not.
    narrow = dataclasses.replace(get_ordering("fifo"), tolerates=registry.NETWORK_FAULTS)
    with pytest.raises(ConfigError, match=r"fifo.*cannot honour crash"):
        narrow.refuse_faults({"crash", "drop"})
    with pytest.raises(ConfigError, match="unknown fault kinds: meteor"):
        narrow.refuse_faults({"meteor"})


def test_faults_naming_unknown_nodes_are_refused() -> None:
    with pytest.raises(ConfigError, match=r"outside n1\.\.n3"):
        run_simulation(SimConfig("fifo", nodes=3, messages=10, seed=1,
                                 faults="partition=n1|n7@1ms-2ms"))


def test_channel_state_is_freed_at_the_end_of_a_lossy_run() -> None:
    stacks: list[Stack] = []

    def keep(node: NodeId, view: View) -> Stack:
        stack = build_stack(node, "g", "fifo", view)
        stacks.append(stack)
        return stack

    run_simulation(SimConfig("fifo", nodes=4, messages=400, seed=2, faults=NETWORK_FAULTS),
                   stack_factory=keep)
    channels = [s.layers[-2] for s in stacks]  # the channel, right under the ordering
    assert all(isinstance(c, ReliableChannel) for c in channels)
    left = [c.in_flight() + c.held_above() for c in channels if isinstance(c, ReliableChannel)]
    assert sum(left) == 0
