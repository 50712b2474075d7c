"""Reading a trace directory (docs/design.md §6) into Spark, refusing anything not in the format.

Rules: a trace dir holds `events/<run_id>/` (Parquet files) and `runs.parquet`; a local
one may also hold a killed node's unsealed stream (`<node>.arrows`, abcast.trace.stream),
read on the driver with `read_stream` — the same reader, and so the same crash row, the
in-memory checks get — and added to the Parquet rows. The path
may be any Hadoop-compatible URI; only a path without a scheme (or `file:`) is inspected
on the local disk first, file by file with pyarrow (cheap footer reads), so a missing or
foreign file is named precisely. Remote paths are judged by what Spark reports. Every
refusal is a `TraceDirError` with one line that names the file or column; this module
never checks anything about the trace's content.

The events read are those abcast.trace.read_traces reads: the files directly in the
directory of each run with a runs row (`events/<run_id>/`). Their rows belong to that
run: a row of another run there, a file deeper down, or a null in a column that may
hold none (run_id, node, kind, t_ns) refuses the trace with the reader's words
(`check_file_rows`: a local file from its footer's statistics, read only when they do
not settle it; a remote trace by one Spark job, `check_remote_rows`). Spark would
otherwise file such a row under the run its own `run_id` names, where the in-memory
checks never see it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Final
from urllib.parse import unquote, urlparse

import pyarrow as pa
import pyarrow.parquet as pq

from abcast.errors import AbcastError
from abcast.trace.rows import TraceFormatError
from abcast.trace.schema import EVENT_SCHEMA, GUARANTEES, OPTIONAL_RUN_COLUMNS, RUN_SCHEMA
from abcast.trace.stream import STREAM_SUFFIX, read_stream

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession
    from pyspark.sql.types import DataType

EVENTS_DIR: Final = "events"
RUNS_FILE: Final = "runs.parquet"
_SCHEME: Final = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*):")


class TraceDirError(AbcastError):
    """A trace directory that is missing, empty or not in the trace format."""


@dataclass(frozen=True, slots=True)
class TraceFrames:
    """The two tables of a trace directory, columns validated and typed as in the schema."""

    events: DataFrame
    runs: DataFrame


def join_path(base: str, *parts: str) -> str:
    """`base/part/…` for URIs and local paths alike (no os.path: it would mangle `s3a://`)."""
    return "/".join([base.rstrip("/"), *parts])


def local_path(uri: str) -> Path | None:
    """The local file system path behind `uri`, or None when it names another file system."""
    match = _SCHEME.match(uri)
    if match is None:
        return Path(uri)
    if match.group(1).lower() == "file":
        rest = uri[len("file:"):]
        # file:///x and file:/x both mean /x
        return Path("/" + rest.lstrip("/"))
    return None


def _is_data_file(path: Path) -> bool:
    # Hadoop writers leave _SUCCESS, .crc and _metadata side files next to the data.
    return path.is_file() and not path.name.startswith(("_", "."))


def open_streams(events_dir: Path) -> list[Path]:
    """The unsealed node streams under a local events dir (any depth), skipping one whose
    sealed `<node>.parquet` sits beside it (a seal killed between rename and unlink)."""
    return sorted(p for p in events_dir.rglob(f"*{STREAM_SUFFIX}")
                  if _is_data_file(p) and not p.with_suffix(".parquet").exists())


def _stream_table(path: Path, shown: str) -> pa.Table:
    try:
        return read_stream(path)
    except TraceFormatError as exc:
        raise TraceDirError(f"{shown}: not a trace stream ({exc})") from None


def _check_local_schema(path: Path, shown: str, expected: pa.Schema) -> int:
    """Refuse a file that is not Parquet or lacks a column; its row count otherwise."""
    try:
        metadata = pq.read_metadata(path)
        schema = metadata.schema.to_arrow_schema()
        names = schema.names
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise TraceDirError(f"{shown}: not a Parquet file ({exc})") from None
    missing = [name for name in expected.names if name not in names
               and not (expected is RUN_SCHEMA and name in OPTIONAL_RUN_COLUMNS)]
    if missing:
        raise TraceDirError(f"{shown}: missing column {missing[0]!r}"
                            + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
    return int(metadata.num_rows)


#: the event columns no row may leave null (EVENT_SCHEMA's non-nullable fields)
REQUIRED_COLUMNS: Final = tuple(f.name for f in EVENT_SCHEMA if not f.nullable)
#: the same of RUN_SCHEMA
REQUIRED_RUN_COLUMNS: Final = tuple(f.name for f in RUN_SCHEMA if not f.nullable)


def run_dir_of(relative: PurePosixPath) -> str | None:
    """The run directory holding an event file, from its path below `events/` (None for
    a file directly in it)."""
    return relative.parts[0] if len(relative.parts) > 1 else None


def _placed(relative: PurePosixPath, shown: str) -> str:
    """The run directory of a file read as a committed run's: refused when it sits
    deeper (abcast.trace.event_files reads a run directory's own files only)."""
    run_dir = run_dir_of(relative)
    if run_dir is None or len(relative.parts) > 2:
        raise TraceDirError(f"{shown}: unexpected entry in an event directory (a run's "
                            f"event files sit directly in {EVENTS_DIR}/<run_id>/)")
    return run_dir


def foreign_row(shown: str, run_dir: str, run_id: str | None) -> TraceDirError:
    """The refusal of a row the file's run directory does not own (the words of
    abcast.trace.read_events)."""
    if run_id is None:
        return TraceDirError(f"{shown}: column 'run_id' holds nulls")
    return TraceDirError(f"{shown}: holds a row of run {run_id!r} inside "
                         f"{EVENTS_DIR}/{run_dir}/")


def _settled_by_statistics(metadata: pq.FileMetaData, run_dir: str) -> bool:
    """Whether the footer shows every row group with run_id == run_dir and no null in a
    required column (statistics missing or not conclusive: False, read the columns)."""
    names = [metadata.schema.column(i).path for i in range(metadata.num_columns)]
    for g in range(metadata.num_row_groups):
        group = metadata.row_group(g)
        for name in REQUIRED_COLUMNS:
            if name not in names:
                return False
            stats = group.column(names.index(name)).statistics
            if stats is None or stats.null_count is None or stats.null_count:
                return False
            if name == "run_id" and not (stats.has_min_max and stats.min == stats.max
                                         == run_dir):
                return False
    return True


def check_file_rows(file: Path, relative: PurePosixPath, shown: str,
                    table: pa.Table | None = None) -> None:
    """Refuse an event file (at `relative` below `events/`) holding a row of another run
    than its directory's, or a null where EVENT_SCHEMA allows none. `table`: its rows,
    when already read (a stream); else the Parquet footer settles it, or the columns are
    read."""
    run_dir = _placed(relative, shown)
    if table is None:
        try:
            if _settled_by_statistics(pq.read_metadata(file), run_dir):
                return
            present = pq.read_schema(file).names
            table = pq.read_table(file, columns=[c for c in REQUIRED_COLUMNS
                                                 if c in present])
        except (pa.ArrowException, OSError, ValueError) as exc:
            raise TraceDirError(f"{shown}: not a Parquet file ({exc})") from None
    for name in REQUIRED_COLUMNS:
        if name in table.column_names and table.column(name).null_count:
            raise TraceDirError(f"{shown}: column {name!r} holds nulls")
    if "run_id" in table.column_names:
        for run_id in table.column("run_id").unique().to_pylist():
            if run_id != run_dir:
                raise foreign_row(shown, run_dir, run_id)


def validate_local(root: Path, shown_root: str) -> int:
    """Refuse a local trace dir that is missing, empty, or has a foreign or incomplete
    file; return the number of event rows read_trace reads (the committed runs', from
    the Parquet footers)."""
    if not root.exists():
        raise TraceDirError(f"trace directory not found: {shown_root}")
    if not root.is_dir():
        raise TraceDirError(f"not a directory: {shown_root}")
    events_dir = root / EVENTS_DIR
    runs_file = root / RUNS_FILE
    if not events_dir.is_dir():
        raise TraceDirError(f"missing {join_path(shown_root, EVENTS_DIR)}/ (no event files)")
    if not runs_file.is_file():
        raise TraceDirError(f"missing {join_path(shown_root, RUNS_FILE)}")
    files = sorted(p for p in events_dir.rglob("*") if _is_data_file(p))
    if not files:
        raise TraceDirError(f"no event files under {join_path(shown_root, EVENTS_DIR)}/")
    _check_local_schema(runs_file, join_path(shown_root, RUNS_FILE), RUN_SCHEMA)
    committed = set(_check_run_dirs(runs_file, events_dir, shown_root))
    rows = 0
    streams = set(open_streams(events_dir))
    for file in files:
        shown = join_path(shown_root, str(file.relative_to(root)))
        relative = PurePosixPath(file.relative_to(events_dir).as_posix())
        # the rows of a committed run's files are checked: the ones read_trace reads
        judged = run_dir_of(relative) in committed
        if file.suffix == STREAM_SUFFIX:
            if file in streams:
                table = _stream_table(file, shown)
                if judged:
                    check_file_rows(file, relative, shown, table)
                    rows += table.num_rows
            continue
        if file.suffix != ".parquet":
            raise TraceDirError(f"{shown}: not a Parquet file (event files end in .parquet, "
                                f"or {STREAM_SUFFIX} for a killed node's stream)")
        count = _check_local_schema(file, shown, EVENT_SCHEMA)
        if judged:
            check_file_rows(file, relative, shown)
            rows += count
    return rows


def check_claims(runs: list[tuple[str, list[str] | None]], shown: str) -> None:
    """Refuse runs rows (run_id, guarantees) that abcast.trace.read_runs refuses: a run_id
    twice, or a guarantee that is not one of GUARANTEES (a run claiming "totl" would be
    checked for nothing and judged clean)."""
    seen: set[str] = set()
    for run_id, guarantees in runs:
        if run_id in seen:
            raise TraceDirError(f"{shown}: run_id {run_id!r} appears twice")
        seen.add(run_id)
        unknown = [g for g in guarantees or () if g not in GUARANTEES]
        if unknown:
            raise TraceDirError(f"{shown}: run {run_id!r} claims unknown guarantees {unknown}")


def _check_run_dirs(runs_file: Path, events_dir: Path, shown_root: str) -> list[str]:
    """Refuse runs rows that abcast.trace.read_traces refuses (`check_claims`), and a runs
    row without its event directory, as abcast.trace.read_events does: read on, the run
    would have no rows, and a run with none breaks no check."""
    shown = join_path(shown_root, RUNS_FILE)
    try:
        # (_check_local_schema saw these columns: the required ones are never optional)
        table = pq.read_table(runs_file, columns=list(REQUIRED_RUN_COLUMNS))
    except (pa.ArrowException, OSError, ValueError) as exc:
        raise TraceDirError(f"{shown}: not a Parquet file ({exc})") from None
    for name in REQUIRED_RUN_COLUMNS:
        if table.column(name).null_count:
            raise TraceDirError(f"{shown}: column {name!r} holds nulls")
    run_ids = table.column("run_id").to_pylist()
    check_claims(list(zip(run_ids, table.column("guarantees").to_pylist(), strict=True)),
                 shown)
    for run_id in run_ids:
        if not isinstance(run_id, str) or not (events_dir / run_id).is_dir():
            raise TraceDirError(f"{join_path(shown_root, EVENTS_DIR, str(run_id))}/ is "
                                f"missing: run {run_id!r} has a runs row but no event "
                                "directory")
    return [str(run_id) for run_id in run_ids]


def _spark_type(arrow_type: pa.DataType) -> DataType:
    from pyspark.sql import types as T

    if pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type):
        return T.StringType()
    if pa.types.is_int64(arrow_type):
        return T.LongType()
    if pa.types.is_int32(arrow_type):
        return T.IntegerType()
    if pa.types.is_map(arrow_type):
        return T.MapType(_spark_type(arrow_type.key_type), _spark_type(arrow_type.item_type))
    if pa.types.is_list(arrow_type):
        return T.ArrayType(_spark_type(arrow_type.value_type))
    raise TypeError(f"no Spark type for {arrow_type}")  # the schema module uses only these


