"""The Spark checker on ordering "optimistic" traces: two clean simulated runs (one with
the sequencer crashing), one whose opt-deliveries come after the final ones (the planted
bug of tests/sim/test_optimistic.py), a sequencer cut off in a minority that stops
(tests/sim/test_optimistic.py's CUT_OFF: the plain sequencer's window without --safe,
whole-trace TOTAL_ORDER units) and the handwritten rejoin of
abcast.testing.builders.rejoined_optimistic, with and without a late opt-delivery in
the second incarnation. Spark reports exactly the
in-memory checker's count per code per run."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from spark_traces import memory_counts, spark_counts

from abcast.effects import Effect
from abcast.ids import MsgId
from abcast.ordering import sequencer_optimistic
from abcast.ordering.registry import OrderingOptions
from abcast.ordering.sequencer_state import OptimisticConfig, OptimisticState
from abcast.sim import SimConfig, run_simulation
from abcast.testing.builders import rejoined_optimistic
from abcast.trace.schema import INTEGRITY_DUPLICATE, LOCAL_ORDER, TOTAL_ORDER
from abcast.trace.writer import write_run

pytestmark = [pytest.mark.spark, pytest.mark.timeout(900)]  # Spark on a loaded machine

FAULTS = "drop=0.05,dup=0.02,delay=1-40ms"
CUT_OFF = "drop=0.03,dup=0.02,delay=1-20ms,partition=n1+n5|n2+n3+n4@300ms-1500ms"


def _write(out: Path, run_id: str, config: SimConfig) -> None:
    result = run_simulation(config)
    rows = [replace(r, run_id=run_id) for r in result.recorder.rows()]
    write_run(out, rows, replace(result.run_info(), run_id=run_id))


@pytest.fixture(scope="module")
def optimistic_traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("optimistic")
    _write(out, "clean", SimConfig("optimistic", nodes=3, messages=60, seed=1, faults=FAULTS))
    _write(out, "crash", SimConfig(
        "optimistic", nodes=5, messages=80, seed=2, faults=f"{FAULTS},crash=n1@300ms",
        options=OrderingOptions(optimistic=OptimisticConfig(alpha=0.5))))
    _write(out, "cut-off", SimConfig("optimistic", nodes=5, messages=60, seed=7,
                                     faults=CUT_OFF))
    for run_id, late in (("rejoin", False), ("rejoin-late", True)):
        b = rejoined_optimistic(run_id, late=late)
        write_run(out, b.rows(), b.run_info(("integrity", "local_order"),
                                            ordering="optimistic"))
    receive = sequencer_optimistic.receive

    def hold_long(opt: OptimisticState, mid: MsgId, payload: bytes, now: int) -> list[Effect]:
        opt.delay[mid.origin] = 30_000.0
        return receive(opt, mid, payload, now)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(sequencer_optimistic, "receive", hold_long)
        patch.setattr(sequencer_optimistic, "scan", lambda opt, effects, now: effects)
        _write(out, "late", SimConfig("optimistic", nodes=5, messages=80, seed=7,
                                      faults=FAULTS))
    return out


def test_spark_agrees_with_memory_on_optimistic_runs(
        spark: object, optimistic_traces: Path) -> None:
    runs, memory = memory_counts(optimistic_traces)
    assert memory["clean"] == {} and memory["crash"] == {}
    assert set(memory["late"]) == {LOCAL_ORDER}
    assert memory["cut-off"] == {TOTAL_ORDER: 6}
    assert memory["rejoin"] == {INTEGRITY_DUPLICATE: 1}
    assert memory["rejoin-late"] == {INTEGRITY_DUPLICATE: 1, LOCAL_ORDER: 1}
    assert spark_counts(spark, optimistic_traces, runs)[0] == memory
