"""The Spark view checks: VIEW_CONSISTENCY, VIRTUAL_SYNCHRONY, SAME_VIEW_DELIVERY
(docs/checks.md, "Views"), unit for unit what abcast.checks.views counts.

Rules: each check is a pure transform `TraceTables -> DataFrame` of violation rows, one
row per unit of its code, with the counterexample layout of abcast.checks.properties. They
run only for runs claiming `virtual_synchrony`, so the tables the other checks share are
not widened for them. They scale out:

- view rows are few (a handful per node); their windows run per (run, group, node);
- deliveries are judged per (message, view): one hash aggregation of fixed-width values
  (the rows partitioned by message) gives who delivered m in v (a bitmask, as in
  abcast.pipeline.trace_tables) and its first deliverer with position — never a node's
  sequence. Virtual synchrony is then set arithmetic against the "cohorts" (the nodes
  that moved from v to the same v', a small broadcast table). Every later step keeps the
  message partitioning; the positions a counterexample needs beyond the first
  deliverer's are looked up by streaming the same partitioned rows past a hash table of
  the (few) violations.

The rows they read — judged view rows, and judged message rows partitioned by message
with each message's send view — come from abcast.pipeline.membership_tables
(`view_rows`, `view_message_rows`): cached by `materialize_tables(with_views=True)`, else derived on
use. Nothing is collected or cached here.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from abcast.checks.facts import VIEW_ROW_ORDER
from abcast.pipeline.checks import (
    MESSAGE_KEY,
    is_delivery,
    join_on,
    mask_and,
    mask_empty,
    mask_minus,
    mask_ranks,
    msg,
    one_hot,
    violations,
)
from abcast.pipeline.membership_tables import crash_times, view_message_rows, view_rows
from abcast.pipeline.trace_tables import witness_code, witness_index, witness_rank
from abcast.trace.schema import SAME_VIEW_DELIVERY, VIEW_CONSISTENCY, VIRTUAL_SYNCHRONY

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from abcast.pipeline.trace_tables import TraceTables

_VIEW_KEY: Final = ("run_id", "group", "view_id")
_NODE_LANE: Final = ("run_id", "group", "node")


def _pairs(*keys: str) -> list[tuple[str, str]]:
    return [(k, k) for k in keys]


def _views(t: TraceTables) -> DataFrame:
    """The judged view rows (membership_tables.view_rows): materialized, or derived now."""
    return t.views if t.views is not None else view_rows(t.events, crash_times(t.events))


def _view_messages(t: TraceTables) -> DataFrame:
    """The judged message rows in views (membership_tables.view_message_rows):
    materialized, or derived now."""
    if t.view_messages is not None:
        return t.view_messages
    return view_message_rows(t.rows, crash_times(t.events))


def _named(frame: DataFrame, t: TraceTables, rank: str, name: str) -> DataFrame:
    """`frame` with column `name`: the node whose rank in the run is column `rank`."""
    from pyspark.sql import functions as F

    nodes = t.nodes.select("run_id", F.col("rank").alias(f"_{name}_rank"),
                           F.col("node").alias(name))
    return join_on(frame, F.broadcast(nodes), [("run_id", "run_id"), (rank, f"_{name}_rank")])


def _in_group(group: Column) -> Column:
    """" of <group>" for detail text ("" for a null group)."""
    from pyspark.sql import functions as F

    return F.coalesce(F.concat(F.lit(" of "), group), F.lit(""))


# ---------------------------------------------------------------- views


def node_views(t: TraceTables) -> DataFrame:
    """Each node's judged views: (run_id, group, node, rank, view_id, t_ns, index,
    members as a sorted set, `next_view`, `prev_view`, `prev_index` in VIEW_ROW_ORDER,
    as abcast.checks.views reads them), its private start (a first view listing the node
    alone) dropped."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    in_time = Window.partitionBy(*_NODE_LANE).orderBy(*VIEW_ROW_ORDER)
    numbered = _views(t).select("*", F.row_number().over(in_time).alias("_n"))
    private = (F.col("_n") == 1) & F.coalesce(F.col("members") == F.array("node"), F.lit(False))
    kept = numbered.where(~private).drop("_n")
    ranked = join_on(kept, F.broadcast(t.nodes.select("run_id", "node", "rank")),
                     _pairs("run_id", "node"))
    return ranked.select(
        "*", F.lead("view_id").over(in_time).alias("next_view"),
        F.lag("view_id").over(in_time).alias("prev_view"),
        F.lag("index").over(in_time).alias("prev_index"))


