"""Trace records in Python: `EventRow` (one row of EVENT_SCHEMA), `MessageRun` (a run of
message rows described once), `RunInfo` (one row of RUN_SCHEMA), and their conversion to
and from Arrow tables.

Rules: this module knows the schema (abcast.trace.schema) and nothing about files,
directories, locking or what the rows mean to a checker. pyarrow is imported by the
conversions only, when first called: a node that does not trace never loads it. Arrow →
Python conversion validates the columns and raises `TraceFormatError` naming the source
and the column; the caller says what the source is (a file path, usually).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import abcast.trace.schema as _schema
from abcast.errors import ConfigError

if TYPE_CHECKING:
    import pyarrow as pa

    from abcast.ordering.registry import OrderingOptions


class TraceFormatError(ConfigError):
    """A trace directory or file is missing, empty or not in the format of docs/design.md §6."""


@dataclass(frozen=True, slots=True)
class EventRow:
    """One trace event, field for field the columns of EVENT_SCHEMA.

    `deps` is a dict, so rows compare by value but are not hashable.
    """

    run_id: str
    node: str
    kind: str
    origin: str | None
    seq: int | None
    group: str | None
    t_ns: int
    index: int | None
    size: int | None = None
    view_id: int | None = None
    deps: dict[str, int] | None = None
    peer: str | None = None
    members: tuple[str, ...] | None = None


class MessageRun(NamedTuple):
    """`len(sizes)` rows of one message kind (send, deliver, opt_deliver) at one node,
    about one origin's messages `first_seq`, `first_seq + 1`, … (module rules)."""

    run_id: str
    node: str
    kind: str
    origin: str
    first_seq: int
    group: str | None
    t_ns: int
    first_index: int
    sizes: list[int]
    view_id: int | None
    deps: dict[str, int] | None = None

    def rows(self) -> list[EventRow]:
        """The run as rows (for callers that keep rows, and for tests)."""
        run_id, node, kind, origin, group, view_id = (
            self.run_id, self.node, self.kind, self.origin, self.group, self.view_id)
        deps, seq, t_ns, index = self.deps, self.first_seq, self.t_ns, self.first_index
        return [
            EventRow(run_id, node, kind, origin, seq + i, group, t_ns + i, index + i, size,
                     view_id, None if deps is None else dict(deps))
            for i, size in enumerate(self.sizes)
        ]


@dataclass(frozen=True, slots=True)
class RunInfo:
    """One row of runs.parquet: what ran, and which guarantees its ordering claims."""

    run_id: str
    ordering: str
    transport: str
    nodes: int
    payload_bytes: int
    workload: str
    seed: int | None
    faults: str | None
    guarantees: tuple[str, ...]
    started_ns: int
    duration_ns: int
    options: str | None = None  # options_label(...); None: written before the column

    def __post_init__(self) -> None:
        # Lists sneak in from Arrow and from callers; the record stays immutable.
        if not isinstance(self.guarantees, tuple):
            object.__setattr__(self, "guarantees", tuple(self.guarantees))


def options_label(options: OrderingOptions) -> str:
    """The runs row's `options`: the knobs that change what a run measures or claims,
    when not at their default, in one fixed order ("" when all are)."""
    parts = [name for name, on in (("relay", options.relay), ("safe", options.safe)) if on]
    if options.batch is not None:
        parts.append(f"batch={options.batch}")
    if options.multicast not in (None, "reliable"):
        parts.append(f"multicast={options.multicast}")
    if options.partitions != "primary":
        parts.append(f"partitions={options.partitions}")
    if options.order_interval_ms:
        parts.append(f"order_interval_ms={options.order_interval_ms:g}")
    optimistic = options.optimistic
    if not optimistic.compensate:
        parts.append("optimistic=plain")
    elif optimistic != type(optimistic)():
        parts.append(f"optimistic_alpha={optimistic.alpha:g}")
    return " ".join(parts)


# ---------------------------------------------------------------- Python → Arrow


def _deps_cell(deps: dict[str, int] | None) -> list[tuple[str, int]] | None:
    # Sorted keys: the same row always gives the same bytes.
    return None if deps is None else sorted(deps.items())


