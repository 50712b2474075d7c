"""The public test kit: the in-memory trace checks (re-exported from abcast.checks, their
one home; docs/checks.md), the violation codes, `TraceBuilder` for hand-written traces
and `PacketPool` (abcast.testing.pool) for driving stacks by hand. The transport
conformance suite is imported on its own: `abcast.testing.transport_conformance`
(`check_transport`; its scaffolding in `transport_harness`). Production code
imports abcast.checks, never this package (docs/design.md, "The import contract")."""

from __future__ import annotations

from abcast import checks
from abcast.checks import *  # noqa: F403  (the checks' one home; re-exported whole)
from abcast.testing.builders import TraceBuilder
from abcast.trace.schema import (
    AGREEMENT,
    CAUSAL_ORDER,
    CODES,
    FIFO_ORDER,
    GUARANTEE_CODES,
    INTEGRITY_DUPLICATE,
    INTEGRITY_UNKNOWN,
    LOCAL_ORDER,
    SAME_VIEW_DELIVERY,
    TOTAL_ORDER,
    UNIFORM_AGREEMENT,
    VALIDITY,
    VIEW_CONSISTENCY,
    VIRTUAL_SYNCHRONY,
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
    "SAME_VIEW_DELIVERY",
    "TOTAL_ORDER",
    "UNIFORM_AGREEMENT",
    "VALIDITY",
    "VIEW_CONSISTENCY",
    "VIRTUAL_SYNCHRONY",
    "TraceBuilder",
]
__all__ += checks.__all__