def _references(views: DataFrame) -> DataFrame:
    """Per view: its reference set (most holders, then lowest holder, then smallest
    set) as `ref_members`, `ref_holders`, `ref_node` (its lowest holder), and `_sets`
    (how many member sets its rows list)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    listed = views.where(F.col("members").isNotNull())
    per_set = listed.groupBy(*_VIEW_KEY, "members").agg(
        F.countDistinct("node").alias("holders"),
        F.min(F.struct("rank", "node")).alias("low"))
    best = Window.partitionBy(*_VIEW_KEY).orderBy(
        F.col("holders").desc(), F.col("low.rank"), F.col("members"))
    return (per_set.select("*", F.row_number().over(best).alias("_pick"),
                           F.count("*").over(Window.partitionBy(*_VIEW_KEY)).alias("_sets"))
            .where(F.col("_pick") == 1)
            .select(*_VIEW_KEY, "_sets", F.col("members").alias("ref_members"),
                    F.col("holders").alias("ref_holders"), F.col("low.node").alias("ref_node")))


def _missed_merges(t: TraceTables, views: DataFrame, references: DataFrame) -> DataFrame:
    """One row per (node, group, merge view) — a view nodes moved into from two or more
    different views — whose reference set lists the node, which has no crash row and
    never installs the view."""
    from pyspark.sql import functions as F

    moved = views.where(F.col("prev_view").isNotNull() & (F.col("prev_view") != F.col("view_id")))
    merges = (moved.groupBy(*_VIEW_KEY).agg(F.countDistinct("prev_view").alias("_sources"))
              .where(F.col("_sources") > 1).select(*_VIEW_KEY))
    listed = join_on(references, merges, _pairs(*_VIEW_KEY), "left_semi").select(
        *_VIEW_KEY, "ref_members", "ref_holders", "ref_node",
        F.explode("ref_members").alias("node"))
    installed = views.select(*_VIEW_KEY, "node").distinct()
    missed = join_on(listed, installed, _pairs(*_VIEW_KEY, "node"), "left_anti")
    crashed = crash_times(t.events).select("run_id", "node")
    missed = join_on(missed, crashed, _pairs("run_id", "node"), "left_anti")
    return violations(
        missed, VIEW_CONSISTENCY, F.array("node", "ref_node"),
        F.array().cast("array<string>"), F.array().cast("array<bigint>"),
        F.format_string("merge view %d%s lists %s, which never installed it (installed by "
                        "%s and %d more as [%s])", F.col("view_id"), _in_group(F.col("group")),
                        F.col("node"), F.col("ref_node"), F.col("ref_holders") - 1,
                        F.array_join(F.col("ref_members"), ",")))


def view_consistency(t: TraceTables) -> DataFrame:
    """VIEW_CONSISTENCY: one row per (node, group, view) whose member set differs from the
    view's reference set (most holders, then lowest holder, then smallest set), one per
    view row whose view_id does not rise above the node's previous one, and one per
    member of a merge view's reference set without a crash row that never installs it."""
    from pyspark.sql import functions as F

    views = node_views(t)
    listed = views.where(F.col("members").isNotNull())
    references = _references(views)
    reference = references.where(F.col("_sets") > 1).drop("_sets")
    compared = join_on(listed, F.broadcast(reference), _pairs(*_VIEW_KEY),
                       null_safe=("group",))
    # each deviant's first deviating row in its views (VIEW_ROW_ORDER)
    deviants = (compared.where(F.col("members") != F.col("ref_members"))
                .groupBy(*_VIEW_KEY, "node", "ref_members", "ref_holders", "ref_node")
                .agg(F.min_by(F.struct("index", "members"), F.struct(*VIEW_ROW_ORDER))
                     .alias("first")))
    membership = violations(
        deviants, VIEW_CONSISTENCY, F.array("node", "ref_node"),
        F.array().cast("array<string>"), F.array(F.col("first.index")),
        F.format_string("%s installed view %d%s as [%s]; %s and %d more installed it as "
                        "[%s]", F.col("node"), F.col("view_id"), _in_group(F.col("group")),
                        F.array_join(F.col("first.members"), ","), F.col("ref_node"),
                        F.col("ref_holders") - 1, F.array_join(F.col("ref_members"), ",")))
    fell = views.where(F.col("view_id") <= F.col("prev_view"))
    order = violations(
        fell, VIEW_CONSISTENCY, F.array("node"), F.array().cast("array<string>"),
        F.array("prev_index", "index"),
        F.format_string("%s installed view %d%s then view %d: view ids must strictly "
                        "increase", F.col("node"), F.col("prev_view"),
                        _in_group(F.col("group")), F.col("view_id")))
    return membership.unionByName(order).unionByName(_missed_merges(t, views, references))


