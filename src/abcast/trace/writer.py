"""Trace files on disk (docs/design.md §6): writing a run, committing a streamed one,
reading back.

Layout under one out dir, shared by any number of runs:

    <out>/runs.parquet                      one row per run (RUN_SCHEMA)
    <out>/events/<run_id>/<node>.parquet    a node's rows (EVENT_SCHEMA); older streaming
    <out>/events/<run_id>/<node>-<k>.parquet   writers split a node over several files
    <out>/events/<run_id>/<node>.arrows     a live node's stream (abcast.trace.stream), left
                                            there unsealed when the node was killed

Rules: the runs row is the commit point of a run. Event files are written first (each
atomically: a hidden temp file renamed into place), the runs row last, so a reader that
trusts runs.parquet never sees half a run; event directories with no runs row are left
alone by `read_traces`. Writing a run_id again replaces that run's event directory and
its runs row, so a deterministic re-run overwrites itself. The read-modify-write of
runs.parquet (and the swap of a run's event directory) happens under an fcntl lock on
`<out>/.runs.lock`, so parallel processes may share an out dir. Names starting with "." or
"_" are never data (Spark skips them too). This module knows the format, not what the rows
mean.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

from abcast.errors import LocalProtocolError
from abcast.ids import node_sort_key
from abcast.trace._files import (
    COMPRESSION,
    EVENTS_DIR,
    check_name,
    is_data,
    write_table_atomically,
)
from abcast.trace.recorder import TraceRecorder
from abcast.trace.rows import (
    EventRow,
    RunInfo,
    TraceFormatError,
    events_to_table,
    runs_to_table,
    table_to_events,
    table_to_runs,
)
from abcast.trace.schema import GUARANTEES
from abcast.trace.stream import STREAM_SUFFIX, read_stream

__all__ = [
    "COMPRESSION", "EVENTS_DIR", "LOCK_FILE", "RUNS_FILE", "add_run", "clear_run",
    "event_files", "parquet_table", "read_events", "read_runs", "read_traces", "write_run",
]

RUNS_FILE = "runs.parquet"
LOCK_FILE = ".runs.lock"


def _check_run(run: RunInfo) -> None:
    check_name("run_id", run.run_id)
    unknown = [g for g in run.guarantees if g not in GUARANTEES]
    if unknown:
        raise LocalProtocolError(f"run {run.run_id!r}: unknown guarantees {unknown}; "
                                 f"expected names from {GUARANTEES}")


@contextlib.contextmanager
def _out_dir_lock(out_dir: Path) -> Iterator[None]:
    out_dir.mkdir(parents=True, exist_ok=True)
    with open(out_dir / LOCK_FILE, "a+b") as handle:
        fcntl.flock(handle.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def _upsert_run_row(out_dir: Path, run: RunInfo) -> None:
    """Replace-or-add the run's row; caller holds the lock."""
    runs_path = out_dir / RUNS_FILE
    runs = read_runs(out_dir) if runs_path.exists() else []
    kept = [r for r in runs if r.run_id != run.run_id]
    kept.append(run)
    kept.sort(key=lambda r: r.run_id)
    write_table_atomically(runs_to_table(kept), runs_path)


# ---------------------------------------------------------------- whole runs


def write_run(
    out_dir: str | os.PathLike[str],
    events: TraceRecorder | Iterable[EventRow],
    run: RunInfo,
) -> Path:
    """Write one run: one file per node under events/<run_id>/ and its runs.parquet row,
    replacing any earlier run with the same run_id. Returns the run's event directory.

    `events` is usually the run's recorder; any rows of this run will do (tests plant
    violations that way). Rows of another run_id are a LocalProtocolError.
    """
    _check_run(run)
    out = Path(out_dir)
    if isinstance(events, TraceRecorder):
        if events.run_id != run.run_id:
            raise LocalProtocolError(
                f"recorder of run {events.run_id!r} written as run {run.run_id!r}")
        if not events.keeps_rows:
            raise LocalProtocolError("this recorder streamed its rows (keep_rows=False); "
                                     "use add_run() once its NodeTraceWriters are closed")
        rows: Iterable[EventRow] = events.rows()
    else:
        rows = events
    by_node: dict[str, list[EventRow]] = {}
    for row in rows:
        if row.run_id != run.run_id:
            raise LocalProtocolError(f"row of run {row.run_id!r} written as run {run.run_id!r}")
        by_node.setdefault(row.node, []).append(row)
    for node in by_node:
        check_name("node", node)

    events_root = out / EVENTS_DIR
    events_root.mkdir(parents=True, exist_ok=True)
    # Build the new directory beside the old one, then swap it in under the lock.
    staging = events_root / f".{run.run_id}.{os.getpid()}.{uuid.uuid4().hex}.new"
    staging.mkdir()
    try:
        for node in sorted(by_node, key=node_sort_key):
            pq.write_table(events_to_table(by_node[node]), staging / f"{node}.parquet",
                           compression=COMPRESSION)
        final = events_root / run.run_id
        with _out_dir_lock(out):
            if final.exists():
                retired = events_root / f".{run.run_id}.{uuid.uuid4().hex}.old"
                final.rename(retired)
                shutil.rmtree(retired)
            staging.rename(final)
            _upsert_run_row(out, run)
    finally:
        if staging.exists():
            shutil.rmtree(staging)
    return final


