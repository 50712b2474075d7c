"""The RTO estimator alone (RFC 6298): convergence, clamping, backoff and its reset."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abcast.errors import ConfigError, LocalProtocolError
from abcast.reliability.rto import GRANULARITY_US, RtoEstimator


def test_first_sample_sets_srtt_and_half_of_it_as_variance() -> None:
    est = RtoEstimator(initial_us=1_000_000, min_us=1, max_us=10_000_000)
    assert est.rto == 1_000_000 and est.samples == 0
    est.sample(100_000)
    assert (est.srtt, est.rttvar) == (100_000, 50_000)
    assert est.rto == 100_000 + 4 * 50_000


@settings(max_examples=60, deadline=None)
@given(rtt=st.integers(1, 5_000_000))
def test_a_steady_round_trip_gives_a_timeout_just_above_it(rtt: int) -> None:
    est = RtoEstimator(initial_us=1, min_us=1, max_us=10**9)
    for _ in range(80):
        est.sample(rtt)
    assert est.srtt == rtt and est.rttvar == 0
    assert est.rto == rtt + GRANULARITY_US  # the variance term never drops below it


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32), base=st.integers(100, 500_000), spread=st.integers(0, 200_000))
def test_under_jitter_the_timeout_covers_the_round_trips_it_has_seen(
    seed: int, base: int, spread: int
) -> None:
    rng = random.Random(seed)
    est = RtoEstimator(initial_us=1, min_us=1, max_us=10**9)
    samples = [base + rng.randint(0, spread) for _ in range(400)]
    late = 0
    for i, rtt in enumerate(samples):
        if i >= 50 and rtt > est.rto:
            late += 1  # would have been retransmitted needlessly
        est.sample(rtt)
    assert est.srtt is not None and base <= est.srtt <= base + spread
    # RTT + variance: above the mean, and no further above the worst sample than 4 spreads
    assert est.rto <= base + spread + 4 * spread + GRANULARITY_US
    assert late <= len(samples) // 50  # a uniform spread is well inside 4·RTTVAR


def test_the_timeout_is_clamped_to_its_bounds() -> None:
    est = RtoEstimator(initial_us=60_000, min_us=60_000, max_us=1_000_000)
    est.sample(1_000)
    assert est.rto == 60_000  # a loopback round trip sits on the floor
    for _ in range(30):
        est.sample(5_000_000)
    assert est.rto == 1_000_000


def test_backoff_doubles_once_per_level_caps_and_is_reset_by_a_sample() -> None:
    est = RtoEstimator(initial_us=1_000, min_us=1_000, max_us=8_000)
    seen = []
    for doublings in (1, 1, 2, 3, 4, 9, 2):
        est.back_off(doublings)
        seen.append(est.rto)
    assert seen == [2_000, 2_000, 4_000, 8_000, 8_000, 8_000, 8_000]
    est.sample(1_500)
    assert est.backoff == 0 and est.rto == 1_500 + 4 * 750


def test_backoff_survives_a_huge_exponent() -> None:
    est = RtoEstimator(initial_us=1_000, min_us=1_000, max_us=10**12)
    est.back_off(10_000)
    assert est.rto == 10**12


@pytest.mark.parametrize(("initial", "low", "high"), [(0, 0, 1), (5, 10, 20), (30, 10, 20)])
def test_bounds_out_of_order_are_refused(initial: int, low: int, high: int) -> None:
    with pytest.raises(ConfigError):
        RtoEstimator(initial, low, high)


def test_a_negative_round_trip_is_refused() -> None:
    with pytest.raises(LocalProtocolError, match="negative"):
        RtoEstimator(10, 1, 100).sample(-1)