# ---------------------------------------------------------------- deliveries per view


def per_view_deliveries(t: TraceTables) -> DataFrame:
    """One row per (message, view_id) with judged deliveries or an own send in it:
    `delivered` (bitmask of the nodes that delivered it there), `low` (the first
    deliverer in node order and its first position there, packed: tables.witness_code),
    `send_view` (the lowest view its origin's send rows name). Partitioned by message;
    only fixed-width aggregates, so it is one hash aggregation."""
    from pyspark.sql import functions as F

    delivery = is_delivery()
    words = [F.bit_or(F.when(delivery, w)).alias(f"d{i}")
             for i, w in enumerate(one_hot(F.col("rank"), t.words))]
    per_view = _view_messages(t).groupBy(*MESSAGE_KEY, "view_id").agg(
        *words,
        F.min(F.when(delivery, witness_code(F.col("rank"), F.col("index")))).alias("low"),
        F.min("send_view").alias("send_view"))
    return per_view.select(
        *MESSAGE_KEY, "view_id", "low", "send_view",
        F.array(*[F.coalesce(F.col(f"d{i}"), F.lit(0).cast("bigint"))
                  for i in range(t.words)]).alias("delivered"))


def _first_positions(t: TraceTables, wanted: DataFrame) -> DataFrame:
    """For each (message, view_id, rank) of `wanted` (few: counterexamples only), that
    node's first position of the message in that view, as `index`. The message rows are
    streamed past a hash table of `wanted`, both partitioned by message: no sort, no
    new shuffle."""
    from pyspark.sql import functions as F

    keys = (*MESSAGE_KEY, "view_id", "rank")
    dels = _view_messages(t).where(is_delivery()).select(*keys, "index")
    found = join_on(dels, wanted.select(*keys).distinct().hint("shuffle_hash"),
                    _pairs(*keys), null_safe=("group",))
    return found.groupBy(*keys).agg(F.min("index").alias("index"))