def add_run(out_dir: str | os.PathLike[str], run: RunInfo) -> None:
    """Commit a streamed run: add (or replace) its runs.parquet row, leaving the event
    files its NodeTraceWriters wrote as they are."""
    _check_run(run)
    out = Path(out_dir)
    with _out_dir_lock(out):
        _upsert_run_row(out, run)


def clear_run(out_dir: str | os.PathLike[str], run_id: str) -> None:
    """Remove a run's event directory (before a streamed re-run) and its runs row."""
    check_name("run_id", run_id)
    out = Path(out_dir)
    with _out_dir_lock(out):
        final = out / EVENTS_DIR / run_id
        if final.exists():
            shutil.rmtree(final)
        runs_path = out / RUNS_FILE
        if runs_path.exists():
            kept = [r for r in read_runs(out) if r.run_id != run_id]
            write_table_atomically(runs_to_table(kept), runs_path)


# ---------------------------------------------------------------- reading


def parquet_table(source: Path | BinaryIO, shown: str) -> pa.Table:
    """A Parquet file's table; TraceFormatError (naming `shown`) when it is not one."""
    try:
        return pq.read_table(source)
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise TraceFormatError(f"{shown}: not a readable Parquet file ({exc})") from exc


def _read_parquet(path: Path) -> pa.Table:
    return parquet_table(path, str(path))


def _read_event_file(path: Path) -> pa.Table:
    """A node's Parquet file, or its stream (`read_stream`: a never-closed one ends in a
    crash row)."""
    return read_stream(path) if path.suffix == STREAM_SUFFIX else _read_parquet(path)


def event_files(directory: Path) -> list[Path]:
    """A run's event files in name order: `<node>.parquet`, `<node>-<k>.parquet` and
    `<node>.arrows` (skipped beside its node's sealed `<node>.parquet`: a seal killed
    between its rename and its unlink). TraceFormatError for anything else."""
    files = sorted(p for p in directory.iterdir() if is_data(p))
    names = {p.name for p in files}
    out = []
    for path in files:
        if path.suffix not in (".parquet", STREAM_SUFFIX) or not path.is_file():
            raise TraceFormatError(f"{path}: unexpected entry in an event directory (only "
                                   f"<node>.parquet, <node>-<k>.parquet or <node>{STREAM_SUFFIX} "
                                   "belong there)")
        if path.suffix == STREAM_SUFFIX and f"{path.stem}.parquet" in names:
            continue
        out.append(path)
    return out


def read_runs(out_dir: str | os.PathLike[str]) -> list[RunInfo]:
    """The runs.parquet rows, in file order (write_run keeps them sorted by run_id)."""
    out = Path(out_dir)
    if not out.is_dir():
        raise TraceFormatError(f"trace directory {out} does not exist")
    runs_path = out / RUNS_FILE
    if not runs_path.is_file():
        raise TraceFormatError(
            f"{runs_path} is missing: {out} is empty or not a trace directory")
    runs = table_to_runs(_read_parquet(runs_path), str(runs_path))
    seen: set[str] = set()
    for run in runs:
        if run.run_id in seen:
            raise TraceFormatError(f"{runs_path}: run_id {run.run_id!r} appears twice")
        seen.add(run.run_id)
        unknown = [g for g in run.guarantees if g not in GUARANTEES]
        if unknown:
            raise TraceFormatError(
                f"{runs_path}: run {run.run_id!r} claims unknown guarantees {unknown}")
    return runs


def read_events(out_dir: str | os.PathLike[str], run_id: str) -> list[EventRow]:
    """One run's rows, ordered by node (node order) then t_ns, from however many files
    each node wrote."""
    directory = Path(out_dir) / EVENTS_DIR / run_id
    if not directory.is_dir():
        raise TraceFormatError(f"{directory} is missing: run {run_id!r} has a runs row "
                               "but no event directory")
    rows: list[EventRow] = []
    for path in event_files(directory):
        file_rows = table_to_events(_read_event_file(path), str(path))
        for row in file_rows:
            if row.run_id != run_id:
                raise TraceFormatError(
                    f"{path}: holds a row of run {row.run_id!r} inside events/{run_id}/")
        rows.extend(file_rows)
    rows.sort(key=lambda r: (node_sort_key(r.node), r.node, r.t_ns))
    return rows


def read_traces(out_dir: str | os.PathLike[str]) -> tuple[list[RunInfo], list[EventRow]]:
    """Every committed run of an out dir and all their rows (run by run, in runs.parquet
    order). Raises TraceFormatError naming the file or column that is missing or wrong."""
    runs = read_runs(out_dir)
    events: list[EventRow] = []
    for run in runs:
        events.extend(read_events(out_dir, run.run_id))
    return runs, events