def conform(frame: DataFrame, expected: pa.Schema, shown: str) -> DataFrame:
    """Select the schema's columns in order, casting integer widths; refuse anything else."""
    from pyspark.sql import functions as F
    from pyspark.sql import types as T

    present = dict(zip(frame.columns, (f.dataType for f in frame.schema.fields), strict=True))
    columns = []
    for field in expected:
        want = _spark_type(field.type)
        have = present.get(field.name)
        if have is None and expected is RUN_SCHEMA and field.name in OPTIONAL_RUN_COLUMNS:
            columns.append(F.lit(None).cast(want).alias(field.name))  # an older trace
            continue
        if have is None:
            raise TraceDirError(f"{shown}: missing column {field.name!r}")
        integral = (T.IntegerType, T.LongType, T.ShortType, T.ByteType)
        if have != want and not (isinstance(have, integral) and isinstance(want, integral)):
            raise TraceDirError(f"{shown}: column {field.name!r} has type "
                                f"{have.simpleString()}, expected {want.simpleString()}")
        columns.append(F.col(field.name).cast(want) if have != want else F.col(field.name))
    return frame.select(*columns)


def _spark_refusal(exc: Exception, shown: str) -> TraceDirError:
    first_line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
    if "PATH_NOT_FOUND" in first_line or "does not exist" in first_line:
        return TraceDirError(f"{shown}: not found")
    if "UNABLE_TO_INFER_SCHEMA" in first_line:
        return TraceDirError(f"{shown}: no Parquet files")
    return TraceDirError(f"{shown}: cannot be read as Parquet ({first_line})")


