"""How abcast's command line sets up logging: one logger hierarchy named by module
(`abcast.transport.tcp`, `abcast.runtime.node`, …) and two formats.

Rules: library code only logs (`logging.getLogger(__name__)`), never configures; the
CLI calls `configure` once. `text` is a line per record for people; `json` is one JSON
object per line for machines, always with the keys `time` (seconds since the epoch),
`level`, `logger`, `message`, `node`, `group`, `view` and `event` (null where the
record does not say: code that knows them passes `extra={"node": …, "group": …,
"view": …, "event": …}`) and `error` when the record carries an exception. The format
comes from `--log-format` or $ABCAST_LOG_FORMAT, which child processes (the nodes of
`abcast cluster`) inherit.
"""

from __future__ import annotations

import json
import logging
import os
import sys
from typing import Final

LOG_FORMAT_ENV: Final = "ABCAST_LOG_FORMAT"
FORMATS: Final = ("text", "json")
#: record attributes `extra=` may set that the JSON format always carries
CONTEXT_FIELDS: Final = ("node", "group", "view", "event")


class JsonFormatter(logging.Formatter):
    """One JSON object per record (see the module rules)."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        for name in CONTEXT_FIELDS:
            entry[name] = getattr(record, name, None)
        if record.exc_info:
            entry["error"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def configure(verbose: bool, log_format: str | None = None) -> None:
    """Log to stderr at INFO (verbose) or WARNING, in `log_format` (default: the
    environment's, else text)."""
    chosen = log_format or os.environ.get(LOG_FORMAT_ENV) or "text"
    handler = logging.StreamHandler(sys.stderr)
    if chosen == "json":
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(logging.Formatter(
            "%(asctime)s %(name)s: %(message)s" if verbose else "%(name)s: %(message)s"))
    logging.basicConfig(level=logging.INFO if verbose else logging.WARNING,
                        handlers=[handler])
