"""The report page and its plots, rendered from a small fake result set."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from evaluation_fakes import OVERHEAD_US, T_MSG_US, fake_result

from abcast.evaluation.analysis import paired_lone, paired_saturation
from abcast.evaluation.cli import bench_failed, summary_lines
from abcast.evaluation.grid import Phase
from abcast.evaluation.report import render_markdown, write_report
from abcast.evaluation.results import load, save


def _section(page: str, heading: str) -> str:
    start = page.index(heading)
    end = page.find("\n## ", start + 1)
    return page[start:] if end < 0 else page[start:end]


def test_first_section_is_the_thesis_tables_with_the_model_beside_each_cell() -> None:
    page = render_markdown(fake_result())
    first = page.index("\n## ")
    assert page[first:].startswith("\n## Mean TO-broadcast latency (thesis Tables 4–6)")
    tables = _section(page, "## Mean TO-broadcast latency")
    for number, ordering in ((4, "sequencer"), (5, "skeen"), (6, "chandra-toueg")):
        assert f"Table {number} — {ordering}" in tables
    assert "| n | tcp | zmq |" in tables
    # sequencer, zmq, n=6: 2·5·100 µs + 500 µs = 1.5 ms measured, and the model agrees
    expected = (2 * 5 * T_MSG_US["zmq"] + OVERHEAD_US) / 1000
    assert "| 6 | " in tables and f"{expected:.3f} ({expected:.3f})" in tables


def test_knee_is_marked_on_its_row_only() -> None:
    load = _section(render_markdown(fake_result()), "## Throughput vs offered load")
    marked = [line for line in load.splitlines() if "◆" in line and line.startswith("|")]
    assert marked == [line for line in load.splitlines() if "| 4,000 ◆ |" in line]
    assert len(marked) == 1


def test_peers_show_ratios_and_the_skip_reason() -> None:
    peers = _section(render_markdown(fake_result()), "## Peers")
    assert "skipped: redis-server is not installed: apt-get install redis-server" in peers
    ratio_row = next(line for line in peers.splitlines()
                     if line.startswith("| sequencer | pysyncobj-tuned"))
    assert "1.96×" in ratio_row  # 7000·0.98 / 3500
    assert "0.05×" in ratio_row  # 600 µs / 12000 µs


def test_the_lone_message_section_gives_each_event_loop_its_row() -> None:
    page = render_markdown(fake_result())
    lone = _section(page, "## A lone message")
    assert "| sequencer | 3 | 64 | asyncio | 0 | 190 | 600 | 210 |" in lone
    assert "| sequencer | 3 | 64 | uvloop | 0 | 160 | 600 | 210 |" in lone
    assert "| sequencer relay | 3 | 64 | uvloop | 200 | 95 | 400 | 150 |" in lone
    every_run = _section(page, "## Every run")
    assert "serial, uvloop" in every_run
    assert "| sequencer relay | tcp | 3 | 64 | serial, uvloop, busy-poll 200 µs |" in every_run
    summary = "\n".join(summary_lines(fake_result()))
    assert "sequencer n=3: lone message p50 160 µs on uvloop (one in flight)" in summary
    assert ("sequencer relay n=3: lone message p50 95 µs on uvloop, busy-poll 200 µs "
            "(one in flight)") in summary


def test_every_saturation_and_lone_figure_has_its_ratio_to_the_floor() -> None:
    page = render_markdown(fake_result())
    floor = _section(page, "## The floor")
    assert "does nothing else" in floor and "no failure detector" in floor
    assert "| 3 | 68,600 |" in floor  # its saturation: 70,000 · 0.98
    # CPU per message: 0.1 s over 1,000 messages; cores busy: that at 10,000 msg/s
    assert "| 3 | uvloop | 80 | 150 | 100 | 1.00 | ok |" in floor
    load = _section(page, "## Throughput vs offered load")
    # abcast's saturation 6,860 beside the floor's 68,600: 0.1 of it
    assert "| sequencer | tcp | 3 | 4,000 | 6,860 | yes | 68,600 | 0.100 |" in load
    lone = _section(page, "## A lone message")
    # p50 and p99 over the floor's on the same loop (busy polling or not)
    assert "| sequencer | 3 | 64 | asyncio | 0 | 190 | 600 | 210 | 5,000 | 100 | 1.90× | 3.00× |" \
        in lone
    # ...and the CPU per message (250 µs at 5,000 msg/s: 1.25 cores) over the floor's
    assert "| sequencer | 3 | 64 | uvloop | 0 | 160 | 600 | 210 | 5,000 | 80 | 2.00× | 4.00× " \
        "| 250 | 1.25 | 2.50× |" in lone
    assert "| sequencer relay | 3 | 64 | uvloop | 200 | 95 | 400 | 150 | 5,000 | 80 | 1.19× | " \
        "2.67× | — | — | — |" in lone
    summary = "\n".join(summary_lines(fake_result()))
    assert "floor n=3 tcp: saturation 68,600 msg/s" in summary
    assert "sequencer n=3 tcp: saturation 6,860 msg/s, knee at 4,000 offered; 0.100 of the " \
        "floor" in summary
    assert ("sequencer n=3: lone message p50 160 µs on uvloop (one in flight); p50 2.00×, "
            "p99 4.00× the floor's, CPU per message 2.50×") in summary
    assert "floor n=3: lone message p50 80 µs, p99 150 µs on uvloop, 100 µs CPU per " \
        "message" in summary


def test_the_paired_rounds_give_the_median_of_each_rounds_ratio() -> None:
    page = render_markdown(fake_result())
    paired = _section(page, "### Paired with the floor")
    assert "back to back on uvloop, in 3 rounds" in paired
    # round 2 (abcast ran first): 160 over 80, its p99 320 over 160, CPU 250 over 100
    assert "| 2 | 80 | 160 | 2.00× | 2.00× | 2.50× |" in paired
    assert "| median |  |  | 2.50× | 3.00× | 2.50× |" in paired
    assert "left out" not in paired
    summary = "\n".join(summary_lines(fake_result()))
    assert ("sequencer n=3: lone message paired with the floor on uvloop, 3 rounds back to "
            "back: p50 2.50× (per round 2.50, 2.00, 3.00), p99 3.00×, CPU per message 2.50× "
            "the floor's (medians: the figures to quote)") in summary


def test_a_paired_round_with_an_unclean_run_is_left_out_of_the_medians() -> None:
    result = fake_result()
    runs = list(result.runs)
    second = next(i for i, r in enumerate(runs) if r.experiment.phase is Phase.PAIRED
                  and r.experiment.round == 1 and not r.experiment.floor)
    runs[second] = replace(runs[second], complete=False)
    page = render_markdown(replace(result, runs=tuple(runs)))
    paired = _section(page, "### Paired with the floor")
    assert "| median |  |  | 2.75× | 3.50× | 2.50× |" in paired  # rounds 1 and 3 only
    assert "1 round(s) left out" in paired
    assert bench_failed(replace(result, runs=tuple(runs)))  # a lone run that did not finish


def test_the_paired_saturation_rounds_give_the_median_of_each_rounds_ratio() -> None:
    page = render_markdown(fake_result())
    load = _section(page, "## Throughput vs offered load")
    paired = load[load.index("### Saturation paired with the floor"):]
    assert "back to back, in 3 rounds" in paired and "the figure to quote" in paired
    # round 2 (abcast ran first): 50,000 over 100,000; CPU 4 µs a message over 2
    assert "| 2 | 100,000 | 50,000 | 0.500 | 2.00 | 4.00 | 2.00× |" in paired
    assert "| median |  |  | 0.750 |  |  | 1.50× |" in paired
    assert "left out" not in paired
    # each kind of round has its own: the lone message's rounds hold no saturation run
    saturation, lone = paired_saturation(fake_result()), paired_lone(fake_result())
    assert saturation is not None and lone is not None
    assert saturation.throughput_ratios == pytest.approx([0.75, 0.5, 0.8])
    assert all(p.ours.experiment.serial and p.floor.experiment.serial for p in lone.rounds)
    summary = summary_lines(fake_result())
    assert ("sequencer n=3 tcp: saturation paired with the floor, 3 rounds back to back: "
            "0.750 of the floor (per round 0.750, 0.500, 0.800), CPU per message 1.50× the "
            "floor's (medians: the figures to quote)") in "\n".join(summary)
    # the single-run row stays, and says which figure to quote
    single = next(line for line in summary if "knee at" in line)
    assert single.endswith("; 0.100 of the floor (single runs minutes apart: quote the "
                           "paired median)")
    # ...the paired line right below the curve it is the paired figure of
    assert summary.index(single) < next(
        i for i, line in enumerate(summary) if "saturation paired" in line)


def test_a_paired_saturation_round_with_an_unclean_run_is_left_out_of_the_medians() -> None:
    result = fake_result()
    runs = list(result.runs)
    second = next(i for i, r in enumerate(runs) if r.experiment.phase is Phase.PAIRED
                  and r.experiment.rate is not None and r.experiment.round == 1
                  and r.experiment.floor)
    runs[second] = replace(runs[second], complete=False)
    fallen = replace(result, runs=tuple(runs))
    page = render_markdown(fallen)
    paired = _section(page, "## Throughput vs offered load")
    assert "| median |  |  | 0.775 |  |  | 1.40× |" in paired  # rounds 1 and 3 only
    assert "1 round(s) left out" in paired
    assert ("saturation paired with the floor, 2 rounds back to back, 1 left out (a run "
            "incomplete or in violation): 0.775 of the floor (per round 0.750, 0.800)"
            ) in "\n".join(summary_lines(fallen))
    # the lone message's rounds are their own: all three still count
    assert "| median |  |  | 2.50× | 3.00× | 2.50× |" in _section(
        page, "### Paired with the floor")
    # offered far past saturation, a run that falls over is a finding, as on a load curve
    assert not bench_failed(fallen)


def test_a_report_without_the_floor_leaves_its_columns_empty() -> None:
    result = fake_result()
    without = replace(result, runs=tuple(r for r in result.runs
                                         if r.experiment.phase is not Phase.FLOOR))
    page = render_markdown(without)
    assert "## The floor" not in page
    load = _section(page, "## Throughput vs offered load")
    assert "| sequencer | tcp | 3 | 4,000 | 6,860 | yes | — | — |" in load


def test_verification_row_pairs_the_untraced_and_traced_runs() -> None:
    verify = _section(render_markdown(fake_result()), "## Tracing on")
    assert "| sequencer | 3 | 4,000 | 3,920 | 3,900 | clean (Spark) |" in verify


def test_write_report_draws_the_plots_it_links(tmp_path: Path) -> None:
    page = write_report(fake_result(), tmp_path)
    text = page.read_text()
    linked = [line.split("](")[1].rstrip(")") for line in text.splitlines()
              if line.startswith("![")]
    assert len(linked) == 3
    for name in linked:
        assert (tmp_path / name).stat().st_size > 1000


def test_results_round_trip_through_bench_json(tmp_path: Path) -> None:
    result = fake_result()
    save(result, tmp_path / "bench.json")
    assert load(tmp_path / "bench.json") == result
    assert render_markdown(load(tmp_path / "bench.json")) == render_markdown(result)


def test_exit_status_fails_on_violations_and_unfinished_runs_but_not_on_overload() -> None:
    result = fake_result()
    assert not bench_failed(result)
    runs = list(result.runs)
    load_index = next(i for i, r in enumerate(runs) if r.experiment.phase is Phase.LOAD)
    runs[load_index] = replace(runs[load_index], complete=False)  # fell over past the knee
    floor_load = next(i for i, r in enumerate(runs)
                      if r.experiment.phase is Phase.FLOOR and r.experiment.rate is not None)
    runs[floor_load] = replace(runs[floor_load], complete=False)  # the floor's too
    assert not bench_failed(replace(result, runs=tuple(runs)))
    floor_lone = next(i for i, r in enumerate(runs)
                      if r.experiment.phase is Phase.FLOOR and r.experiment.serial)
    lost_floor = list(runs)
    lost_floor[floor_lone] = replace(runs[floor_lone], complete=False)
    assert bench_failed(replace(result, runs=tuple(lost_floor)))
    table_index = next(i for i, r in enumerate(runs) if r.experiment.phase is Phase.TABLE)
    unfinished = list(runs)
    unfinished[table_index] = replace(runs[table_index], complete=False)
    assert bench_failed(replace(result, runs=tuple(unfinished)))
    violating = list(runs)
    violating[load_index] = replace(runs[load_index], violations={"TOTAL_ORDER": 1})
    assert bench_failed(replace(result, runs=tuple(violating)))
    spark_found = list(runs)
    spark_found[table_index] = replace(runs[table_index], spark_violations={"AGREEMENT": 2})
    assert bench_failed(replace(result, runs=tuple(spark_found)))
    assert bench_failed(replace(result, spark_error="Java is missing"))


def test_pings_over_sizes_make_table_3_and_only_the_table_payload_is_t_msg(
        tmp_path: Path) -> None:
    from abcast.evaluation.results import PingMeasurement

    base = fake_result()
    bigger = tuple(PingMeasurement(p.transport, 100, 50 * (p.rtt_p50_us or 0), None,
                                   size=65536) for p in base.pings)
    tiny = tuple(PingMeasurement(p.transport, 100, 1.0, None, size=5) for p in base.pings)
    result = replace(base, pings=(*tiny, *base.pings, *bigger))
    assert result.t_msg_us() == base.t_msg_us() == T_MSG_US
    page = render_markdown(result)
    model = _section(page, "## Measured vs model")
    assert "(the thesis's Table 3)" in model and "| middleware | 5 B | 100 B | 65,536 B |" in model
    assert "| T_overhead µs | free fit µs | smallest n µs |" in model
    assert f"| tcp | 1.0 | {2 * T_MSG_US['tcp']:.1f} | {100 * T_MSG_US['tcp']:,.1f} |" in model
    write_report(result, tmp_path)
    assert (tmp_path / "ping_vs_size.png").exists()
    assert load_roundtrip(result, tmp_path) == result


def load_roundtrip(result: object, tmp_path: Path) -> object:
    save(result, tmp_path / "bench.json")  # type: ignore[arg-type]
    return load(tmp_path / "bench.json")
