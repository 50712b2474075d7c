"""The model column, the knee of a load curve, and the abcast/peer ratios."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from evaluation_fakes import (
    CAPACITY,
    OVERHEAD_US,
    RATES,
    T_MSG_US,
    exact_model_runs,
    fake_result,
    table_run,
)

from abcast.evaluation.analysis import (
    LoadPoint,
    find_knee,
    least_squares_slope,
    load_curves,
    model_cells,
    network_time_us,
    peer_ratios,
    slope_checks,
)
from abcast.evaluation.grid import Phase


def test_network_time_is_s_times_n_minus_1_times_t_msg() -> None:
    assert network_time_us("sequencer", 4, 10.0) == 2 * 3 * 10.0
    assert network_time_us("skeen", 4, 10.0) == 3 * 3 * 10.0
    assert network_time_us("chandra-toueg", 4, 10.0) == 4 * 3 * 10.0
    assert network_time_us("fifo", 4, 10.0) is None  # not in the model
    assert network_time_us("sequencer", 4, None) is None  # no ping for that middleware


def test_model_column_recovers_a_planted_overhead_exactly() -> None:
    cells = model_cells(exact_model_runs(), T_MSG_US)
    assert len(cells) == 3 * 2 * 3
    for c in cells:
        assert c.overhead_us == pytest.approx(OVERHEAD_US)
        assert c.predicted_us == pytest.approx(c.measured_us)
        assert c.fitted_points == 3 and not c.exact_by_fit
    for check in slope_checks(cells, T_MSG_US):
        assert check.measured_slope_us == pytest.approx(check.model_slope_us)
        # the two further estimates find the same overhead when the model holds
        assert check.free_fit_overhead_us == pytest.approx(OVERHEAD_US)
        assert check.smallest_n_overhead_us == pytest.approx(OVERHEAD_US)


def test_model_column_shows_where_measurements_leave_the_model() -> None:
    # latency that grows twice as fast as the model says: the prediction misses at the ends
    runs = [table_run("sequencer", "tcp", n, 2 * 2 * (n - 1) * 30.0) for n in (2, 4, 6)]
    cells = model_cells(runs, {"tcp": 30.0})
    first, last = cells[0], cells[-1]
    assert first.predicted_us is not None and last.predicted_us is not None
    assert first.measured_us is not None and last.measured_us is not None
    assert first.predicted_us > first.measured_us and last.predicted_us < last.measured_us
    check = slope_checks(cells, {"tcp": 30.0})[0]
    assert check.measured_slope_us == pytest.approx(2 * check.model_slope_us)  # type: ignore[operator]
    # T = 120·(n−1): the free line goes through 0; at n = 2, 120 − 60 µs is left over
    assert check.free_fit_overhead_us == pytest.approx(0.0, abs=1e-6)
    assert check.smallest_n_overhead_us == pytest.approx(60.0)


def test_failed_or_violating_cells_are_not_measured() -> None:
    runs = [table_run("skeen", "tcp", 2, 100.0),
            table_run("skeen", "tcp", 4, 200.0, violations={"TOTAL_ORDER": 3})]
    cells = {c.nodes: c for c in model_cells(runs, {"tcp": 10.0})}
    assert cells[4].measured_us is None
    assert cells[2].exact_by_fit  # the only clean cell carries the whole fit


def test_least_squares_needs_two_distinct_x() -> None:
    assert least_squares_slope([(1.0, 5.0), (1.0, 7.0)]) is None
    assert least_squares_slope([(1.0, 1.0), (3.0, 5.0)]) == pytest.approx(2.0)


@pytest.mark.parametrize("seed", range(20))
def test_planted_knee_is_found_on_a_noisy_curve(seed: int) -> None:
    rng = random.Random(seed)
    rates = [1000.0 * 2 ** k for k in range(8)]  # 1k … 128k
    planted = rng.randrange(1, 7)
    # capacity well inside (rates[planted], rates[planted + 1]): the rate above it is
    # delivered at < 90 % whatever the noise, the planted rate at ≥ 95 %
    capacity = rates[planted] * rng.uniform(1.15, 1.7)
    points = [LoadPoint(r, min(r, capacity) * rng.uniform(0.95, 1.0)) for r in rates]
    knee = find_knee(reversed(points))  # order of arrival does not matter
    assert knee.saturated
    assert knee.offered == rates[planted]
    assert knee.saturation is not None
    assert capacity * 0.95 <= knee.saturation <= capacity


def test_curve_that_never_saturates_has_its_knee_beyond_the_range() -> None:
    knee = find_knee([LoadPoint(r, r) for r in RATES])
    assert not knee.saturated and knee.offered == RATES[-1]


def test_curve_saturated_from_the_first_point_has_no_tracking_rate() -> None:
    knee = find_knee([LoadPoint(r, 500.0) for r in RATES])
    assert knee.saturated and knee.offered is None and knee.saturation == 500.0


def test_a_failed_run_ends_the_tracking_part_of_the_curve() -> None:
    knee = find_knee([LoadPoint(1000, 1000), LoadPoint(2000, None), LoadPoint(4000, 4000)])
    assert knee.offered == 1000 and knee.saturated


def test_load_curves_find_the_fake_capacity() -> None:
    (curve,) = load_curves(fake_result().runs)
    assert curve.knee.offered == 4000.0  # 8000 offered > CAPACITY = 7000
    assert curve.knee.saturation == pytest.approx(CAPACITY * 0.98)


def test_peer_ratios_compare_saturation_and_p50_with_peers_that_ran() -> None:
    (ratio,) = peer_ratios(fake_result())  # redis was skipped
    assert ratio.peer == "pysyncobj-tuned" and ratio.ordering == "sequencer"
    assert ratio.throughput_ratio == pytest.approx(CAPACITY * 0.98 / 3500.0)
    assert ratio.p50_ratio == pytest.approx(600.0 / 12000.0)


def test_one_load_curve_per_middleware_and_peers_compare_the_baselines_own() -> None:
    base = fake_result()
    zmq = [replace(r, experiment=replace(r.experiment, transport="zmq"),
                   figures=replace(r.figures, throughput=(r.figures.throughput or 0) * 10))
           for r in base.runs if r.experiment.phase is Phase.LOAD]
    result = replace(base, runs=(*base.runs, *zmq))
    curves = load_curves(result.runs)
    assert [(c.ordering, c.transport) for c in curves] == [("sequencer", "tcp"),
                                                           ("sequencer", "zmq")]
    (ratio,) = peer_ratios(result)  # the baseline ran on tcp: zmq's curve is not its
    assert ratio.throughput_ratio == pytest.approx(CAPACITY * 0.98 / 3500.0)