def preflight(uri: str) -> int | None:
    """Validate a local trace dir without starting Spark (TraceDirError when it is not one)
    and return its number of event rows; None for a remote URI (Spark judges those)."""
    local = local_path(uri)
    return None if local is None else validate_local(local, uri)


def check_remote_rows(events: DataFrame, events_uri: str) -> None:
    """`check_file_rows` for a trace Spark reads from elsewhere: one job, one row per
    file (its run ids and whether a required column holds a null), judged here."""
    import posixpath

    from pyspark.sql import functions as F

    nulls = F.greatest(*[F.col(c).isNull().cast("int") for c in REQUIRED_COLUMNS])
    per_file = (events.groupBy(F.input_file_name().alias("file"))
                .agg(F.collect_set("run_id").alias("run_ids"), F.max(nulls).alias("nulls"),
                     F.max(F.col("run_id").isNull().cast("int")).alias("null_run"))
                .collect())
    base = posixpath.normpath(unquote(urlparse(events_uri).path))
    for row in sorted(per_file, key=lambda r: r["file"]):
        path = posixpath.normpath(unquote(urlparse(row["file"]).path))
        if not path.startswith(base + "/"):
            continue  # not under the events dir as written: nothing to place it by
        relative = PurePosixPath(path[len(base) + 1:])
        shown = join_path(events_uri, str(relative))
        run_dir = _placed(relative, shown)
        if row["null_run"]:
            raise foreign_row(shown, run_dir, None)
        if row["nulls"]:
            raise TraceDirError(f"{shown}: a column of {list(REQUIRED_COLUMNS)} holds nulls")
        for run_id in sorted(row["run_ids"]):
            if run_id != run_dir:
                raise foreign_row(shown, run_dir, run_id)


