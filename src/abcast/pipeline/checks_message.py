"""The Spark checks that judge one message at a time: VALIDITY, AGREEMENT,
UNIFORM_AGREEMENT, LOCAL_ORDER (docs/checks.md).

Rules: each check is a pure transform `TraceTables -> DataFrame` of violation rows, one
row per unit of its code, with the counterexample layout of abcast.checks.properties. They
read the per-message table (abcast.pipeline.trace_tables.message_table), whose node sets
are bitmasks, so "who is owed m and never delivered it" is set arithmetic on one row;
only the violations themselves are exploded and named. Nothing is collected or cached here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from abcast.checks.facts import TIME_ORDER
from abcast.pipeline.checks import (
    MESSAGE_KEY,
    join_on,
    mask_and,
    mask_empty,
    mask_has,
    mask_minus,
    mask_ranks,
    msg,
    no_positions,
    violations,
)
from abcast.pipeline.membership_tables import with_incarnation
from abcast.pipeline.trace_tables import witness_index, witness_rank
from abcast.trace.schema import AGREEMENT, LOCAL_ORDER, UNIFORM_AGREEMENT, VALIDITY

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from abcast.pipeline.trace_tables import TraceTables


def validity(t: TraceTables) -> DataFrame:
    """VALIDITY, one row per message sent by a correct origin that never delivered it."""
    from pyspark.sql import functions as F

    found = t.messages.where(F.col("sent") & F.coalesce(F.col("origin_correct"), F.lit(False))
                             & ~F.col("origin_delivered"))
    return violations(
        found, VALIDITY, F.array("origin"), F.array(msg("origin", "seq")), no_positions(),
        F.format_string("correct %s sent %s and never delivered it", F.col("origin"),
                        msg("origin", "seq")))


def _named(frame: DataFrame, t: TraceTables, rank: str, name: str) -> DataFrame:
    """`frame` with column `name`: the node whose rank in the run is column `rank`."""
    from pyspark.sql import functions as F

    nodes = t.nodes.select("run_id", F.col("rank").alias(f"_{name}_rank"),
                           F.col("node").alias(name))
    return join_on(frame, F.broadcast(nodes), [("run_id", "run_id"), (rank, f"_{name}_rank")])


def _agreement(t: TraceTables, *, uniform: bool) -> DataFrame:
    """AGREEMENT or UNIFORM_AGREEMENT: one row per (correct q, m) where q is owed m —
    through a delivery by a correct node (agreement) or, when no correct node delivered
    m, by a crashed one (uniform agreement) — and q never delivers m."""
    from pyspark.sql import functions as F

    delivered, correct, words = F.col("delivered"), F.col("correct_mask"), t.words
    by_correct = mask_and(delivered, correct, words)
    if uniform:
        applies = ~mask_empty(delivered, words) & mask_empty(by_correct, words)
        owed_by, low, one_view = "owed_by_any", "low_any", "one_view_any"
    else:
        applies = ~mask_empty(by_correct, words)
        owed_by, low, one_view = "owed_by_correct", "low_correct", "one_view_correct"
    owed = F.when(F.col("has_views"), mask_and(F.col(owed_by), correct, words)
                  ).otherwise(correct)
    missing = mask_minus(owed, delivered, words)
    # Only a message someone is owed and lacks reaches the (interpreted) rank listing.
    units = (t.messages.where(applies & ~mask_empty(missing, words))
             .select(*MESSAGE_KEY, "has_views", F.col(low).alias("low"),
                     F.col(one_view).alias("one_view"),
                     F.explode(mask_ranks(missing)).alias("q_rank")))
    # With one view (or none) among the sources, the lowest source owes q: the witness.
    simple = units.where(~F.col("has_views") | F.col("one_view")).select(
        *MESSAGE_KEY, "q_rank", witness_rank(F.col("low")).alias("p_rank"),
        witness_index(F.col("low")).alias("p_index"))
    witnessed = simple
    # Otherwise the witness is searched among the message rows (no message delivered in
    # several views, as in a run without view changes: no search, no scan).
    if t.mixed_view_count != 0:
        mixed = units.where(F.col("has_views") & ~F.col("one_view")).select(*MESSAGE_KEY,
                                                                             "q_rank")
        delivered_rows = t.rows.where((F.col("kind") == "deliver") & F.col("index").isNotNull())
        sources = delivered_rows if uniform else delivered_rows.where(F.col("correct"))
        candidates = join_on(
            sources.select(*MESSAGE_KEY, F.col("rank").alias("p_rank"),
                           F.col("index").alias("p_index"), "installed"),
            F.broadcast(mixed), [(k, k) for k in MESSAGE_KEY])
        searched = (candidates.where(mask_has(F.col("installed"), F.col("q_rank")))
                    .groupBy(*MESSAGE_KEY, "q_rank")
                    .agg(F.min(F.struct("p_rank", "p_index")).alias("w"))
                    .select(*MESSAGE_KEY, "q_rank", F.col("w.p_rank").alias("p_rank"),
                            F.col("w.p_index").alias("p_index")))
        witnessed = simple.unionByName(searched)
    found = _named(_named(witnessed, t, "q_rank", "q"), t, "p_rank", "p")
    code = UNIFORM_AGREEMENT if uniform else AGREEMENT
    who = "crashed" if uniform else "correct"
    return violations(
        found, code, F.array("q", "p"), F.array(msg("origin", "seq")), F.array("p_index"),
        F.format_string(f"{who} %s delivered %s at position %d; correct %s is owed it and "
                        "never delivers it", F.col("p"), msg("origin", "seq"),
                        F.col("p_index"), F.col("q")))


def agreement(t: TraceTables) -> DataFrame:
    """AGREEMENT, one row per (correct q owed m by a correct node's delivery, m) that q
    never delivers."""
    return _agreement(t, uniform=False)


def uniform_agreement(t: TraceTables) -> DataFrame:
    """UNIFORM_AGREEMENT, one row per (correct q, m delivered only by crashed nodes) where
    q is owed m and never delivers it."""
    return _agreement(t, uniform=True)


def local_order(t: TraceTables) -> DataFrame:
    """LOCAL_ORDER, one row per (node, m) where, in some incarnation of the node (its
    `recover` rows begin them), the latest opt_deliver row is later (t_ns) than the
    earliest deliver row; reported at its first such incarnation."""
    from pyspark.sql import functions as F

    kind = F.col("kind")
    opt, final = kind == "opt_deliver", kind == "deliver"
    rows = with_incarnation(t.rows.where(opt | final), t.events)
    # the latest opt_deliver and the earliest deliver row in TIME_ORDER, as in memory
    in_time = F.struct(*TIME_ORDER)
    per_incarnation = rows.groupBy(*MESSAGE_KEY, "node", "since").agg(
        F.max(F.when(opt, F.col("t_ns"))).alias("opt_t"),
        F.max_by(F.when(opt, F.col("index")), F.when(opt, in_time)).alias("opt_index"),
        F.min(F.when(final, F.col("t_ns"))).alias("final_t"),
        F.min_by(F.when(final, F.col("index")), F.when(final, in_time))
        .alias("final_index"))
    late = per_incarnation.where(F.col("opt_t") > F.col("final_t"))
    found = late.groupBy(*MESSAGE_KEY, "node").agg(
        F.min_by(F.struct("opt_t", "opt_index", "final_t", "final_index"), F.col("since"))
        .alias("first")).select(*MESSAGE_KEY, "node", "first.*")
    return violations(
        found, LOCAL_ORDER, F.array("node"), F.array(msg("origin", "seq")),
        F.array(F.coalesce(F.col("final_index"), F.lit(0)),
                F.coalesce(F.col("opt_index"), F.lit(0))),
        F.format_string("%s opt-delivered %s at t_ns %d, after its final delivery at "
                        "t_ns %d", F.col("node"), msg("origin", "seq"), F.col("opt_t"),
                        F.col("final_t")))
