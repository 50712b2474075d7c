"""A live node's trace stream (abcast.trace.stream): flushed on a timer, sealed on close;
a stream its node never closed — killed at any byte — reads as its complete batches and
one crash row right after its last row; the checks then count that node as crashed, so
the survivors' run is clean, and the same rows without the inferred crash are not."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pyarrow as pa
import pytest

from abcast.testing import TraceBuilder, check_events, count_by_code
from abcast.trace import (
    EventRow,
    NodeTraceWriter,
    RunInfo,
    StreamingSink,
    TraceFormatError,
    TraceRecorder,
    add_run,
    read_events,
    read_stream,
    seal,
)
from abcast.trace.stream import POOL_ENV, crash_row_after


def _rows(node: str, count: int, run_id: str = "live") -> list[EventRow]:
    rec = TraceRecorder(run_id)
    for i in range(count):
        rec.record(node, "deliver", 1000 + i, origin="n9", seq=i + 1, group="g")
    return rec.rows()


def _open_stream(tmp_path: Path, rows: list[EventRow], per_batch: int) -> NodeTraceWriter:
    """A writer that flushed `rows` in batches and was then 'killed' (never closed)."""
    w = NodeTraceWriter(tmp_path, "live", rows[0].node, flush_every=per_batch)
    for row in rows:
        w.append(row)
    w.flush()
    return w


def test_a_stream_never_closed_reads_as_its_rows_and_a_crash_row(tmp_path: Path) -> None:
    rows = _rows("n1", 7)
    w = _open_stream(tmp_path, rows, 3)
    got = read_events(tmp_path, "live")
    assert got[:-1] == rows
    assert got[-1] == crash_row_after(rows[-1], 0)
    assert got[-1].kind == "crash" and got[-1].t_ns == rows[-1].t_ns + 1
    w.close()  # the node closes after all: sealed, no crash row
    assert read_events(tmp_path, "live") == rows
    assert [p.name for p in w.directory.iterdir()] == ["n1.parquet"]


@pytest.mark.parametrize("cut", [1, 5, 13, 40, 97])
def test_a_kill_at_any_byte_keeps_every_complete_batch(tmp_path: Path, cut: int) -> None:
    rows = _rows("n1", 9)
    w = _open_stream(tmp_path, rows, 3)
    whole = w.path.read_bytes()
    w.path.write_bytes(whole[: len(whole) - cut])
    got = read_stream(w.path).to_pylist()
    kept = len(got) - 1 if got else 0
    assert kept in (0, 3, 6, 9) and kept <= 9
    assert [r["seq"] for r in got[:kept]] == list(range(1, kept + 1))
    if kept:
        assert got[-1]["kind"] == "crash" and got[-1]["t_ns"] == rows[kept - 1].t_ns + 1


def test_a_stream_killed_before_its_schema_holds_no_rows(tmp_path: Path) -> None:
    w = NodeTraceWriter(tmp_path, "live", "n1")
    w.path.write_bytes(w.path.read_bytes()[:3])
    assert read_stream(w.path).num_rows == 0


@pytest.mark.parametrize("foreign", [b"PAR1", b"not a stream at all", b"\xff\xff\x00"])
def test_a_file_that_is_no_stream_is_refused_not_read_as_empty(tmp_path: Path,
                                                               foreign: bytes) -> None:
    """Only a file that begins as a stream begins (the continuation token, or a piece of
    it) was torn before its schema. Anything else was read as a node without rows: a
    Parquet file under a stream's name dropped its node's violations and the run was
    judged clean (/tmp/checks/garbage_stream.py)."""
    w = NodeTraceWriter(tmp_path, "live", "n1")
    w.path.write_bytes(foreign + w.path.read_bytes())
    with pytest.raises(TraceFormatError, match=r"n1\.arrows: not an Arrow stream"):
        read_stream(w.path)
    with pytest.raises(TraceFormatError, match="not an Arrow stream"):
        read_events(tmp_path, "live")


def test_a_closed_stream_not_yet_sealed_is_finished_and_a_leftover_beside_its_seal_is_skipped(
    tmp_path: Path,
) -> None:
    rows = _rows("n1", 4)
    w = _open_stream(tmp_path, rows, 2)
    w._stream.close()  # the end-of-stream marker is written: killed while sealing
    w._file.close()
    assert [r["kind"] for r in read_stream(w.path).to_pylist()] == ["deliver"] * 4
    copy = w.path.read_bytes()
    seal(w.path)
    w.path.write_bytes(copy)  # a seal killed between its rename and its unlink
    assert read_events(tmp_path, "live") == rows


def test_a_node_whose_trace_ends_without_a_close_counts_as_crashed(tmp_path: Path) -> None:
    """n3 is killed after delivering m1; its later broadcast m2's send row died with it,
    yet n1 and n2 delivered m2: clean, because n3 crashed at its last row."""
    b = TraceBuilder("live")
    m1 = b.send("n1")
    for n in ("n1", "n2", "n3"):
        b.deliver(n, m1[1], m1[2])
    m2 = b.send("n3")
    for n in ("n1", "n2"):
        b.deliver(n, m2[1], m2[2])
    rows = b.rows()
    lost = [r for r in rows if r.node == "n3" and r.kind == "send" and r.seq == 1]
    for node in ("n1", "n2"):
        with NodeTraceWriter(tmp_path, "live", node) as w:
            for row in rows:
                if row.node == node:
                    w.append(row)
    _open_stream(tmp_path, [r for r in rows if r.node == "n3" and r not in lost], 10)
    add_run(tmp_path, RunInfo("live", "sequencer", "tcp", 3, 0, "w", None, None,
                              ("integrity", "validity", "agreement", "total"), 0, 1))
    got = read_events(tmp_path, "live")
    claims = ("integrity", "validity", "agreement", "total")
    assert check_events(got, claims, "live") == []
    # the planted fault: the same rows without the inferred crash are not clean
    without = [r for r in got if r.kind != "crash"]
    assert count_by_code(check_events(without, claims, "live")) == {
        "INTEGRITY_UNKNOWN": 2, "AGREEMENT": 1}
    # and a crash does not excuse a message its origin never could have sent before
    forged = [*got, EventRow("live", "n1", "deliver", "n3", 0, None, 10**9, 99)]
    assert "INTEGRITY_UNKNOWN" in count_by_code(check_events(forged, claims, "live"))


def test_the_streaming_sink_flushes_on_its_timer_not_on_close(tmp_path: Path) -> None:
    sink = StreamingSink(tmp_path, "live", interval_s=0.05)
    rec = TraceRecorder("live", sink=sink, keep_rows=False)
    rows = [rec.record("n1", "send", i, origin="n1", seq=i + 1, group="g") for i in range(5)]
    path = tmp_path / "events" / "live" / "n1.arrows"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # polls a condition: how soon is not asserted
        if path.exists() and read_stream(path).num_rows == 6:
            break
        time.sleep(0.02)
    assert read_events(tmp_path, "live")[:-1] == rows  # on disk before any close
    sink.close()
    assert read_events(tmp_path, "live") == rows
    assert not path.exists()


@pytest.fixture
def arrow_pool() -> Iterator[None]:
    """The test may switch Arrow's default pool: put the one it found back."""
    before = pa.default_memory_pool()
    yield
    pa.set_memory_pool(before)


@pytest.mark.usefixtures("arrow_pool")
@pytest.mark.parametrize("chosen", [None, "mimalloc"])
def test_a_streaming_sink_puts_arrow_on_the_system_pool_unless_the_operator_chose_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, chosen: str | None) -> None:
    """mimalloc (the wheels' default) kept what each flush freed: a soak member's RSS grew."""
    if chosen is None:
        monkeypatch.delenv(POOL_ENV, raising=False)
    else:
        monkeypatch.setenv(POOL_ENV, chosen)
    pa.set_memory_pool(pa.mimalloc_memory_pool())
    StreamingSink(tmp_path, "pool").close()
    assert pa.default_memory_pool().backend_name == (chosen or "system")
