"""A live node's trace, written so that killing the node at any moment keeps it readable.

    events/<run_id>/<node>.arrows     while the node runs: an Arrow IPC stream, one record
                                      batch per flush, handed to the OS at every flush
    events/<run_id>/<node>.parquet    after a clean close: the stream sealed into Parquet
                                      (atomically), the stream removed

Rules:
- `StreamingSink` (a TraceRecorder sink) flushes on a timer, every `interval_s` (0.5 s by
  default), on one background thread: the loop only appends a row or a run (a batch's
  rows, abcast.trace.rows.MessageRun) to a deque; the thread gathers them column by
  column (abcast.trace.columns.EventColumns) and writes large record batches; a node
  SIGKILLed at any moment leaves every row recorded up to one interval before its death
  on disk. Flushing is by time, never per row. The bytes reach the kernel (a killed
  process loses nothing the kernel holds); nothing is fsynced (a power cut may lose more).
- A clean close writes the stream's end-of-stream marker, then seals it. A stream found
  without that marker belongs to a node that never closed its trace: killed (or still
  running). `read_stream` gives its readable prefix — every complete batch; a batch torn
  by the kill is dropped — and one `crash` row right after its last row (t_ns + 1, the
  last row's group): the node counts as crashed at its last row (docs/checks.md, "A trace
  that ends without a close"). Both readers (abcast.trace.writer for the in-memory checks,
  abcast.pipeline.io for Spark) read streams through this function.
- A stream with its end marker but not yet sealed (killed while sealing) reads as a
  finished trace: no crash row.
- A `StreamingSink` puts its process on Arrow's system pool (glibc malloc) unless
  $ARROW_DEFAULT_MEMORY_POOL chose one (`use_system_memory_pool`): the wheels' default,
  mimalloc, kept what each flush freed, and a long-lived node's RSS grew with it.
"""

from __future__ import annotations

import collections
import logging
import os
import re
import threading
from pathlib import Path
from types import TracebackType
from typing import BinaryIO, Final

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from abcast.errors import LocalProtocolError
from abcast.trace._files import COMPRESSION, EVENTS_DIR, check_name, hidden_temp
from abcast.trace.columns import EventColumns
from abcast.trace.rows import (
    EventRow,
    MessageRun,
    TraceFormatError,
    conform,
    events_to_table,
)
from abcast.trace.schema import EVENT_SCHEMA

log: Final = logging.getLogger(__name__)

STREAM_SUFFIX: Final = ".arrows"
#: how often a StreamingSink hands its rows to the OS: a killed node loses at most this
DEFAULT_FLUSH_INTERVAL_S: Final = 0.5
#: a record batch is written once this many rows are pending (a run is never split, so a
#: batch may hold one run's rows more); fewer only at a flush
DEFAULT_FLUSH_EVERY: Final = 65_536
#: rows per row group of a sealed Parquet file
SEAL_ROW_GROUP: Final = 131_072
#: the Arrow IPC continuation token, which begins every message of a stream (its schema
#: first): a file that does not begin with it (or a piece of it) is not a torn stream
_CONTINUATION: Final = b"\xff\xff\xff\xff"
#: the Arrow IPC end-of-stream marker (continuation token, zero length)
_EOS: Final = _CONTINUATION + b"\x00\x00\x00\x00"
_STREAM_OPTIONS: Final = pa.ipc.IpcWriteOptions(compression="lz4")
#: how an operator names Arrow's memory pool (read by Arrow when it is first imported)
POOL_ENV: Final = "ARROW_DEFAULT_MEMORY_POOL"


