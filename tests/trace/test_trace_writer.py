"""Trace files: recorder → write_run → read_traces gives the same rows; re-writing a run
replaces it; runs share an out dir (also from parallel processes); a streaming writer
seals its node's stream into one file; broken directories raise TraceFormatError naming the
problem."""

from __future__ import annotations

import multiprocessing
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from abcast.errors import ConfigError, LocalProtocolError
from abcast.testing import TraceBuilder
from abcast.trace import (
    EVENT_SCHEMA,
    RUN_SCHEMA,
    EventRow,
    NodeTraceWriter,
    RunInfo,
    TraceFormatError,
    TraceRecorder,
    add_run,
    clear_run,
    read_events,
    read_traces,
    write_run,
)


def sample_run(run_id: str = "run-a", nodes: tuple[str, ...] = ("n1", "n2", "n10"),
               ) -> TraceBuilder:
    """Every kind of row and every nullable column, set and unset."""
    b = TraceBuilder(run_id)
    for n in nodes:
        b.view(n, 1, nodes)
    b.send(nodes[0], deps={})
    b.send(nodes[1], deps={nodes[0]: 1, "n99": 0})
    b.send(nodes[0])
    for n in nodes:
        b.opt_deliver(n, nodes[0], 1)
        b.deliver(n, nodes[0], 1)
        b.deliver(n, nodes[1], 1)
    b.recorder.record(nodes[0], "net_send", 1, peer=nodes[1], size=64, group="g")
    b.recorder.record(nodes[1], "net_recv", 1, peer=nodes[0], size=64, group="g")
    b.crash(nodes[-1])
    b.recover(nodes[-1])
    return b


def test_round_trip_gives_back_the_same_rows_and_run(tmp_path: Path) -> None:
    b = sample_run()
    run = b.run_info(["total", "integrity"], ordering="sequencer")
    write_run(tmp_path, b.recorder, run)
    runs, events = read_traces(tmp_path)
    assert runs == [run]
    assert events == b.rows()
    assert sorted(p.name for p in (tmp_path / "events" / "run-a").iterdir()) == [
        "n1.parquet", "n10.parquet", "n2.parquet"]


def test_files_hold_exactly_the_schema(tmp_path: Path) -> None:
    b = sample_run()
    write_run(tmp_path, b.recorder, b.run_info(["total"]))
    event_file = tmp_path / "events" / "run-a" / "n1.parquet"
    assert pq.read_schema(event_file).equals(EVENT_SCHEMA)
    assert pq.read_schema(tmp_path / "runs.parquet").equals(RUN_SCHEMA)
    meta = pq.ParquetFile(event_file).metadata
    assert meta.row_group(0).column(0).compression.lower() == "zstd"
    table = pq.read_table(event_file)
    assert set(table.column("node").to_pylist()) == {"n1"}


def test_rewriting_a_run_id_replaces_its_events_and_runs_row(tmp_path: Path) -> None:
    first = sample_run()
    write_run(tmp_path, first.recorder, first.run_info(["total"]))
    again = TraceBuilder("run-a")
    again.send("n1")
    again.deliver("n1", "n1", 1)
    write_run(tmp_path, again.recorder, again.run_info(["fifo"], ordering="fifo"))
    runs, events = read_traces(tmp_path)
    assert [(r.run_id, r.ordering, r.guarantees) for r in runs] == [
        ("run-a", "fifo", ("fifo",))]
    assert events == again.rows()
    assert [p.name for p in (tmp_path / "events" / "run-a").iterdir()] == ["n1.parquet"]
    assert not [p for p in (tmp_path / "events").iterdir() if p.name.startswith(".")]


def test_two_runs_coexist_and_runs_stay_sorted(tmp_path: Path) -> None:
    b = sample_run("run-b", ("n1", "n2"))
    a = sample_run("run-a", ("n3", "n4"))
    write_run(tmp_path, b.recorder, b.run_info(["fifo"]))
    write_run(tmp_path, a.recorder, a.run_info(["causal"]))
    runs, events = read_traces(tmp_path)
    assert [r.run_id for r in runs] == ["run-a", "run-b"]
    assert events == a.rows() + b.rows()
    assert read_events(tmp_path, "run-b") == b.rows()


