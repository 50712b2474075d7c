"""Which checks run on which runs, and the verdict: counts per (run, code) and a few
counterexamples each.

Rules: a run is checked only for the guarantees its runs row claims (docs/checks.md); a
check nobody claims is not even planned. `find_violations` is a pure transform over the
shared tables (abcast.pipeline.trace_tables); `summarize` is the one action,
and it brings back counts and at most `examples_per_code` rows per (run, code), never the
violations themselves. Nothing here reads files, caches or prints.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

from abcast.pipeline.checks import codes_for, empty_violations
from abcast.pipeline.checks_delivery import (
    causal_order,
    fifo_order,
    integrity_duplicate,
    integrity_unknown,
    total_order,
)
from abcast.pipeline.checks_message import (
    agreement,
    local_order,
    uniform_agreement,
    validity,
)
from abcast.pipeline.checks_views import (
    same_view_delivery,
    view_consistency,
    virtual_synchrony,
)
from abcast.trace.schema import (
    AGREEMENT,
    CAUSAL_ORDER,
    CODES,
    FIFO_ORDER,
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

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from abcast.pipeline.trace_tables import TraceTables

DEFAULT_EXAMPLES: Final = 5

#: code -> its check
CHECKS: Final[Mapping[str, Callable[[TraceTables], DataFrame]]] = {
    INTEGRITY_DUPLICATE: integrity_duplicate,
    INTEGRITY_UNKNOWN: integrity_unknown,
    VALIDITY: validity,
    AGREEMENT: agreement,
    UNIFORM_AGREEMENT: uniform_agreement,
    FIFO_ORDER: fifo_order,
    CAUSAL_ORDER: causal_order,
    TOTAL_ORDER: total_order,
    LOCAL_ORDER: local_order,
    VIEW_CONSISTENCY: view_consistency,
    VIRTUAL_SYNCHRONY: virtual_synchrony,
    SAME_VIEW_DELIVERY: same_view_delivery,
}


@dataclass(frozen=True, slots=True)
class RunClaim:
    """What one runs.parquet row says about how to check it."""

    run_id: str
    ordering: str
    nodes: int
    guarantees: tuple[str, ...]

    @property
    def codes(self) -> tuple[str, ...]:
        return codes_for(self.guarantees)


@dataclass(frozen=True, slots=True)
class Example:
    """One violation brought back to the driver as a counterexample."""

    run_id: str
    code: str
    nodes: tuple[str, ...]
    messages: tuple[str, ...]
    positions: tuple[int, ...]
    detail: str

    def as_json(self) -> dict[str, object]:
        return {"run": self.run_id, "code": self.code, "nodes": list(self.nodes),
                "messages": list(self.messages), "positions": list(self.positions),
                "detail": self.detail}


@dataclass(frozen=True, slots=True)
class Verdict:
    """Counts per (run_id, code) (only non-zero ones) and the counterexamples."""

    counts: Mapping[tuple[str, str], int]
    examples: tuple[Example, ...]

    def total(self, code: str) -> int:
        return sum(n for (_, c), n in self.counts.items() if c == code)

    def totals(self) -> dict[str, int]:
        """Every code with its count over all runs (0 when none), in CODES order."""
        return {code: self.total(code) for code in CODES}

    def of_run(self, run_id: str) -> dict[str, int]:
        return {c: n for (r, c), n in self.counts.items() if r == run_id}

    @property
    def clean(self) -> bool:
        return not any(self.counts.values())


def runs_by_code(claims: Iterable[RunClaim]) -> dict[str, tuple[str, ...]]:
    """code -> the run ids checked for it (codes no run claims are absent)."""
    out: dict[str, list[str]] = {}
    for claim in claims:
        for code in claim.codes:
            out.setdefault(code, []).append(claim.run_id)
    return {code: tuple(sorted(ids)) for code, ids in out.items()}


def find_violations(
    tables: TraceTables,
    checked: Mapping[str, Sequence[str]] | None = None,
) -> DataFrame:
    """Every violation of every claimed code, each check fed only its claiming runs.

    `checked` maps code -> run ids (see `runs_by_code`); None checks every code on every
    run (tests do that).
    """
    frames: list[DataFrame] = []
    for code in CODES:
        run_ids = None if checked is None else checked.get(code)
        if checked is not None and not run_ids:
            continue
        frames.append(CHECKS[code](tables.only(run_ids)))
    if not frames:
        return empty_violations(tables.events.sparkSession)
    result = frames[0]
    for frame in frames[1:]:
        result = result.unionByName(frame)
    return result


def summarize(violations: DataFrame, examples_per_code: int = DEFAULT_EXAMPLES) -> Verdict:
    """Counts per (run, code) and the first `examples_per_code` violations of each (in
    nodes, messages, positions order, so the choice is stable)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    unit = Window.partitionBy("run_id", "code")
    ordered = unit.orderBy("nodes", "messages", "positions", "detail")
    rows = (violations.select("*", F.row_number().over(ordered).alias("rank"),
                              F.count("*").over(unit).alias("total"))
            .where(F.col("rank") <= max(examples_per_code, 1))
            .orderBy("run_id", "code", "rank").collect())
    counts: dict[tuple[str, str], int] = {}
    examples: list[Example] = []
    for row in rows:
        counts[(row["run_id"], row["code"])] = int(row["total"])
        if row["rank"] <= examples_per_code:
            examples.append(Example(
                run_id=row["run_id"], code=row["code"], nodes=tuple(row["nodes"]),
                messages=tuple(row["messages"]), positions=tuple(row["positions"]),
                detail=row["detail"]))
    order = {code: i for i, code in enumerate(CODES)}
    examples.sort(key=lambda e: (e.run_id, order.get(e.code, len(order))))
    return Verdict(counts=counts, examples=tuple(examples))
