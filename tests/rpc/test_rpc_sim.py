"""Requests and replies in the simulator (abcast.rpc.sim), for every ordering that claims
total order: 3 servers and 2 clients, Case A and Case B interleaved, and — for the
orderings that survive crashes — a server (the sequencer/coordinator n1, or another)
crashed at a seeded moment mid-run. Every `majority` request ends OK, no server executes
a request twice, the live servers' logs are equal and the trace passes the ordering's
checks. A planted server that answers differently makes `all_same` INCONSISTENT; a
`quorum(3)` with a server gone ends MEMBERS_LOST or NO_QUORUM; a planted executor that
does not deduplicate is caught by the same checks."""

from __future__ import annotations

import random

import pytest

from abcast.ordering.registry import ORDERINGS
from abcast.rpc.executor import Action, Executor
from abcast.rpc.sim import RpcRun, simulate_rpc
from abcast.rpc.voting import Status
from abcast.rpc.wire import Request

TOTAL = sorted(name for name, spec in ORDERINGS.items() if "total" in spec.guarantees)
CRASH_TOLERANT = [name for name in TOTAL if "crash" in ORDERINGS[name].tolerates]


def assert_sound(run: RpcRun) -> None:
    assert run.violations == []
    for node, executed in run.executed.items():
        assert len(executed) == len(set(executed)), f"{node} executed a request twice"
    assert len(set(run.digests.values())) == 1, f"servers diverged: {run.digests}"


@pytest.mark.parametrize("ordering", TOTAL)
@pytest.mark.parametrize("seed", range(4))
def test_majority_requests_with_a_crash(ordering: str, seed: int) -> None:
    rng = random.Random(seed)
    crash = None
    if ordering in CRASH_TOLERANT:
        crash = {rng.choice(["n1", "n1", "n2", "n3"]): rng.randint(2_000, 40_000)}
    run = simulate_rpc(ordering=ordering, seed=seed, requests=30, crash=crash)
    assert run.statuses == {Status.OK: 60}
    assert_sound(run)
    if crash:
        assert set(run.digests) == {"n1", "n2", "n3"} - set(crash)


@pytest.mark.parametrize("ordering", TOTAL)
def test_a_divergent_server_makes_all_same_inconsistent(ordering: str) -> None:
    run = simulate_rpc(ordering=ordering, seed=7, requests=5, vote="all",
                       consistency="all_same", diverge="n2")
    assert run.statuses == {Status.INCONSISTENT: 10}
    assert_sound(run)  # the divergence is in the replies only


@pytest.mark.parametrize("ordering", CRASH_TOLERANT)
def test_quorum_of_three_with_one_dead(ordering: str) -> None:
    run = simulate_rpc(ordering=ordering, seed=3, requests=4, vote="quorum(3)",
                       consistency="any", crash={"n3": 0}, timeout_us=5_000_000)
    assert set(run.statuses) <= {Status.MEMBERS_LOST, Status.NO_QUORUM}
    assert all(latency <= 5_000_000 for _, _, latency in run.outcomes)
    assert Status.MEMBERS_LOST in run.statuses  # once the view without n3 is known


class ExecutesEveryCopy(Executor):
    """Planted bug: no duplicate table (every ordered copy runs)."""

    def on_ordered(self, request: Request) -> Action:
        super().on_ordered(request)
        return Action.EXECUTE


def test_the_checks_catch_an_executor_without_dedup() -> None:
    # retries sooner than a request is ordered: copies through several contacts
    run = simulate_rpc(ordering="sequencer", seed=1, requests=6, path="via-member",
                       retry_us=500, executor=ExecutesEveryCopy)
    with pytest.raises(AssertionError, match="executed a request twice"):
        assert_sound(run)


@pytest.mark.parametrize("ordering", TOTAL)
def test_early_retries_still_execute_once(ordering: str) -> None:
    # every request is retried (through the next contact, or to the servers not heard
    # from) before it can be ordered: several copies reach the order, one runs
    run = simulate_rpc(ordering=ordering, seed=5, requests=10, retry_us=500)
    assert run.statuses == {Status.OK: 20}
    assert_sound(run)