def test_plain_row_lists_can_be_written_and_must_match_the_run(tmp_path: Path) -> None:
    b = sample_run()
    write_run(tmp_path, list(reversed(b.rows())), b.run_info([]))
    assert read_traces(tmp_path)[1] == b.rows()  # read back in node, t_ns order
    other = sample_run("run-x")
    with pytest.raises(LocalProtocolError, match="run-x"):
        write_run(tmp_path, other.rows(), b.run_info([]))
    with pytest.raises(LocalProtocolError, match="recorder of run"):
        write_run(tmp_path, other.recorder, b.run_info([]))


def test_bad_names_and_guarantees_are_refused(tmp_path: Path) -> None:
    b = sample_run()
    with pytest.raises(LocalProtocolError, match="unknown guarantees"):
        write_run(tmp_path, b.recorder, b.run_info(["total", "linearizable"]))
    bad = TraceBuilder("../escape")
    with pytest.raises(LocalProtocolError, match="run_id"):
        write_run(tmp_path, bad.recorder, bad.run_info([]))
    with pytest.raises(LocalProtocolError, match="node"):
        NodeTraceWriter(tmp_path, "r", ".hidden")
    assert not (tmp_path / "runs.parquet").exists()


def test_streaming_writer_writes_a_batch_per_flush_and_seals_one_file(tmp_path: Path) -> None:
    writers = {n: NodeTraceWriter(tmp_path, "live", n, flush_every=3) for n in ("n1", "n2")}
    rec = TraceRecorder("live", sink=lambda row: writers[row.node].append(row),
                        keep_rows=False)
    expected = []
    for i in range(10):
        expected.append(rec.record("n1", "deliver", i, origin="n2", seq=i + 1, group="g"))
    expected.append(rec.record("n2", "crash", 3))
    for w in writers.values():
        w.close()
    assert writers["n1"].batches_written == 4  # 3 + 3 + 3 + 1
    assert sorted(p.name for p in (tmp_path / "events" / "live").iterdir()) == [
        "n1.parquet", "n2.parquet"]  # sealed: the streams are gone
    run = RunInfo("live", "skeen", "tcp", 2, 16, "closed-loop", None, None, ("total",), 0, 9)
    add_run(tmp_path, run)
    runs, events = read_traces(tmp_path)
    assert runs == [run]
    assert events == expected
    with pytest.raises(LocalProtocolError, match="closed"):
        writers["n1"].append(expected[0])
    with pytest.raises(LocalProtocolError, match="streamed"):
        write_run(tmp_path, rec, run)


def crash_row(node: str, index: int, run_id: str = "live") -> EventRow:
    return EventRow(run_id, node, "crash", None, None, None, index, index)


def test_reopening_a_streaming_writer_drops_that_nodes_stale_files(tmp_path: Path) -> None:
    with NodeTraceWriter(tmp_path, "live", "n1", flush_every=1) as w:
        for i in (1, 2, 3):
            w.append(crash_row("n1", i))
    with NodeTraceWriter(tmp_path, "live", "n10", flush_every=1) as w:
        w.append(crash_row("n10", 1))
    # a re-run of n1 removes n1.parquet and n1-<k>.parquet, never n10's files
    with NodeTraceWriter(tmp_path, "live", "n1") as w:
        w.append(crash_row("n1", 1))
    add_run(tmp_path, RunInfo("live", "x", "y", 1, 0, "w", None, None, (), 0, 0))
    _, events = read_traces(tmp_path)
    assert events == [crash_row("n1", 1), crash_row("n10", 1)]
    with pytest.raises(LocalProtocolError, match="writer of"):
        NodeTraceWriter(tmp_path, "live", "n2").append(crash_row("n1", 5))
    clear_run(tmp_path, "live")
    assert read_traces(tmp_path) == ([], [])
    assert not (tmp_path / "events" / "live").exists()


def _write_one(out: str, run_id: str) -> None:
    b = sample_run(run_id)
    write_run(out, b.recorder, b.run_info(["total"]))


def test_parallel_processes_share_an_out_dir(tmp_path: Path) -> None:
    run_ids = [f"par-{i}" for i in range(6)] + ["par-0", "par-3"]  # two rewrites
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(max_workers=2, mp_context=ctx) as pool:
        list(pool.map(_write_one, [str(tmp_path)] * len(run_ids), run_ids))
    runs, events = read_traces(tmp_path)
    assert [r.run_id for r in runs] == [f"par-{i}" for i in range(6)]
    assert len(events) == 6 * len(sample_run().rows())