def use_system_memory_pool() -> None:
    """Make glibc's malloc Arrow's default pool in this process, unless $ARROW_DEFAULT_MEMORY_POOL
    names one. A streaming node builds and frees a record batch every flush, for hours: the
    Linux wheels' default pool, mimalloc, kept the freed pages committed — in the soak
    (bench/soak.py) its region of a long-lived member grew 4 → 8 MiB in 3.5 minutes, most of
    that member's RSS slope — while glibc returns big blocks to the OS at free and keeps
    small ones for reuse. Arrow's CPU work in a node is this one batch per flush, so the
    pool's speed does not matter here."""
    if not os.environ.get(POOL_ENV):
        pa.set_memory_pool(pa.system_memory_pool())


def stream_path(directory: Path, node: str) -> Path:
    return directory / f"{node}{STREAM_SUFFIX}"


class NodeTraceWriter:
    """One node's rows of one run, appended to `<node>.arrows`: a record batch per
    `flush()` (and whenever `flush_every` rows are pending), sealed into `<node>.parquet`
    by `close()`. Rows (`append`) and runs of rows (`append_run`) are gathered column by
    column until then.

    Opening it removes that node's files from an earlier run with the same run_id. Close
    it (or use it as a context manager), then commit the run with `add_run`. Who calls
    `flush` decides what a kill can lose: `StreamingSink` does it on a timer.
    """

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        run_id: str,
        node: str,
        *,
        flush_every: int = DEFAULT_FLUSH_EVERY,
    ) -> None:
        check_name("run_id", run_id)
        check_name("node", node)
        if flush_every < 1:
            raise LocalProtocolError(f"flush_every must be >= 1, got {flush_every}")
        self.run_id = run_id
        self.node = node
        self.flush_every = flush_every
        self.directory = Path(out_dir) / EVENTS_DIR / run_id
        self.directory.mkdir(parents=True, exist_ok=True)
        own = re.compile(rf"{re.escape(node)}((-\d+)?\.parquet|{re.escape(STREAM_SUFFIX)})")
        for stale in self.directory.iterdir():
            if own.fullmatch(stale.name):
                stale.unlink()
        self.path = stream_path(self.directory, node)
        self._file: BinaryIO = open(self.path, "wb")  # noqa: SIM115 (closed by close())
        self._stream = pa.ipc.new_stream(self._file, EVENT_SCHEMA, options=_STREAM_OPTIONS)
        self._pending = EventColumns()
        self._batches = 0
        self._closed = False

    def append(self, row: EventRow) -> None:
        self._check(row.run_id, row.node)
        self._pending.add(row)
        if self._pending.rows >= self.flush_every:
            self.flush()

    def append_run(self, run: MessageRun) -> None:
        self._check(run.run_id, run.node)
        self._pending.add_run(run)
        if self._pending.rows >= self.flush_every:
            self.flush()

    def _check(self, run_id: str, node: str) -> None:
        if self._closed:
            raise LocalProtocolError(f"NodeTraceWriter for {self.node!r} is closed")
        if run_id != self.run_id or node != self.node:
            raise LocalProtocolError(
                f"row of ({run_id!r}, {node!r}) given to the writer of "
                f"({self.run_id!r}, {self.node!r})")

    def flush(self) -> None:
        """Write the pending rows as the next record batch and hand them to the OS
        (nothing when none are pending)."""
        if not self._pending.rows:
            return
        table = self._pending.take()
        self._stream.write_table(table)
        self._file.flush()
        self._batches += 1

    @property
    def batches_written(self) -> int:
        return self._batches

    def close(self) -> None:
        """Flush, end the stream, seal it into `<node>.parquet`."""
        if self._closed:
            return
        self.flush()
        self._closed = True
        self._stream.close()
        self._file.close()
        seal(self.path)

    def __enter__(self) -> NodeTraceWriter:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class StreamingSink:
    """A TraceRecorder sink for a real run: each node's rows to its own NodeTraceWriter,
    flushed every `interval_s` by one background thread, so neither a Parquet write nor
    a row conversion ever stalls the loop (a stalled loop misses heartbeats and gets its
    node suspected). Writers open on a node's first row: the node id is known only once
    the registry assigned it. `close()` flushes, seals and raises a failed write."""

    def __init__(
        self,
        out_dir: str | os.PathLike[str],
        run_id: str,
        *,
        interval_s: float = DEFAULT_FLUSH_INTERVAL_S,
    ) -> None:
        check_name("run_id", run_id)
        if interval_s <= 0:
            raise LocalProtocolError(f"interval_s must be > 0, got {interval_s}")
        use_system_memory_pool()
        self._out = Path(out_dir)
        self._run_id = run_id
        self.interval_s = interval_s
        self._rows: collections.deque[EventRow | MessageRun] = collections.deque()
        self._writers: dict[str, NodeTraceWriter] = {}  # the flusher thread's only
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="abcast-trace", daemon=True)
        self._thread.start()

    def __call__(self, row: EventRow) -> None:
        self._rows.append(row)  # thread-safe; the whole cost on the loop's side

    def run(self, run: MessageRun) -> None:
        self._rows.append(run)  # a batch's rows: one append for all of them

    def warm_up(self) -> None:
        """Pay pyarrow's first-use costs (type inference, the codecs) now, before the run:
        the first real batch otherwise holds the GIL for most of a second."""
        import io

        columns = EventColumns()
        columns.add(EventRow(self._run_id, "n0", "view", None, None, "g", 1, 1, None, 1,
                             None, None, ("n0",)))
        columns.add_run(MessageRun(self._run_id, "n0", "send", "n0", 1, "g", 2, 1, [1, 1],
                                   1, {"n1": 1}))
        table = columns.take()
        pq.write_table(table, io.BytesIO(), compression=COMPRESSION)
        with pa.ipc.new_stream(io.BytesIO(), EVENT_SCHEMA, options=_STREAM_OPTIONS) as w:
            w.write_table(table)

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval_s):
                self._drain()
            self._drain()
        except BaseException as exc:  # surfaced by close()
            log.exception("trace writing failed; rows recorded from now on are not written")
            self._error = exc

    def _drain(self) -> None:
        rows, pop, writers = self._rows, self._rows.popleft, self._writers
        touched: set[NodeTraceWriter] = set()
        for _ in range(len(rows)):
            item = pop()
            writer = writers.get(item.node)
            if writer is None:
                writer = writers[item.node] = NodeTraceWriter(self._out, self._run_id,
                                                               item.node)
            if isinstance(item, MessageRun):
                writer.append_run(item)
            else:
                writer.append(item)
            touched.add(writer)
        for writer in touched:
            writer.flush()

    def close(self) -> None:
        """Write what is left, seal every node's stream; a failed write raises here."""
        if not self._stop.is_set():
            self._stop.set()
            self._thread.join()
            if self._error is None:
                for writer in self._writers.values():
                    writer.close()
        if self._error is not None:
            raise self._error


