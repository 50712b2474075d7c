"""The tables of who was in the group when, derived from the events frame by pure transforms.

Rules: nothing here decides a violation, and only `snapshots_possible` runs a job (a tiny
one). abcast.pipeline.trace_tables holds the message and delivery tables and
`materialize_tables`, which computes these beside them when they are needed:

- `crashes`: each crashed node's first crash row; a crashed node is judged only by its
  rows before it (`judged`).
- `views` / `view_messages`: the judged view rows, and the judged deliver and send rows
  that name a view, partitioned by message, each with its message's send view (the view
  checks, abcast.pipeline.checks_views, read them).
- incarnations: a node's `recover` rows begin new ones (`with_incarnation`).
- `snapshots` (only when some node installed a view later than deliveries happened in):
  per (lane, origin) and incarnation of the node (a time interval) the top of the prefix
  it received as state instead of deliveries (`snapshot_tops`; FIFO and causal order read
  it).

Definitions follow docs/checks.md ("Views": judged rows; "Joiners and rejoined nodes").
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from abcast.checks.facts import VIEW_ROW_ORDER
from abcast.pipeline.checks import (
    MESSAGE_KEY,
    MESSAGE_PARTITIONING,
    is_delivery,
    join_on,
    shuffle_partitions,
)

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


# ---------------------------------------------------------------- views


def crash_times(events: DataFrame) -> DataFrame:
    """(run_id, node) -> `crash_t`: t_ns of the node's first crash row (crashed nodes
    only). The view checks judge a crashed node only by its rows before it."""
    from pyspark.sql import functions as F

    return (events.where(F.col("kind") == "crash").groupBy("run_id", "node")
            .agg(F.min("t_ns").alias("crash_t")))


def judged(frame: DataFrame, crashes: DataFrame) -> DataFrame:
    """`frame` (with run_id, node, t_ns) without a crashed node's rows from its first
    crash row on."""
    from pyspark.sql import functions as F

    cut = join_on(frame, F.broadcast(crashes), [("run_id", "run_id"), ("node", "node")],
                  "left")
    return cut.where(F.col("crash_t").isNull() | (F.col("t_ns") < F.col("crash_t"))
                     ).drop("crash_t")


def _view_columns(events: DataFrame) -> DataFrame:
    """The `view` rows with a view_id: run_id, group, node, view_id, t_ns, `index` (0 when
    null) and `members` as a sorted set without null entries (null when the row lists
    none; abcast.checks.facts.member_set): the columns of VIEW_ROW_ORDER as
    abcast.checks.facts.view_row_order reads them."""
    from pyspark.sql import functions as F

    members = (F.col("members") if "members" in events.columns
               else F.lit(None).cast("array<string>"))
    return events.where((F.col("kind") == "view") & F.col("view_id").isNotNull()).select(
        "run_id", "group", "node", "view_id", "t_ns",
        F.coalesce(F.col("index"), F.lit(0)).cast("bigint").alias("index"),
        F.array_sort(F.array_distinct(F.array_compact(members))).alias("members"))


def view_rows(events: DataFrame, crashes: DataFrame) -> DataFrame:
    """The judged `view` rows with a view_id (`_view_columns`); a node's are read in
    VIEW_ROW_ORDER."""
    return judged(_view_columns(events), crashes)


def view_message_rows(rows: DataFrame, crashes: DataFrame) -> DataFrame:
    """The judged `deliver` and `send` rows that name a view (message key, node, rank,
    kind, index, t_ns, view_id), hash-partitioned by message, each with `send_view`: the
    lowest view its message's origin names on a send row (a window within the
    partition)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    picked = rows.where(F.col("view_id").isNotNull()
                        & F.col("kind").isin("deliver", "send")).select(
        *MESSAGE_KEY, "node", "rank", "kind", "index", "t_ns", "view_id")
    partitioned = judged(picked, crashes).repartition(shuffle_partitions(rows),
                                                      *MESSAGE_PARTITIONING)
    own_send = (F.col("kind") == "send") & (F.col("node") == F.col("origin"))
    message = Window.partitionBy(*MESSAGE_KEY)
    return partitioned.select("*", F.min(F.when(own_send, F.col("view_id"))).over(message)
                              .alias("send_view"))


# ---------------------------------------------------------------- joiners' snapshots


def snapshots_possible(context: DataFrame) -> bool:
    """Whether some node may hold a snapshot (a tiny job over the context table): only
    when one of its view rows names a view later than the lowest view its group
    delivered in. A node's admission view is one of its views, so otherwise every
    snapshot is empty (the common static run: everyone in view 1 from the start)."""
    from pyspark.sql import functions as F

    known = F.col("view_id").isNotNull()
    views = (context.where(F.col("is_view") & known).groupBy("run_id", "group", "node")
             .agg(F.max("view_id").alias("top_view")))
    delivered = (context.where(~F.col("is_view") & known & (F.col("deliveries") > 0))
                 .groupBy("run_id", "group").agg(F.min("view_id").alias("low_view")))
    later = join_on(views, delivered, [("run_id", "run_id"), ("group", "group")]).where(
        F.col("top_view") > F.col("low_view"))
    return bool(later.take(1))


