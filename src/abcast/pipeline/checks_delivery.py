"""The Spark checks that follow each node's deliveries: INTEGRITY_DUPLICATE,
INTEGRITY_UNKNOWN, FIFO_ORDER, CAUSAL_ORDER, TOTAL_ORDER (docs/checks.md).

Rules: each check is a pure transform `TraceTables -> DataFrame` of violation rows, one
row per unit of its code, with the counterexample layout of abcast.checks.properties. They
scale out: a node's sequence is never collected; order is read with window functions
partitioned by lane (one node in one group; the delivery table is partitioned that way,
so they sort but never shuffle) and with equi-joins. The common, clean case is settled by
the window pass the delivery table already carries; only "irregular" streams (a repeated
or late seq) and nodes that disagree with the reference order get a second, exact look.

TOTAL_ORDER counts adjacent descents for every pair of nodes, which done naively is
quadratic in the group size. Every node is first compared with one reference order (the
positions at the group's reference node, `tables.nonconforming_nodes`): two nodes that
both deliver in an order consistent with it cannot disagree, so only pairs with a node
that does not conform are walked, and those exactly as docs/checks.md says.

A joiner's snapshot (docs/checks.md, "Joiners and rejoined nodes") enters only through
`TraceTables.snapshots`, which exists only when some node can hold a snapshot: without
it FIFO and causal order run the plain plan, join for join. A node holds one snapshot
per incarnation (its `recover` rows begin new ones); a row is judged with the one the
node held at the row's t_ns (`_governing_snapshot`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from abcast.checks.facts import DELIVERY_ORDER
from abcast.pipeline.checks import (
    MESSAGE_KEY,
    STREAM_KEY,
    empty_violations,
    join_on,
    msg,
    no_positions,
    skips,
    violations,
)
from abcast.pipeline.trace_tables import STREAM
from abcast.trace.schema import (
    CAUSAL_ORDER,
    FIFO_ORDER,
    INTEGRITY_DUPLICATE,
    INTEGRITY_UNKNOWN,
    TOTAL_ORDER,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame

    from abcast.pipeline.trace_tables import TraceTables


# `since` is null for what a node did without a snapshot: a key of its own in joins
_NULL_SAFE: Final = ("group", "since")


# ---------------------------------------------------------------- integrity


def integrity_duplicate(t: TraceTables) -> DataFrame:
    """INTEGRITY_DUPLICATE, one row per (node, message) delivered more than once."""
    from pyspark.sql import functions as F

    found = t.irregular_deliveries.where(
        F.col("first") & (F.col("copies") > 1))
    return violations(
        found, INTEGRITY_DUPLICATE, F.array("node"), F.array(msg("origin", "seq")),
        F.col("positions"),
        F.format_string("%s delivered %s %d times", F.col("node"), msg("origin", "seq"),
                        F.col("copies")))


def lost_sends_excused(t: TraceTables, unsent: DataFrame) -> DataFrame:
    """`unsent` deliveries without those whose send row may have died with its origin:
    the origin crashed and the seq is above every seq it wrote a send row for (the
    in-memory `RunFacts.lost_with_crash`). `unsent` is small: a clean trace has none.
    Both facts come from the shared tables (a crash row makes a node not `correct`; a
    message is `sent` when its origin wrote a send row), never from another scan of the
    events."""
    from pyspark.sql import functions as F

    crashed = (t.nodes.where(~F.col("correct")).select("run_id", "node")
               .withColumn("_crashed", F.lit(True)))
    tops = (t.messages.where(F.col("sent"))
            .groupBy("run_id", "group", "origin").agg(F.max("seq").alias("_sent_top")))
    marked = join_on(unsent, F.broadcast(crashed), [("run_id", "run_id"), ("origin", "node")],
                     "left")
    marked = join_on(marked, tops, [("run_id", "run_id"), ("group", "group"),
                                    ("origin", "origin")], "left")
    # the top is never below 0, as in memory (0 when the origin sent nothing above it)
    lost = (F.coalesce(F.col("_crashed"), F.lit(False))
            & (F.col("seq") > F.greatest(F.coalesce(F.col("_sent_top"), F.lit(0)), F.lit(0))))
    return marked.where(~lost).drop("_crashed", "_sent_top")


def integrity_unknown(t: TraceTables) -> DataFrame:
    """INTEGRITY_UNKNOWN, one row per (node, message) delivered but never sent."""
    from pyspark.sql import functions as F

    unsent = lost_sends_excused(t, t.notable.where(~F.coalesce(F.col("sent"), F.lit(False))))
    found = unsent.groupBy(*MESSAGE_KEY, "node").agg(
        F.array_sort(F.collect_list("index")).alias("positions"))
    return violations(
        found, INTEGRITY_UNKNOWN, F.array("node"), F.array(msg("origin", "seq")),
        F.col("positions"),
        F.format_string("%s delivered %s, which %s never sent", F.col("node"),
                        msg("origin", "seq"), F.col("origin")))


# ---------------------------------------------------------------- fifo


def fifo_order(t: TraceTables) -> DataFrame:
    """FIFO_ORDER: per (node, group, origin), each adjacent descent of seq in position
    order (every deliver row counts) and each hole: a gap between two seqs the node
    delivered from that origin, its seqs above the snapshot top, one row however wide
    (named by its lowest and highest missing message, as abcast.checks does)."""
    from pyspark.sql import functions as F

    d = t.notable
    descents = d.where(F.col("prev_seq") > F.col("seq"))
    descent_rows = violations(
        descents, FIFO_ORDER, F.array("node"),
        F.array(msg("origin", "prev_seq"), msg("origin", "seq")),
        F.array("prev_index", "index"),
        F.format_string("%s delivered %s at %d then %s at %d", F.col("node"),
                        msg("origin", "prev_seq"), F.col("prev_index"), msg("origin", "seq"),
                        F.col("index")))
    # A regular stream's seqs only increase: its holes are the gaps between neighbours.
    regular = join_on(d, F.broadcast(t.irregular.select(*STREAM)), [(k, k) for k in STREAM],
                      "left_anti")
    # Each gap ends at the node's first delivery of the seq above it (its t_ns places it
    # in an incarnation).
    regular_gaps = regular.where(skips(F.col("prev_seq"), F.col("seq"))).select(
        *STREAM_KEY, "lane", F.col("prev_seq").alias("below"), "seq", "t_ns")
    irregular_gaps = (t.irregular_deliveries
                      .where(F.col("first") & skips(F.col("below"), F.col("seq")))
                      .select(*STREAM_KEY, "lane", "below", "seq", "t_ns"))
    gaps = regular_gaps.unionByName(irregular_gaps)
    # The hole is the gap above the snapshot's top, which is 0 without one (docs/checks.md).
    # below < seq, so below + 1 and seq - 1 stay within a bigint.
    top: Column = F.lit(0)
    if t.snapshots is not None:  # that incarnation's snapshot fills the gap up to its top
        gaps = _governing_snapshot(gaps, t.snapshots, "origin")
        top = F.coalesce(F.col("snap"), F.lit(0))
    holes = gaps.select(*STREAM_KEY, (F.greatest(F.col("below"), top) + 1).alias("low"),
                        (F.col("seq") - 1).alias("high")).where(F.col("low") <= F.col("high"))
    single = F.col("low") == F.col("high")
    named = F.when(single, F.array(msg("origin", "low"))).otherwise(
        F.array(msg("origin", "low"), msg("origin", "high")))
    hole_rows = violations(
        holes, FIFO_ORDER, F.array("node"), named, no_positions(),
        F.format_string("%s delivered seqs of %s around %s but never %s", F.col("node"),
                        F.col("origin"), F.when(single, F.col("low").cast("string")).otherwise(
                            F.concat_ws("..", "low", "high")), F.array_join(named, "..")))
    return descent_rows.unionByName(hole_rows)


# ---------------------------------------------------------------- causal


def _bounds(deps: Column, origin: Column, seq: Column) -> Column:
    """array<struct<pred, k>>: per predecessor origin the highest causal predecessor seq
    (the deps entries, with the origin's own earlier broadcasts merged into its entry)."""
    from pyspark.sql import functions as F

    entries = F.map_entries(F.coalesce(deps, F.create_map().cast("map<string,bigint>")))
    # try_subtract: seq - 1 is null for the lowest bigint, whose own bound is then 0
    own = F.greatest(F.try_subtract(seq, F.lit(1)),
                     F.coalesce(F.try_element_at(deps, origin), F.lit(0)))
    others = F.filter(entries, lambda e: e["key"] != origin)
    both = F.concat(others, F.array(F.struct(origin.alias("key"), own.alias("value"))))
    return F.transform(both, lambda e: F.struct(e["key"].alias("pred"),
                                                 e["value"].cast("bigint").alias("k")))


def _governing_snapshot(frame: DataFrame, snapshots: DataFrame, origin: str) -> DataFrame:
    """`frame` (with lane, t_ns and an origin column) with `since` and `snap` of the
    snapshot the node held at t_ns for that origin's stream
    (`membership_tables.snapshot_tops`; both null when it held none). One row per row of
    `frame`: a stream's intervals are disjoint."""
    from pyspark.sql import functions as F

    snaps = snapshots.select(*[F.col(c).alias(f"__s_{c}") for c in snapshots.columns])
    t_ns = F.col("t_ns")
    during = ((F.col("lane") == F.col("__s_lane")) & (F.col(origin) == F.col("__s_origin"))
              & (F.col("__s_since") <= t_ns)
              & (F.col("__s_until").isNull() | (t_ns < F.col("__s_until"))))
    return frame.join(F.broadcast(snaps), during, "left").select(
        *[F.col(f"`{c}`") for c in frame.columns], F.col("__s_since").alias("since"),
        F.col("__s_snap").alias("snap"))


def _reach(first: DataFrame, snapshots: DataFrame | None) -> DataFrame:
    """Per first delivery of (node, group, origin o', seq j) above `base`, for each
    snapshot the node held of o' (`since`: null for none, base = the lowest seq of o' the
    node delivers, minus one, and at least 0; else base raised to that snapshot's top): `base`,
    `reach_top` (the highest seq j such that it delivers all of base+1..j; base when it
    misses base+1) and `latest`: struct<index, seq> of the latest-delivered seq among
    base+1..j (only meaningful while j <= reach_top). Nothing here adds past the seqs a
    trace holds: a bigint never overflows, whatever the seqs."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    # base is never below 0 (docs/checks.md): a seq 0 or below is no causal predecessor
    # (try_subtract: null, which greatest skips, for the lowest bigint)
    lowest = F.greatest(F.try_subtract(F.min("seq").over(Window.partitionBy(*STREAM)),
                                       F.lit(1)), F.lit(0))
    plain = first.select(*STREAM, "seq", "index", F.lit(None).cast("bigint").alias("since"),
                         lowest.alias("base")).where(F.col("seq") > F.col("base"))
    source = plain
    if snapshots is not None:  # seqs up to a snapshot's top are not looked at under it
        tops = F.broadcast(snapshots.select(*STREAM, "since", "snap"))
        copies = join_on(plain.drop("since"), tops, [(k, k) for k in STREAM])
        source = plain.unionByName(copies.select(
            *STREAM, "seq", "index", "since", F.greatest("base", "snap").alias("base")
        ).where(F.col("seq") > F.col("base")))
    stream = Window.partitionBy(*STREAM, "since")
    by_seq = stream.orderBy("seq")
    upto = by_seq.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    ranked = source.select(*STREAM, "since", "seq", "index", "base",
                           F.row_number().over(by_seq).alias("rank_in_stream"),
                           F.max(F.struct("index", "seq")).over(upto).alias("latest"))
    contiguous = (F.col("seq") - F.col("base")) == F.col("rank_in_stream")
    return ranked.withColumn(
        "reach_top", F.col("base") + F.count_if(contiguous).over(stream))


def causal_order(t: TraceTables) -> DataFrame:
    """CAUSAL_ORDER: one row per (node q, message m, predecessor origin o') where q's
    first delivery of m comes before q delivered all of o''s messages base+1..k (base
    raised to the top of the snapshot q held of o' then, if any)."""
    from pyspark.sql import functions as F

    first = t.first
    units = (first.select(*STREAM_KEY, "lane", "seq", "index", "t_ns",
                          F.explode(_bounds(F.col("deps"), F.col("origin"), F.col("seq")))
                          .alias("b"))
             .select(*STREAM_KEY, "lane", "seq", "index", "t_ns", F.col("b.pred").alias("pred"),
                     F.col("b.k").alias("k"))
             .where(F.col("k") >= 1))
    reach = _reach(first, t.snapshots)
    # A unit reads the reach kept for the snapshot q held of o' when it delivered m.
    pred_stream = [("lane", "lane"), ("pred", "origin")]
    floor: Column = F.lit(0)  # a stream's base without deliveries above it
    if t.snapshots is not None:
        units = _governing_snapshot(units, t.snapshots, "pred").withColumnRenamed(
            "snap", "floor")
        floor = F.coalesce(F.col("floor"), F.lit(0))
        pred_stream.append(("since", "since"))
    keys = [b for _, b in pred_stream]
    summary = reach.select(*keys, "base", "reach_top").dropDuplicates(keys)
    with_summary = join_on(units, summary, pred_stream, "left", null_safe=_NULL_SAFE).select(
        *units.columns, F.coalesce(F.col("base"), floor).alias("base"),
        F.coalesce(F.col("reach_top"), floor).alias("reach_top"))
    relevant = with_summary.where(F.col("k") > F.col("base")).withColumn(
        "probe", F.least(F.col("k"), F.col("reach_top")))
    probes = reach.select(*keys, F.col("seq").alias("probe_seq"), "latest")
    looked_up = join_on(relevant, probes, [*pred_stream, ("probe", "probe_seq")], "left",
                        null_safe=_NULL_SAFE)
    late = F.coalesce(F.col("latest")["index"] >= F.col("index"), F.lit(False))
    never = F.col("k") > F.col("reach_top")
    found = looked_up.where(never | late)
    # The counterexample predecessor (as abcast.checks.facts.Reach.missing): the one q
    # delivered last when one came too late, else the first it never did.
    # (when it never did, reach_top < k: reach_top + 1 is a bigint)
    pred_seq = F.when(late, F.col("latest")["seq"]).otherwise(
        F.try_add(F.col("reach_top"), F.lit(1)))
    pred_positions = F.when(late, F.array(F.col("index"), F.col("latest")["index"])
                            ).otherwise(F.array(F.col("index")))
    where = F.when(late, F.format_string("only at position %d", F.col("latest")["index"])
                   ).otherwise(F.lit("never"))
    return violations(
        found, CAUSAL_ORDER, F.array("node"),
        F.array(msg("origin", "seq"), msg("pred", pred_seq)), pred_positions,
        F.format_string("%s delivered %s at position %d, which depends on %s#1..%d, but "
                        "delivered %s %s", F.col("node"), msg("origin", "seq"),
                        F.col("index"), F.col("pred"), F.col("k"), msg("pred", pred_seq),
                        where))


# ---------------------------------------------------------------- total order


def total_order(t: TraceTables) -> DataFrame:
    """TOTAL_ORDER: for each pair p < q (node order) in a group, the messages both
    deliver (first deliveries) in p's position order; each adjacent descent of q's
    positions is one row."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    if t.nonconforming_count == 0:  # every node agrees with the reference order
        return empty_violations(t.events.sparkSession)
    first = t.first.select(*MESSAGE_KEY, "node", "rank", "index", "t_ns")
    bad = F.broadcast(t.nonconforming)
    group_pairs = [("run_id", "run_id"), ("group", "group")]
    x = join_on(first, bad, [*group_pairs, ("node", "node")], "left_semi").select(
        *MESSAGE_KEY, F.col("node").alias("x_node"), F.col("rank").alias("x_rank"),
        F.col("index").alias("x_index"), F.col("t_ns").alias("x_t"))
    others = join_on(first, bad, group_pairs, "left_semi").select(
        *MESSAGE_KEY, F.col("node").alias("o_node"), F.col("rank").alias("o_rank"),
        F.col("index").alias("o_index"), F.col("t_ns").alias("o_t"))
    common = join_on(x, others, [(k, k) for k in MESSAGE_KEY]).where(
        F.col("x_node") != F.col("o_node"))
    flagged = join_on(common, bad.withColumn("o_bad", F.lit(True)),
                      [*group_pairs, ("o_node", "node")], "left")
    x_first = F.col("x_rank") < F.col("o_rank")
    # A pair of two nonconforming nodes arrives from both sides: keep one.
    kept = flagged.where(F.col("o_bad").isNull() | x_first)
    # p's position and time under the names DELIVERY_ORDER orders by
    pairs = kept.select(
        *MESSAGE_KEY,
        F.when(x_first, F.col("x_node")).otherwise(F.col("o_node")).alias("p"),
        F.when(x_first, F.col("o_node")).otherwise(F.col("x_node")).alias("q"),
        F.when(x_first, F.col("x_index")).otherwise(F.col("o_index")).alias("index"),
        F.when(x_first, F.col("x_t")).otherwise(F.col("o_t")).alias("t_ns"),
        F.when(x_first, F.col("o_index")).otherwise(F.col("x_index")).alias("q_index"))
    # p's deliveries in DELIVERY_ORDER, as abcast.checks reads them (a repeated index by
    # t_ns, then by message)
    along_p = Window.partitionBy("run_id", "group", "p", "q").orderBy(*DELIVERY_ORDER)
    prev = F.lag(F.struct("origin", "seq", F.col("index").alias("p_index"), "q_index")
                 ).over(along_p)
    descents = (pairs.select("*", prev.alias("prev"))
                .where(F.col("prev")["q_index"] > F.col("q_index")))
    m1 = msg(F.col("prev")["origin"], F.col("prev")["seq"])
    m2 = msg("origin", "seq")
    return violations(
        descents, TOTAL_ORDER, F.array("p", "q"), F.array(m1, m2),
        F.array(F.col("prev")["p_index"], F.col("index"), F.col("prev")["q_index"],
                F.col("q_index")),
        F.format_string("%s delivered %s (%d) before %s (%d); %s delivered them at %d and %d",
                        F.col("p"), m1, F.col("prev")["p_index"], m2, F.col("index"),
                        F.col("q"), F.col("prev")["q_index"], F.col("q_index")))
