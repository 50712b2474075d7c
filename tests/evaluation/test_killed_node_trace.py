"""A member process SIGKILLed under load (a real process, tcp, the runtime's own trace
sink): its trace is the stream it never closed, readable up to the moment it was killed
(every append it had completed well before the kill has its send row on disk), ending in
the crash row the reader infers; the survivors and a joiner end with the same replicated
log, and the whole run checks clean for the ordering's claims and virtual synchrony.
Without the inferred crash row the same trace is not clean: the inference is what
makes it so."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from abcast.evaluation.soak import kill_under_load
from abcast.testing import check_events
from abcast.trace import read_events

pytestmark = pytest.mark.timeout(240)


def test_a_sigkilled_members_trace_survives_and_the_run_checks_clean(tmp_path: Path) -> None:
    run = asyncio.run(kill_under_load(tmp_path, nodes=3))
    result = run.result
    assert result.errors == []
    assert result.states_equal and result.reports[0]["count"] > 0
    assert result.violations == []
    files = sorted(p.name for p in (tmp_path / "events" / "killed").iterdir())
    assert f"{run.victim}.arrows" in files  # never sealed: it was killed
    rows = read_events(tmp_path, "killed")
    mine = [r for r in rows if r.node == run.victim]
    assert mine[-1].kind == "crash" and mine[-1].t_ns == mine[-2].t_ns + 1
    sent = [r.seq for r in mine if r.kind == "send" and r.seq is not None]
    # every append it completed 1.5 s before the kill had its send row on disk
    assert run.appended_before > 0 and max(sent) >= run.appended_before
    assert sorted(sent) == list(range(1, max(sent) + 1))
    assert any(r.kind == "deliver" and r.origin == run.victim and r.node != run.victim
               for r in rows)
    claims = ("integrity", "validity", "agreement", "total")
    without = [r for r in rows if not (r.node == run.victim and r.kind == "crash")]
    assert check_events(without, claims, "killed") != []