# ---------------------------------------------------------------- reading


def _ends_with_marker(source: BinaryIO) -> bool:
    source.seek(0, os.SEEK_END)
    if source.tell() < len(_EOS):
        return False
    source.seek(-len(_EOS), os.SEEK_END)
    return source.read() == _EOS


def _read_batches(source: BinaryIO) -> tuple[list[pa.RecordBatch], pa.Schema | None, bool]:
    """The complete batches of the stream, its schema (None: not even a schema made it
    to disk) and whether it ended at its end-of-stream marker."""
    batches: list[pa.RecordBatch] = []
    try:
        reader = pa.ipc.open_stream(source)
    except (pa.ArrowException, OSError, ValueError) as exc:
        source.seek(0)
        start = source.read(len(_CONTINUATION))
        if not _CONTINUATION.startswith(start):  # not even a torn stream's first bytes
            raise TraceFormatError(f"not an Arrow stream ({exc})") from exc
        return [], None, False  # killed before its schema reached the disk
    while True:
        try:
            batch = reader.read_next_batch()
            batch.validate(full=True)
        except StopIteration:
            return batches, reader.schema, _ends_with_marker(source)
        except (pa.ArrowException, OSError, ValueError):
            return batches, reader.schema, False  # torn by the kill: keep the prefix
        batches.append(batch)


