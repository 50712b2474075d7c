"""The trace contract (docs/design.md §6): the one format the simulator, the real runtime and the
Spark pipeline share. Change it only together with all three.

A run writes `<out>/events/<run_id>/<node>.parquet` (several `<node>-<k>.parquet` allowed)
and adds one row to `<out>/runs.parquet`.

The Arrow schemas (EVENT_SCHEMA, RUN_SCHEMA and their column names) are made on first use:
importing this module, as every node does for KINDS, does not load pyarrow.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    import pyarrow as pa

KINDS: Final = (
    "send", "deliver", "opt_deliver", "view", "crash", "recover", "net_send", "net_recv",
)

GUARANTEES: Final = (
    "integrity", "validity", "agreement", "uniform_agreement", "fifo", "causal", "total",
    "local_order", "virtual_synchrony",
)

# The violation codes each guarantee is checked by (docs/checks.md); both checkers, the
# in-memory one and Spark, report exactly these.
INTEGRITY_DUPLICATE: Final = "INTEGRITY_DUPLICATE"
INTEGRITY_UNKNOWN: Final = "INTEGRITY_UNKNOWN"
VALIDITY: Final = "VALIDITY"
AGREEMENT: Final = "AGREEMENT"
UNIFORM_AGREEMENT: Final = "UNIFORM_AGREEMENT"
FIFO_ORDER: Final = "FIFO_ORDER"
CAUSAL_ORDER: Final = "CAUSAL_ORDER"
TOTAL_ORDER: Final = "TOTAL_ORDER"
LOCAL_ORDER: Final = "LOCAL_ORDER"
VIEW_CONSISTENCY: Final = "VIEW_CONSISTENCY"
VIRTUAL_SYNCHRONY: Final = "VIRTUAL_SYNCHRONY"
SAME_VIEW_DELIVERY: Final = "SAME_VIEW_DELIVERY"

GUARANTEE_CODES: Final[Mapping[str, tuple[str, ...]]] = {
    "integrity": (INTEGRITY_DUPLICATE, INTEGRITY_UNKNOWN),
    "validity": (VALIDITY,),
    "agreement": (AGREEMENT,),
    "uniform_agreement": (UNIFORM_AGREEMENT,),
    "fifo": (FIFO_ORDER,),
    "causal": (CAUSAL_ORDER,),
    "total": (TOTAL_ORDER,),
    "local_order": (LOCAL_ORDER,),
    "virtual_synchrony": (VIEW_CONSISTENCY, VIRTUAL_SYNCHRONY, SAME_VIEW_DELIVERY),
}
CODES: Final = tuple(code for g in GUARANTEES for code in GUARANTEE_CODES[g])

# The simulator's churn judging (abcast.sim.churn) adds two codes of its own, which are
# not trace checks (docs/checks.md, "The simulator's churn judging"): the members present
# throughout installed different sequences of views; the application states differ.
VIEW_ORDER: Final = "VIEW_ORDER"
STATE: Final = "STATE"
CHURN_CODES: Final = (VIEW_ORDER, STATE)

#: columns added after traces were first written: a runs file without one reads as null
OPTIONAL_RUN_COLUMNS: Final = frozenset({"options"})

if TYPE_CHECKING:  # made by __getattr__ on first use
    EVENT_SCHEMA: pa.Schema
    RUN_SCHEMA: pa.Schema
    EVENT_COLUMNS: tuple[str, ...]
    RUN_COLUMNS: tuple[str, ...]


def _arrow_schemas() -> dict[str, Any]:
    import pyarrow as pa

    event_schema = pa.schema([
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("node", pa.string(), nullable=False),
        pa.field("kind", pa.string(), nullable=False),
        pa.field("origin", pa.string()),
        pa.field("seq", pa.int64()),
        pa.field("group", pa.string()),
        pa.field("t_ns", pa.int64(), nullable=False),
        pa.field("index", pa.int64()),
        pa.field("size", pa.int32()),
        pa.field("view_id", pa.int64()),
        pa.field("deps", pa.map_(pa.string(), pa.int64())),
        pa.field("peer", pa.string()),
        pa.field("members", pa.list_(pa.string())),
    ])
    run_schema = pa.schema([
        pa.field("run_id", pa.string(), nullable=False),
        pa.field("ordering", pa.string(), nullable=False),
        pa.field("transport", pa.string(), nullable=False),
        pa.field("nodes", pa.int32(), nullable=False),
        pa.field("payload_bytes", pa.int32(), nullable=False),
        pa.field("workload", pa.string(), nullable=False),
        pa.field("seed", pa.int64()),
        pa.field("faults", pa.string()),
        pa.field("guarantees", pa.list_(pa.string()), nullable=False),
        pa.field("started_ns", pa.int64(), nullable=False),
        pa.field("duration_ns", pa.int64(), nullable=False),
        # the ordering's non-default knobs, e.g. "relay safe batch=1 multicast=basic
        # partitions=evs" ("" for none; see abcast.trace.rows.options_label)
        pa.field("options", pa.string()),
    ])
    return {"EVENT_SCHEMA": event_schema, "RUN_SCHEMA": run_schema,
            "EVENT_COLUMNS": tuple(event_schema.names), "RUN_COLUMNS": tuple(run_schema.names)}


def __getattr__(name: str) -> Any:
    if name not in ("EVENT_SCHEMA", "RUN_SCHEMA", "EVENT_COLUMNS", "RUN_COLUMNS"):
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    made = _arrow_schemas()
    globals().update(made)  # later lookups find them without coming here
    return made[name]