#: `since` of a node's first incarnation (the later ones begin at its `recover` rows)
FIRST_INCARNATION: Final = -(2**63)


def with_incarnation(frame: DataFrame, events: DataFrame) -> DataFrame:
    """`frame` (with run_id, node, t_ns) plus `since`: the t_ns of the node's `recover`
    row (in `events`) that began the incarnation holding the row, FIRST_INCARNATION for
    its first (a row at a recover's own t_ns belongs to the incarnation it begins)."""
    from pyspark.sql import functions as F

    recovers = (events.where(F.col("kind") == "recover").groupBy("run_id", "node")
                .agg(F.collect_list("t_ns").alias("recovers")))
    placed = join_on(frame, F.broadcast(recovers), [("run_id", "run_id"), ("node", "node")],
                     "left")
    since = F.coalesce(F.array_max(F.filter(F.col("recovers"), lambda r: r <= F.col("t_ns"))),
                       F.lit(FIRST_INCARNATION).cast("bigint"))
    return placed.select(*frame.columns, since.alias("since"))


def admission_views(events: DataFrame) -> DataFrame:
    """(run_id, group, node, `since`) -> `until`, `admitted`: per incarnation of the node
    with an admission view J (docs/checks.md, "Joiners and rejoined nodes": its first view
    row in t_ns order, not counting a private start, a first row listing the node alone).
    The node's `recover` rows begin incarnations: `since` is the t_ns of the one that
    began it (FIRST_INCARNATION: none), `until` the next entry's `since` (null: none), so
    one without a J keeps the one before it's: a row at t_ns is governed by the entry
    with since <= t_ns < until."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    incarnation = Window.partitionBy("run_id", "group", "node", "since")
    ranked = (with_incarnation(_view_columns(events), events)
              .select("*", F.row_number().over(incarnation.orderBy(*VIEW_ROW_ORDER))
                      .alias("rank")))
    private = ((F.col("rank") == 1) & F.col("members").isNotNull()
               & (F.col("members") == F.array(F.col("node"))))
    admitted = (ranked.where(~F.coalesce(private, F.lit(False)))
                .groupBy("run_id", "group", "node", "since")
                .agg(F.min_by("view_id", "rank").alias("admitted")))
    later = Window.partitionBy("run_id", "group", "node").orderBy("since")
    return admitted.select("run_id", "group", "node", "since",
                           F.lead("since").over(later).alias("until"), "admitted")


def prefix_views(rows: DataFrame) -> DataFrame:
    """(run_id, group, origin, `prefix_view`) -> `top`: o#1..top were each delivered (by
    some node, in some view) and the latest of their lowest delivery views is
    `prefix_view`; so o#1..top were all delivered before view J iff prefix_view < J."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    low = (rows.where(is_delivery() & F.col("view_id").isNotNull() & (F.col("seq") >= 1))
           .groupBy(*MESSAGE_KEY).agg(F.min("view_id").alias("low_view")))
    by_seq = Window.partitionBy("run_id", "group", "origin").orderBy("seq")
    upto = by_seq.rowsBetween(Window.unboundedPreceding, Window.currentRow)
    ranked = low.select(*MESSAGE_KEY, F.row_number().over(by_seq).alias("rank"),
                        F.max("low_view").over(upto).alias("prefix_view"))
    # Seqs are distinct per origin: rank == seq exactly while 1..seq are all there.
    return (ranked.where(F.col("rank") == F.col("seq"))
            .groupBy("run_id", "group", "origin", "prefix_view")
            .agg(F.max("seq").alias("top")))


def snapshot_tops(events: DataFrame, rows: DataFrame, context_rows: DataFrame) -> DataFrame:
    """(lane, origin, `since`) -> `until`, `snap` (> 0): the top of the node's snapshot of
    that stream from `since` until `until` (`admission_views`), the highest s such that
    o#1..s were all delivered in views older than the admission view it then had. No
    row: no snapshot; a row at t_ns is judged with the one where since <= t_ns < until."""
    from pyspark.sql import functions as F

    lanes = context_rows.select("run_id", "group", "node", "lane").distinct()
    admitted = join_on(admission_views(events), lanes, [
        ("run_id", "run_id"), ("group", "group"), ("node", "node")])
    covered = join_on(admitted, prefix_views(rows), [("run_id", "run_id"), ("group", "group")]
                      ).where(F.col("prefix_view") < F.col("admitted"))
    return covered.groupBy("lane", "origin", "since", "until").agg(F.max("top").alias("snap"))