def crash_row_after(last: EventRow, crashes_before: int) -> EventRow:
    """The `crash` row that ends a trace its node never closed: right after its last row
    (docs/checks.md, "A trace that ends without a close")."""
    return EventRow(last.run_id, last.node, "crash", None, None, last.group, last.t_ns + 1,
                    crashes_before + 1)


def read_stream(path: str | os.PathLike[str]) -> pa.Table:
    """A node's `.arrows` file as a table of EVENT_SCHEMA (`stream_table`)."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            return stream_table(f, str(path))
    except OSError as exc:
        raise TraceFormatError(f"{path}: cannot be read ({exc})") from exc


def stream_table(source: BinaryIO, shown: str) -> pa.Table:
    """A stream's readable prefix as a table of EVENT_SCHEMA, plus the crash row of
    `crash_row_after` when it ends without its end-of-stream marker and its last row is
    not a crash already. TraceFormatError (naming `shown`) for what is not a trace: a
    file that does not begin as an Arrow stream begins is refused, not read as empty."""
    try:
        batches, schema, closed = _read_batches(source)
    except TraceFormatError as exc:
        raise TraceFormatError(f"{shown}: {exc}") from exc
    if schema is None:
        return EVENT_SCHEMA.empty_table()
    try:
        table = conform(pa.Table.from_batches(batches, schema=schema), EVENT_SCHEMA, shown)
    except (pa.ArrowException, ValueError) as exc:
        raise TraceFormatError(f"{shown}: not a trace stream ({exc})") from exc
    if closed or table.num_rows == 0:
        return table
    t_ns = table.column("t_ns")
    last_at = int(pc.index(t_ns, pc.max(t_ns)).as_py())
    last = table.slice(last_at, 1).to_pylist()[0]
    if last["kind"] == "crash":
        return table
    crashes = int(pc.sum(pc.equal(table.column("kind"), "crash")).as_py() or 0)
    row = crash_row_after(
        EventRow(last["run_id"], last["node"], "crash", None, None, last["group"],
                 last["t_ns"], None), crashes)
    return pa.concat_tables([table, events_to_table([row])])


def seal(path: str | os.PathLike[str]) -> Path:
    """Turn a node's stream into `<node>.parquet` (atomically) and remove the stream. A
    closed stream is copied batch by batch into row groups of SEAL_ROW_GROUP rows, never
    whole in memory; one its node never closed is read as `read_stream` reads it (its
    crash row added)."""
    path = Path(path)
    final = path.with_suffix(".parquet")
    tmp = hidden_temp(final)
    try:
        with open(path, "rb") as f:
            closed = _ends_with_marker(f)
        if not closed:
            pq.write_table(read_stream(path), tmp, compression=COMPRESSION,
                           row_group_size=SEAL_ROW_GROUP)
        else:
            with open(path, "rb") as f, pq.ParquetWriter(
                    tmp, EVENT_SCHEMA, compression=COMPRESSION) as writer:
                pending: list[pa.RecordBatch] = []
                rows = 0
                for batch in pa.ipc.open_stream(f):
                    pending.append(batch)
                    rows += batch.num_rows
                    if rows >= SEAL_ROW_GROUP:
                        writer.write_table(pa.Table.from_batches(pending, EVENT_SCHEMA))
                        pending, rows = [], 0
                if pending:
                    writer.write_table(pa.Table.from_batches(pending, EVENT_SCHEMA))
        os.replace(tmp, final)
    except (pa.ArrowException, ValueError) as exc:
        raise TraceFormatError(f"{path}: cannot be sealed ({exc})") from exc
    finally:
        tmp.unlink(missing_ok=True)
    path.unlink()
    return final
