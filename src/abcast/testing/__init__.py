"""In-memory checks of traces (docs/checks.md), used by tests and `abcast sim`; the
Spark pipeline implements the same definitions and must report the same counts."""

from __future__ import annotations

from abcast.testing.builders import TraceBuilder
from abcast.testing.checks import (
    Violation,
    check_agreement,
    check_causal,
    check_events,
    check_fifo,
    check_integrity,
    check_local_order,
    check_total_order,
    check_traces,
    check_uniform_agreement,
    check_validity,
    codes_for,
    count_by_code,
    validate_guarantees,
)
from abcast.trace.schema import (
    AGREEMENT,
    CAUSAL_ORDER,
    CODES,
    FIFO_ORDER,
    GUARANTEE_CODES,
    INTEGRITY_DUPLICATE,
    INTEGRITY_UNKNOWN,
    LOCAL_ORDER,
    TOTAL_ORDER,
    UNIFORM_AGREEMENT,
    VALIDITY,
)

__all__ = [
    "AGREEMENT",
    "CAUSAL_ORDER",
    "CODES",
    "FIFO_ORDER",
    "GUARANTEE_CODES",
    "INTEGRITY_DUPLICATE",
    "INTEGRITY_UNKNOWN",
    "LOCAL_ORDER",
    "TOTAL_ORDER",
    "UNIFORM_AGREEMENT",
    "VALIDITY",
    "TraceBuilder",
    "Violation",
    "check_agreement",
    "check_causal",
    "check_events",
    "check_fifo",
    "check_integrity",
    "check_local_order",
    "check_total_order",
    "check_traces",
    "check_uniform_agreement",
    "check_validity",
    "codes_for",
    "count_by_code",
    "validate_guarantees",
]
