"""The report's models and flags without Spark: each configuration's own model (relay
has one), a negative fitted T_overhead flagged, simulated time labelled virtual."""

from __future__ import annotations

from abcast.ordering.registry import OrderingOptions
from abcast.pipeline.report import (
    ConfigRow,
    Fit,
    Latency,
    Report,
    RunRow,
    Setting,
    fit_latency,
    model_factor,
    model_packets,
    render_markdown,
)
from abcast.trace.rows import options_label


def test_each_setting_has_its_own_model() -> None:
    assert model_packets("sequencer", 5) == 8
    assert model_packets("sequencer", 5, "relay") == 5
    assert model_packets("sequencer", 5, "safe") is None  # a bound, not a figure
    assert model_packets("chandra-toueg", 4, "batch=1") == 12
    assert (model_factor("skeen"), model_factor("sequencer", "relay")) == (3, 1)
    assert model_packets("no-such-ordering", 3) is None


def test_the_options_label_names_only_what_differs_from_the_default() -> None:
    assert options_label(OrderingOptions()) == ""
    assert options_label(OrderingOptions(relay=True, safe=True, batch=4, multicast="basic",
                                         partitions="evs")) == (
        "relay safe batch=4 multicast=basic partitions=evs")


def _run(run_id: str, nodes: int, mean: float, setting: Setting, transport: str = "tcp") -> RunRow:
    return RunRow(run_id, "sequencer", transport, nodes, 64, setting, 10, 100.0,
                  Latency(mean, mean, mean, mean, mean), None, model_packets("sequencer", nodes))


def test_fits_are_per_family_and_a_negative_overhead_is_flagged() -> None:
    plain, relay = Setting("closed", None, ""), Setting("closed", None, "relay")
    runs = [_run("a", 3, 1.0, plain), _run("b", 5, 5.0, plain),  # steep: intercept < 0
            _run("c", 3, 1.0, relay), _run("d", 5, 2.0, relay)]
    fits = fit_latency(runs)
    assert [(f.setting.options, f.points, f.factor) for f in fits] == [("", 2, 2),
                                                                       ("relay", 2, 1)]
    assert [f.negative for f in fits] == [True, False]
    config = ConfigRow("sequencer", "sim", 3, 64, Setting("closed", "crash=n3@1s", ""), 1, 10,
                       None, Latency(None, None, None, None, None), None, 4)
    page = render_markdown(Report("t", 4, tuple(runs), (config,), (), fits), [])
    assert "(negative: no fit)" in page and "A negative T_overhead" in page
    assert "sim (virtual time)" in page and "4 †" in page
    assert not any(isinstance(f, Fit) and f.slope_ms is None for f in fits)
