"""The bench's client/server section (abcast.evaluation.rpc_bench, rpc_report): a tiny
real run (two `abcast serve --echo` processes, one load client) fills every table, and
the report renders every cell, the B/A ratios and the sequencer's share."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from abcast.evaluation.rpc_bench import RpcSpec, run_rpc_bench
from abcast.evaluation.rpc_report import render_rpc, rpc_summary_lines, write_rpc_section

pytestmark = pytest.mark.timeout(120)


def test_a_tiny_run_fills_the_section(tmp_path: Path) -> None:
    spec = RpcSpec(t_request_nodes=(2,), t_request_count=5, consolidation_nodes=(2,),
                   payloads=(10, 1000), consolidation_count=3, saturation_servers=2,
                   clients=1, window=2, seconds=0.5, saturation_paths=("via-sequencer",))
    result = asyncio.run(run_rpc_bench(spec))
    assert {(t.path, t.vote) for t in result.t_request} == {
        (p, v) for p in ("direct", "via-member") for v in ("first", "all")}
    assert all(t.ok == t.requests == 5 for t in result.t_request)
    assert len(result.consolidation) == 3 * 2
    (run,) = result.saturation
    assert run.requests > 0 and run.ok == run.requests
    assert [p.role for p in run.processes] == ["server", "server", "client"]
    assert sum(p.sequencer for p in run.processes) == 1
    assert result.ratio_b_over_a(2) is not None
    assert not result.failed and result.counts[0] == 4 * 5 + 3 * 2 * 3 + run.requests
    page = write_rpc_section(result, tmp_path)
    assert "### T_request" in page and "### Consolidation cost" in page
    assert "the sequencer's share" in page and "B / A (p50), vote first" in page
    assert "—" not in render_rpc(result, []).split("### T_request")[1].split("###")[0]
    lines = rpc_summary_lines(result)
    assert any("Case A" in line and "Case B" in line for line in lines)
    assert lines[0].endswith(" 0 not OK")