def _committed_runs(runs: DataFrame, shown: str) -> list[str]:
    """The run ids of the runs table (a few rows, collected), refusing a null where
    RUN_SCHEMA allows none, as abcast.trace.read_runs does (a null `guarantees` would
    otherwise claim nothing, and its run be judged clean unchecked)."""
    from pyspark.sql import functions as F

    rows = runs.select("run_id", *[F.col(c).isNull().alias(f"_null_{c}")
                                   for c in REQUIRED_RUN_COLUMNS]).collect()
    for name in REQUIRED_RUN_COLUMNS:
        if any(r[f"_null_{name}"] for r in rows):
            raise TraceDirError(f"{shown}: column {name!r} holds nulls")
    return sorted(str(r["run_id"]) for r in rows)


def read_trace(spark: SparkSession, uri: str) -> TraceFrames:
    """Both tables of the trace dir at `uri`, columns checked and typed: the events of the
    runs with a runs row, read from their directories (as abcast.trace.read_traces reads
    them: an uncommitted run's files, and files outside a run directory, are left alone).
    Call `preflight` first for a precise message about a local dir. Raises
    TraceDirError."""
    from pyspark.errors import PySparkException

    events_uri = join_path(uri, EVENTS_DIR)
    runs_uri = join_path(uri, RUNS_FILE)
    try:
        runs = conform(spark.read.parquet(runs_uri), RUN_SCHEMA, runs_uri)
    except PySparkException as exc:
        raise _spark_refusal(exc, runs_uri) from None
    run_ids = _committed_runs(runs, runs_uri)
    local = local_path(events_uri)
    local_dir = local if local is not None and local.is_dir() else None
    streams: list[Path] = []
    parquet_files: list[Path] = []
    if local_dir is not None:
        committed = set(run_ids)
        streams = [p for p in open_streams(local_dir)
                   if run_dir_of(PurePosixPath(p.relative_to(local_dir).as_posix())) in committed]
        for run_id in run_ids:
            parquet_files += sorted(p for p in (local_dir / run_id).rglob("*.parquet")
                                    if _is_data_file(p))
        for file in parquet_files:  # cheap: the footers settle it
            relative = PurePosixPath(file.relative_to(local_dir).as_posix())
            check_file_rows(file, relative, join_path(events_uri, str(relative)))
    events: DataFrame | None = None
    if run_ids and (local_dir is None or parquet_files):
        try:
            events = conform(spark.read.option("recursiveFileLookup", "true")
                             .option("pathGlobFilter", "*.parquet")
                             .parquet(*[join_path(events_uri, r) for r in run_ids]),
                             EVENT_SCHEMA, events_uri + "/")
        except PySparkException as exc:
            raise _spark_refusal(exc, events_uri + "/") from None
        if local_dir is None:
            check_remote_rows(events, events_uri)
    if streams:
        assert local_dir is not None
        tables = [_stream_table(p, str(p)) for p in streams]
        for path, table in zip(streams, tables, strict=True):
            check_file_rows(path, PurePosixPath(path.relative_to(local_dir).as_posix()),
                            str(path), table)
        from_streams = conform(spark.createDataFrame(pa.concat_tables(tables)), EVENT_SCHEMA,
                               events_uri + "/")
        events = from_streams if events is None else events.unionByName(from_streams)
    if events is None:  # no committed run, or none with a file
        events = conform(spark.createDataFrame(EVENT_SCHEMA.empty_table()), EVENT_SCHEMA,
                         events_uri + "/")
    return TraceFrames(events=events, runs=runs)
