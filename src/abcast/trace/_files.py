"""What every trace file shares: where event files live, which names are data, how a
Parquet file is put in place atomically (abcast.trace.writer, abcast.trace.stream)."""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path
from typing import Final

import pyarrow as pa
import pyarrow.parquet as pq

from abcast.errors import LocalProtocolError

EVENTS_DIR: Final = "events"
COMPRESSION: Final = "zstd"

_BAD_NAME: Final = re.compile(r"[/\\\x00]")


def check_name(what: str, name: str) -> None:
    """Run ids and node ids become path components: refuse what cannot be one."""
    if not name or _BAD_NAME.search(name) or name[0] in "._":
        raise LocalProtocolError(
            f"{what} {name!r} cannot name a trace file: it must be non-empty, contain no "
            "'/', '\\' or NUL, and not start with '.' or '_'"
        )


def is_data(path: Path) -> bool:
    """Names starting with "." or "_" are never data (temp files; Spark skips them too)."""
    return not path.name.startswith((".", "_"))


def hidden_temp(path: Path) -> Path:
    """A hidden sibling of `path` no other process will pick, for an atomic rename."""
    return path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex}.tmp")


def write_table_atomically(table: pa.Table, path: Path) -> None:
    tmp = hidden_temp(path)
    try:
        pq.write_table(table, tmp, compression=COMPRESSION)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
