"""Spark reads the events abcast.trace.read_traces reads, and refuses what it refuses.

Spark used to read every Parquet file under `events/` and file each row under the run
its `run_id` column names: a row of run B inside `events/A/` (or in the directory of a
run with no runs row) was checked as B's, and a file below a run's directory was read,
where the in-memory reader refuses the first and the last and never reads the second.
Now a row of another run in a committed run's directory, a file deeper down, or a null
in a required column (of the events or of runs.parquet, where a null `guarantees` made
Spark check nothing) refuses the trace in both, with the reader's words; what the
reader leaves alone (an uncommitted run's directory, a file directly in `events/`),
Spark leaves alone too, and both count the same.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from spark_traces import ALL

from abcast.pipeline.commands import run_check
from abcast.pipeline.io import TraceDirError, check_remote_rows, preflight
from abcast.testing import TraceBuilder, check_traces, count_by_code
from abcast.trace.rows import EventRow, TraceFormatError, events_to_table
from abcast.trace.writer import read_traces, write_run

pytestmark = pytest.mark.spark


def _committed(out: Path) -> None:
    """Runs A and B, each clean: n1 broadcasts twice, n1 and n2 deliver both."""
    for run in ("A", "B"):
        b = TraceBuilder(run)
        ms = [b.send("n1"), b.send("n1")]
        b.deliver_all(["n1", "n2"], ms)
        write_run(out, b.rows(), b.run_info(ALL))


def _stray(run: str, node: str | None = "n9") -> list[EventRow]:
    """A delivery of a message nobody sent: INTEGRITY_UNKNOWN wherever it is counted."""
    return [EventRow(run, node, "deliver", "n1", 7, "g", 99, 1)]  # type: ignore[arg-type]


def _put(out: Path, relative: str, rows: list[EventRow]) -> None:
    path = out / "events" / relative
    path.parent.mkdir(parents=True, exist_ok=True)
    table = events_to_table(rows)
    if any(r.node is None for r in rows):  # a null the schema forbids: write it anyway
        table = table.cast(table.schema.set(1, table.schema.field("node").with_nullable(True)))
    pq.write_table(table, path)


def _unclaimed(out: Path) -> None:
    """runs.parquet with A's guarantees null (Spark took it as claiming nothing), and the
    stray delivery in A that its checks would have found."""
    _put(out, "A/n9.parquet", _stray("A"))
    table = pq.read_table(out / "runs.parquet")
    index = table.schema.get_field_index("guarantees")
    field = table.schema.field(index).with_nullable(True)
    nulls = pa.array([None if r == "A" else g for r, g in zip(
        table.column("run_id").to_pylist(), table.column("guarantees").to_pylist(),
        strict=True)], type=field.type)
    pq.write_table(table.set_column(index, field, nulls), out / "runs.parquet")


Refused = tuple[str, Callable[[Path], None], str]
REFUSED: list[Refused] = [
    ("foreign-row", lambda out: _put(out, "A/n9.parquet", _stray("B")),
     "holds a row of run 'B' inside events/A/"),
    ("nested", lambda out: _put(out, "A/deeper/n9.parquet", _stray("A")),
     "unexpected entry in an event directory"),
    ("null-node", lambda out: _put(out, "A/n9.parquet", _stray("A", None)),
     "column 'node' holds nulls"),
    ("null-guarantees", _unclaimed,
     "runs.parquet: column 'guarantees' holds nulls"),
]


@pytest.mark.parametrize(("name", "plant", "words"), REFUSED, ids=[r[0] for r in REFUSED])
def test_what_the_reader_refuses_spark_refuses(
    spark: object, tmp_path: Path, name: str, plant: Callable[[Path], None], words: str,
) -> None:
    _committed(tmp_path)
    plant(tmp_path)
    with pytest.raises(TraceFormatError, match=re.escape(words)):
        read_traces(tmp_path)
    with pytest.raises(TraceDirError, match=re.escape(words)):
        preflight(str(tmp_path))
    with pytest.raises(TraceDirError, match=re.escape(words)):  # without the preflight
        run_check(spark, str(tmp_path), None)  # type: ignore[arg-type]


def test_a_remote_trace_is_refused_by_a_spark_job(spark: object, tmp_path: Path) -> None:
    """`check_remote_rows`, what read_trace runs for a trace not on the local disk,
    judged on a local one read the same way."""
    _committed(tmp_path)
    _put(tmp_path, "A/n9.parquet", _stray("B"))
    events_uri = str(tmp_path / "events")
    frame = spark.read.option("recursiveFileLookup", "true").parquet(  # type: ignore[attr-defined]
        f"{events_uri}/A", f"{events_uri}/B")
    with pytest.raises(TraceDirError, match=re.escape("n9.parquet: holds a row of run 'B' "
                                                      "inside events/A/")):
        check_remote_rows(frame, events_uri)
    clean = spark.read.parquet(f"{events_uri}/B")  # type: ignore[attr-defined]
    check_remote_rows(clean, events_uri)


LEFT_ALONE: list[tuple[str, Callable[[Path], None]]] = [
    ("uncommitted", lambda out: _put(out, "C/n9.parquet", _stray("A"))),
    ("top-level", lambda out: _put(out, "n9.parquet", _stray("A"))),
]


def test_what_the_reader_leaves_alone_spark_leaves_alone(spark: object, tmp_path: Path) -> None:
    """Every LEFT_ALONE file planted in one trace dir and one Spark check of it (a
    check's cost is its plan, not its rows): any of them read would add its stray
    delivery to A's counts and its row to the rows read."""
    _committed(tmp_path)
    for _name, plant in LEFT_ALONE:
        plant(tmp_path)
    runs, events = read_traces(tmp_path)
    memory = {run: count_by_code(v) for run, v in check_traces(runs, events).items()}
    assert memory == {"A": {}, "B": {}}
    counted = preflight(str(tmp_path))
    outcome = run_check(spark, str(tmp_path), None)  # type: ignore[arg-type]
    assert {r: outcome.verdict.of_run(r) for r in ("A", "B")} == memory
    assert counted == outcome.events == len(events)  # the rows both read, and no more