def events_to_table(rows: Sequence[EventRow]) -> pa.Table:
    """The rows as a table of exactly EVENT_SCHEMA, in the given order."""
    columns: dict[str, list[Any]] = {name: [] for name in _schema.EVENT_COLUMNS}
    for row in rows:
        for name in _schema.EVENT_COLUMNS:
            value = getattr(row, name)
            if name == "deps":
                value = _deps_cell(value)
            elif name == "members" and value is not None:
                value = list(value)
            columns[name].append(value)
    return columns_to_table(columns)


def columns_to_table(columns: dict[str, list[Any]]) -> pa.Table:
    """A table of exactly EVENT_SCHEMA from Python column lists (deps already as pairs)."""
    import pyarrow as pa

    arrays = [pa.array(columns[f.name], type=f.type) for f in _schema.EVENT_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=_schema.EVENT_SCHEMA)


def runs_to_table(runs: Iterable[RunInfo]) -> pa.Table:
    import pyarrow as pa

    columns: dict[str, list[Any]] = {name: [] for name in _schema.RUN_COLUMNS}
    for run in runs:
        for name in _schema.RUN_COLUMNS:
            value = getattr(run, name)
            columns[name].append(list(value) if name == "guarantees" else value)
    arrays = [pa.array(columns[f.name], type=f.type) for f in _schema.RUN_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=_schema.RUN_SCHEMA)


# ---------------------------------------------------------------- Arrow → Python


def conform(table: pa.Table, schema: pa.Schema, source: str) -> pa.Table:
    """`table` restricted and cast to `schema`; a missing, uncastable or (for a
    non-nullable field) null-holding column raises TraceFormatError naming it."""
    import pyarrow as pa

    try:
        names = table.column_names
    except ValueError as exc:  # a column name that is not UTF-8
        raise TraceFormatError(f"{source}: a column name does not decode ({exc})") from exc
    arrays = []
    optional = _schema.OPTIONAL_RUN_COLUMNS if schema is _schema.RUN_SCHEMA else frozenset()
    for f in schema:
        if f.name not in names and f.name in optional:
            arrays.append(pa.nulls(table.num_rows, type=f.type))
            continue
        if f.name not in names:
            raise TraceFormatError(f"{source}: missing column {f.name!r}")
        column = table.column(f.name)
        if not column.type.equals(f.type):
            try:
                column = column.cast(f.type)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
                raise TraceFormatError(
                    f"{source}: column {f.name!r} has type {column.type}, expected {f.type}"
                ) from exc
        if not f.nullable and column.null_count:
            raise TraceFormatError(f"{source}: column {f.name!r} holds nulls")
        arrays.append(column)
    return pa.Table.from_arrays(arrays, schema=schema)


def _python_columns(table: pa.Table, source: str) -> dict[str, list[Any]]:
    import pyarrow as pa

    try:
        columns: dict[str, list[Any]] = table.to_pydict()
    except (pa.ArrowException, ValueError) as exc:  # invalid UTF-8 in a string column
        raise TraceFormatError(f"{source}: holds values that do not decode ({exc})") from exc
    return columns


def table_to_events(table: pa.Table, source: str) -> list[EventRow]:
    table = conform(table, _schema.EVENT_SCHEMA, source)
    data = _python_columns(table, source)
    deps_col = [None if d is None else dict(d) for d in data["deps"]]
    members_col = [None if m is None else tuple(m) for m in data["members"]]
    return [
        EventRow(run_id, node, kind, origin, seq, group, t_ns, index, size, view_id,
                 deps, peer, members)
        for run_id, node, kind, origin, seq, group, t_ns, index, size, view_id, deps, peer,
        members in zip(
            data["run_id"], data["node"], data["kind"], data["origin"], data["seq"],
            data["group"], data["t_ns"], data["index"], data["size"], data["view_id"],
            deps_col, data["peer"], members_col, strict=True,
        )
    ]


def table_to_runs(table: pa.Table, source: str) -> list[RunInfo]:
    table = conform(table, _schema.RUN_SCHEMA, source)
    data = _python_columns(table, source)
    return [
        RunInfo(**{name: data[name][i] for name in _schema.RUN_COLUMNS})
        for i in range(table.num_rows)
    ]
