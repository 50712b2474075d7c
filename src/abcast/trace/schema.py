"""The trace contract (docs/design.md §6): the one format the simulator, the real runtime and the
Spark pipeline share. Change it only together with all three.

A run writes `<out>/events/<run_id>/<node>.parquet` (several `<node>-<k>.parquet` allowed)
and adds one row to `<out>/runs.parquet`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

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

EVENT_SCHEMA: Final = pa.schema([
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

RUN_SCHEMA: Final = pa.schema([
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
#: columns added after traces were first written: a runs file without one reads as null
OPTIONAL_RUN_COLUMNS: Final = frozenset({"options"})

EVENT_COLUMNS: Final = tuple(EVENT_SCHEMA.names)
RUN_COLUMNS: Final = tuple(RUN_SCHEMA.names)
