"""The soak for one minute (bench/soak.py runs it for ten): five member processes over tcp
under steady load, a SIGKILL, a graceful leave and a member cut off for 3 s (SIGSTOP,
then SIGCONT) every 20 s, a joiner after each departure; at the end the live members hold
the same replicated log, the whole trace (the killed members' unsealed streams included)
checks clean, and every process was sampled every second. Outside the default run: marked
slow and heavy (ABCAST_HEAVY=1 ./run tests -m heavy); the growth trend itself is judged
by the 10-minute bench."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from abcast.evaluation.soak import SoakConfig, run_soak

pytestmark = [pytest.mark.slow, pytest.mark.heavy, pytest.mark.timeout(600)]


def test_a_minute_of_churn_under_load_ends_clean_and_equal(tmp_path: Path) -> None:
    config = SoakConfig(out=tmp_path, minutes=1.0, nodes=5, kill_every_s=20.0,
                        churn_every_s=20.0, warmup_s=20.0, pause_every_s=20.0)
    result = asyncio.run(run_soak(config))
    assert result.errors == []
    assert result.violations == []
    assert result.states_equal and result.reports[0]["count"] > 0
    kills = [what for _, what in result.events if "SIGKILL" in what]
    leaves = [what for _, what in result.events if " left" in what]
    assert len(kills) >= 2 and len(leaves) >= 1
    assert any(" paused" in what for _, what in result.events)
    assert any(" back in" in what or " removed" in what for _, what in result.events)
    killed = {what.split()[0] for what in kills}
    streams = {p.stem for p in (tmp_path / "events" / "soak").glob("*.arrows")}
    assert killed == streams  # exactly the killed members left unsealed streams
    labels = {s.label for s in result.samples}
    assert "registry" in labels and len(labels) >= 5 + len(kills) + len(leaves)
    assert {t.label for t in result.trends} >= {"registry"} and len(result.trends) == 3
    assert all(result.deliveries.get(r["node"], 0) > 0 for r in result.reports)
