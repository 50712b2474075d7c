"""The in-memory trace checks (docs/checks.md): the reference definition of every
violation code, used by the simulator, the runtime's cluster runs, the evaluation and
`abcast.testing`. The Spark pipeline (abcast.pipeline) implements the same definitions and
must report the same counts.

Rules: `properties` holds one function per property and `check_events` (a run's claims),
`views` the three view codes, `facts` the indexes they share. This package sits on the
trace level (docs/design.md, "Layers"): it reads rows, never files or processes.
"""

from __future__ import annotations

from abcast.checks.facts import MessageKey
from abcast.checks.properties import (
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
    check_virtual_synchrony,
    codes_for,
    count_by_code,
    validate_guarantees,
)

__all__ = [
    "MessageKey",
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
    "check_virtual_synchrony",
    "codes_for",
    "count_by_code",
    "validate_guarantees",
]
