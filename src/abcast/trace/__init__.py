"""Traces (docs/design.md §6): the schema, the records, the recorder and the Parquet files.

The names below are loaded on first use (PEP 562): a node that does not trace imports
`abcast.trace.recorder` (for its type) and never pyarrow, which the files, the streams and
the Arrow schemas need (~90 MiB of a process's memory with numpy).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

#: each public name -> the module that holds it
_HOMES = {
    "MESSAGE_KINDS": "recorder", "TraceRecorder": "recorder",
    "EventRow": "rows", "RunInfo": "rows", "TraceFormatError": "rows",
    "EVENT_COLUMNS": "schema", "EVENT_SCHEMA": "schema", "GUARANTEES": "schema",
    "KINDS": "schema", "RUN_COLUMNS": "schema", "RUN_SCHEMA": "schema",
    "NodeTraceWriter": "stream", "StreamingSink": "stream", "read_stream": "stream",
    "seal": "stream",
    "add_run": "writer", "clear_run": "writer", "read_events": "writer",
    "read_runs": "writer", "read_traces": "writer", "write_run": "writer",
}

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


def __getattr__(name: str) -> Any:
    home = _HOMES.get(name)
    if home is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{home}"), name)
    globals()[name] = value
    return value