# ---------------------------------------------------------------- broken directories


def written(tmp_path: Path) -> Path:
    b = sample_run()
    write_run(tmp_path, b.recorder, b.run_info(["total"]))
    return tmp_path / "events" / "run-a"


def test_missing_or_empty_directory(tmp_path: Path) -> None:
    with pytest.raises(TraceFormatError, match="does not exist"):
        read_traces(tmp_path / "nowhere")
    with pytest.raises(TraceFormatError, match=r"runs\.parquet is missing"):
        read_traces(tmp_path)
    assert issubclass(TraceFormatError, ConfigError)


def test_missing_column_is_named(tmp_path: Path) -> None:
    events_dir = written(tmp_path)
    table = pq.read_table(events_dir / "n2.parquet").drop_columns(["deps"])
    pq.write_table(table, events_dir / "n2.parquet")
    with pytest.raises(TraceFormatError, match=r"n2\.parquet: missing column 'deps'"):
        read_traces(tmp_path)


def test_runs_file_missing_column_is_named(tmp_path: Path) -> None:
    written(tmp_path)
    table = pq.read_table(tmp_path / "runs.parquet").drop_columns(["guarantees"])
    pq.write_table(table, tmp_path / "runs.parquet")
    with pytest.raises(TraceFormatError, match="missing column 'guarantees'"):
        read_traces(tmp_path)


def test_non_parquet_files_are_named(tmp_path: Path) -> None:
    events_dir = written(tmp_path)
    (events_dir / "notes.txt").write_text("hello")
    with pytest.raises(TraceFormatError, match=r"notes\.txt: unexpected entry"):
        read_traces(tmp_path)
    (events_dir / "notes.txt").unlink()
    (events_dir / "n2.parquet").write_bytes(b"not parquet at all")
    with pytest.raises(TraceFormatError, match=r"n2\.parquet: not a readable Parquet"):
        read_traces(tmp_path)


def test_wrong_types_nulls_and_missing_event_dirs_are_named(tmp_path: Path) -> None:
    events_dir = written(tmp_path)
    table = pq.read_table(events_dir / "n1.parquet")
    seq_as_text = table.set_column(
        table.schema.get_field_index("seq"), "seq",
        pa.array(["x"] * table.num_rows, pa.string()))
    pq.write_table(seq_as_text, events_dir / "n1.parquet")
    with pytest.raises(TraceFormatError, match="column 'seq' has type string"):
        read_traces(tmp_path)
    null_nodes = table.set_column(
        table.schema.get_field_index("node"), "node", pa.nulls(table.num_rows, pa.string()))
    pq.write_table(null_nodes, events_dir / "n1.parquet")
    with pytest.raises(TraceFormatError, match="column 'node' holds nulls"):
        read_traces(tmp_path)
    for p in events_dir.iterdir():
        p.unlink()
    events_dir.rmdir()
    with pytest.raises(TraceFormatError, match=r"run-a.*no event directory"):
        read_traces(tmp_path)


def test_narrower_integer_columns_are_accepted(tmp_path: Path) -> None:
    events_dir = written(tmp_path)
    table = pq.read_table(events_dir / "n1.parquet")
    narrowed = table.set_column(table.schema.get_field_index("seq"), "seq",
                                table.column("seq").cast(pa.int32()))
    pq.write_table(narrowed, events_dir / "n1.parquet")
    _, events = read_traces(tmp_path)
    assert events == sample_run().rows()


def test_a_runs_file_written_before_the_options_column_still_reads(tmp_path: Path) -> None:
    """`options` came later: an older runs.parquet without it reads as null, and the
    Spark pipeline's preflight accepts it."""
    from abcast.pipeline.io import preflight
    from abcast.trace.rows import runs_to_table
    from abcast.trace.writer import read_runs

    run = RunInfo("old", "fifo", "sim", 2, 16, "closed-loop", 1, None, ("fifo",), 0, 9,
                  options="relay")
    write_run(tmp_path, [EventRow("old", "n1", "send", "n1", 1, "g", 1, 0)], run)
    table = runs_to_table([run]).drop_columns(["options"])
    pq.write_table(table, tmp_path / "runs.parquet")
    assert [r.options for r in read_runs(tmp_path)] == [None]
    assert preflight(str(tmp_path)) == 1