def virtual_synchrony(t: TraceTables) -> DataFrame:
    """VIRTUAL_SYNCHRONY: one row per (q, group, v, m) where q and another node p moved
    from v to the same next view, p delivered m in v and q did not."""
    from pyspark.sql import functions as F

    steps = node_views(t).where(F.col("next_view").isNotNull()
                                & (F.col("next_view") != F.col("view_id")))
    cohort_words = [F.bit_or(w).alias(f"c{i}") for i, w in enumerate(one_hot(F.col("rank"),
                                                                             t.words))]
    cohorts = steps.groupBy(*_VIEW_KEY, "next_view").agg(*cohort_words).select(
        *_VIEW_KEY, "next_view",
        F.array(*[F.col(f"c{i}") for i in range(t.words)]).alias("cohort"))
    per_view = per_view_deliveries(t).where(F.col("low").isNotNull())
    met = join_on(per_view, F.broadcast(cohorts), _pairs(*_VIEW_KEY), null_safe=("group",))
    both = mask_and(F.col("cohort"), F.col("delivered"))
    missing = mask_minus(F.col("cohort"), F.col("delivered"))
    split = met.where(~mask_empty(both) & ~mask_empty(missing)).select(
        *MESSAGE_KEY, "view_id", "next_view", "low",
        F.element_at(mask_ranks(both), 1).alias("p_rank"),
        F.explode(mask_ranks(missing)).alias("q_rank"))
    best = split.groupBy(*MESSAGE_KEY, "view_id", "q_rank").agg(
        F.min(F.struct("p_rank", "next_view", "low")).alias("w"))
    units = best.select(
        *MESSAGE_KEY, "view_id", "q_rank", F.col("w.p_rank").alias("rank"),
        F.col("w.next_view").alias("next_view"),
        # The first deliverer overall is often the witness: its position is known.
        F.when(witness_rank(F.col("w.low")) == F.col("w.p_rank"),
               witness_index(F.col("w.low"))).alias("known"))
    looked_up = _first_positions(t, units.where(F.col("known").isNull()))
    keys = (*MESSAGE_KEY, "view_id", "rank")
    with_index = join_on(units, looked_up, _pairs(*keys), "left", null_safe=("group",))
    found = _named(_named(with_index.select(
        *MESSAGE_KEY, "view_id", "q_rank", F.col("rank").alias("p_rank"), "next_view",
        F.coalesce(F.col("known"), F.col("index")).alias("p_index")),
        t, "q_rank", "q"), t, "p_rank", "p")
    return violations(
        found, VIRTUAL_SYNCHRONY, F.array("q", "p"), F.array(msg("origin", "seq")),
        F.array("p_index"),
        F.format_string("%s and %s both moved from view %d to view %d%s; %s delivered %s in "
                        "view %d at position %d, %s did not", F.col("q"), F.col("p"),
                        F.col("view_id"), F.col("next_view"), _in_group(F.col("group")),
                        F.col("p"), msg("origin", "seq"), F.col("view_id"),
                        F.col("p_index"), F.col("q")))


def same_view_delivery(t: TraceTables) -> DataFrame:
    """SAME_VIEW_DELIVERY: one row per message delivered in more than one view (split),
    and one per (q, m) where q delivered m in a view older than m's send view (early)."""
    from pyspark.sql import functions as F

    per_view = per_view_deliveries(t).where(F.col("low").isNotNull())
    spread = per_view.groupBy(*MESSAGE_KEY).agg(
        F.count("*").alias("views"), F.min("view_id").alias("lo_view"),
        F.max("view_id").alias("hi_view"), F.min_by("low", "view_id").alias("lo"),
        F.max_by("low", "view_id").alias("hi"))
    split = _named(_named(spread.where(F.col("views") > 1).select(
        *MESSAGE_KEY, "views", "lo_view", "hi_view",
        witness_rank(F.col("lo")).alias("p_rank"), witness_index(F.col("lo")).alias("p_index"),
        witness_rank(F.col("hi")).alias("q_rank"), witness_index(F.col("hi")).alias("q_index")),
        t, "p_rank", "p"), t, "q_rank", "q")
    split_rows = violations(
        split, SAME_VIEW_DELIVERY, F.array("p", "q"), F.array(msg("origin", "seq")),
        F.array("p_index", "q_index"),
        F.format_string("%s was delivered in %d views: by %s in view %d (position %d), by "
                        "%s in view %d (position %d)", msg("origin", "seq"), F.col("views"),
                        F.col("p"), F.col("lo_view"), F.col("p_index"), F.col("q"),
                        F.col("hi_view"), F.col("q_index")))
    older = per_view.where(F.col("view_id") < F.col("send_view")).select(
        *MESSAGE_KEY, "view_id", "send_view",
        F.explode(mask_ranks(F.col("delivered"))).alias("rank"))
    keys = (*MESSAGE_KEY, "view_id", "rank")
    positioned = join_on(older, _first_positions(t, older), _pairs(*keys),
                         null_safe=("group",))
    early = positioned.groupBy(*MESSAGE_KEY, "rank").agg(
        F.min(F.struct("index", "view_id", "send_view")).alias("e"))
    early_rows = violations(
        _named(early, t, "rank", "q"), SAME_VIEW_DELIVERY, F.array("q", "origin"),
        F.array(msg("origin", "seq")), F.array(F.col("e.index")),
        F.format_string("%s delivered %s in view %d at position %d; %s sent it in view %d",
                        F.col("q"), msg("origin", "seq"), F.col("e.view_id"),
                        F.col("e.index"), F.col("origin"), F.col("e.send_view")))
    return split_rows.unionByName(early_rows)
