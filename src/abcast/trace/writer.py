"""Trace files on disk (docs/design.md §6): writing a run, streaming a long run, reading back.

Layout under one out dir, shared by any number of runs:

    <out>/runs.parquet                      one row per run (RUN_SCHEMA)
    <out>/events/<run_id>/<node>.parquet    a node's rows (EVENT_SCHEMA); a streaming node
    <out>/events/<run_id>/<node>-<k>.parquet   writes several files, k = 1, 2, …

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
import re
import shutil
import uuid
from collections.abc import Iterable, Iterator
from pathlib import Path
from types import TracebackType

import pyarrow as pa
import pyarrow.parquet as pq

from abcast.errors import LocalProtocolError
from abcast.ids import node_sort_key
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

RUNS_FILE = "runs.parquet"
EVENTS_DIR = "events"
LOCK_FILE = ".runs.lock"
COMPRESSION = "zstd"
DEFAULT_FLUSH_EVERY = 50_000

_BAD_NAME = re.compile(r"[/\\\x00]")


def _check_name(what: str, name: str) -> None:
    # run ids and node ids become path components
    if not name or _BAD_NAME.search(name) or name[0] in "._":
        raise LocalProtocolError(
            f"{what} {name!r} cannot name a trace file: it must be non-empty, contain no "
            "'/', '\\' or NUL, and not start with '.' or '_'"
        )


def _check_run(run: RunInfo) -> None:
    _check_name("run_id", run.run_id)
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


def _write_table_atomically(table: pa.Table, path: Path) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")
    try:
        pq.write_table(table, tmp, compression=COMPRESSION)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def _upsert_run_row(out_dir: Path, run: RunInfo) -> None:
    """Replace-or-add the run's row; caller holds the lock."""
    runs_path = out_dir / RUNS_FILE
    runs = read_runs(out_dir) if runs_path.exists() else []
    kept = [r for r in runs if r.run_id != run.run_id]
    kept.append(run)
    kept.sort(key=lambda r: r.run_id)
    _write_table_atomically(runs_to_table(kept), runs_path)


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
        _check_name("node", node)

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
    _check_name("run_id", run_id)
    out = Path(out_dir)
    with _out_dir_lock(out):
        final = out / EVENTS_DIR / run_id
        if final.exists():
            shutil.rmtree(final)
        runs_path = out / RUNS_FILE
        if runs_path.exists():
            kept = [r for r in read_runs(out) if r.run_id != run_id]
            _write_table_atomically(runs_to_table(kept), runs_path)


# ---------------------------------------------------------------- streaming


class NodeTraceWriter:
    """Streams one node's rows of one run to `<node>-<k>.parquet`, a file every
    `flush_every` rows (and on close), so a long real run holds at most one batch.

    Opening it removes that node's files from an earlier run with the same run_id. Close
    it (or use it as a context manager), then commit the run with `add_run`.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        run_id: str,
        node: str,
        *,
        flush_every: int = DEFAULT_FLUSH_EVERY,
    ) -> None:
        _check_name("run_id", run_id)
        _check_name("node", node)
        if flush_every < 1:
            raise LocalProtocolError(f"flush_every must be >= 1, got {flush_every}")
        self.run_id = run_id
        self.node = node
        self.flush_every = flush_every
        self.directory = Path(out_dir) / EVENTS_DIR / run_id
        self.directory.mkdir(parents=True, exist_ok=True)
        own = re.compile(rf"{re.escape(node)}(-\d+)?\.parquet")
        for stale in self.directory.iterdir():
            if own.fullmatch(stale.name):
                stale.unlink()
        self._batch: list[EventRow] = []
        self._files = 0
        self._closed = False

    def append(self, row: EventRow) -> None:
        if self._closed:
            raise LocalProtocolError(f"NodeTraceWriter for {self.node!r} is closed")
        if row.run_id != self.run_id or row.node != self.node:
            raise LocalProtocolError(
                f"row of ({row.run_id!r}, {row.node!r}) given to the writer of "
                f"({self.run_id!r}, {self.node!r})")
        self._batch.append(row)
        if len(self._batch) >= self.flush_every:
            self.flush()

    def flush(self) -> None:
        """Write the pending rows as the next file (nothing when none are pending)."""
        if not self._batch:
            return
        self._files += 1
        path = self.directory / f"{self.node}-{self._files}.parquet"
        _write_table_atomically(events_to_table(self._batch), path)
        self._batch = []

    @property
    def files_written(self) -> int:
        return self._files

    def close(self) -> None:
        if not self._closed:
            self.flush()
            self._closed = True

    def __enter__(self) -> NodeTraceWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


# ---------------------------------------------------------------- reading


def _read_parquet(path: Path) -> pa.Table:
    try:
        return pq.read_table(path)
    except (pa.ArrowInvalid, OSError) as exc:
        raise TraceFormatError(f"{path}: not a readable Parquet file ({exc})") from exc


def _is_data(path: Path) -> bool:
    return not path.name.startswith((".", "_"))


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
    for path in sorted(p for p in directory.iterdir() if _is_data(p)):
        if path.suffix != ".parquet" or not path.is_file():
            raise TraceFormatError(f"{path}: unexpected entry in an event directory "
                                   "(only <node>.parquet or <node>-<k>.parquet belong there)")
        file_rows = table_to_events(_read_parquet(path), str(path))
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
