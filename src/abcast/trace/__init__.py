"""Traces (docs/design.md §6): the schema, the records, the recorder and the Parquet files."""

from __future__ import annotations

from abcast.trace.recorder import MESSAGE_KINDS, TraceRecorder
from abcast.trace.rows import EventRow, RunInfo, TraceFormatError
from abcast.trace.schema import (
    EVENT_COLUMNS,
    EVENT_SCHEMA,
    GUARANTEES,
    KINDS,
    RUN_COLUMNS,
    RUN_SCHEMA,
)
from abcast.trace.stream import NodeTraceWriter, StreamingSink, read_stream, seal
from abcast.trace.writer import (
    add_run,
    clear_run,
    read_events,
    read_runs,
    read_traces,
    write_run,
)

__all__ = [
    "EVENT_COLUMNS",
    "EVENT_SCHEMA",
    "GUARANTEES",
    "KINDS",
    "MESSAGE_KINDS",
    "RUN_COLUMNS",
    "RUN_SCHEMA",
    "EventRow",
    "NodeTraceWriter",
    "RunInfo",
    "StreamingSink",
    "TraceFormatError",
    "TraceRecorder",
    "add_run",
    "clear_run",
    "read_events",
    "read_runs",
    "read_stream",
    "read_traces",
    "seal",
    "write_run",
]
