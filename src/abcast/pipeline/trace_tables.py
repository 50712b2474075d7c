"""The tables every Spark check reads, derived from the events frame by pure transforms.

Rules: nothing here decides a violation. The layout is chosen so a 10-million-row trace
is shuffled twice, sorted twice, and never collected; only the facts of at most
`BROADCAST_MESSAGES` messages go to every task (a broadcast), which spares the deliver
rows a second shuffle by message:

- `context`: one pass over all events, aggregated to (run, group, node, view_id) — a few
  rows per node. From it: `nodes` (rank in node order, correct?), `row_context` (what a
  row at (run, group, node, view_id) needs: rank, correct, `lane` — a number for
  (run, group, node) —, reference node?, the set of nodes that installed that view) and
  the run's set of correct nodes.
- `rows`: the send/deliver/opt_deliver rows with their row context; `by_message`
  hash-partitions them by message (shuffle 1) for the next two tables.
- `messages`: one hash aggregation per message: sent?, who delivered it (a bitmask:
  exact under duplicates), who is owed it, its position at the reference node; the job
  that caches it also counts the messages and those delivered in several views (none:
  the agreement checks never go back to the message rows).
- `deliveries` (shuffle 2): the deliver rows joined with their message's facts (sent?,
  position at the reference node; broadcast, or both sides partitioned by message),
  partitioned by lane, with one window pass per stream (node, group, origin) in position
  order (previous seq, highest seq so far). Windows key on the lane (an int), not on
  strings, and never re-shuffle.
- `notable`: the few deliveries that break a stream's rising seqs or were never sent;
  `irregular` streams (a repeated or late seq), the only ones whose first deliveries
  need a second look (`irregular_rows`, `first_copies`); `nonconforming` nodes, whose
  order disagrees with the reference node's (sort 2), the only ones total order walks.

Definitions follow docs/checks.md and the choices abcast.checks.properties documents: a
node's deliveries are ordered by abcast.checks.facts.DELIVERY_ORDER, rows
without origin/seq are skipped, and so are deliver rows without index; a node is correct
when it has no crash row; the nodes of a run are those with any row in it; a null group is
a group of its own. `materialize_tables` is the one function that runs jobs; it also
computes the tables of views, crashes and joiners' snapshots when they are needed
(abcast.pipeline.membership_tables), and `TraceTables` bundles them all.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Final

from abcast.checks.facts import DELIVERY_ORDER
from abcast.pipeline.checks import (
    MESSAGE_KEY,
    MESSAGE_PARTITIONING,
    STREAM_KEY,
    WORD_BITS,
    as_mask,
    is_delivery,
    join_on,
    node_order_key,
    one_hot,
    restrict,
    shuffle_partitions,
    skips,
    zero_mask,
)
from abcast.pipeline.membership_tables import (
    crash_times,
    snapshot_tops,
    snapshots_possible,
    view_message_rows,
    view_rows,
)

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pyspark.sql import Column, DataFrame

_MESSAGE_KINDS: Final = ("send", "deliver", "opt_deliver")
#: up to this many messages, their facts (~100 bytes each) are broadcast to the delivery
#: rows instead of both being shuffled by message
BROADCAST_MESSAGES: Final = 2_000_000
#: a stream, (run_id, node, group, origin), as the delivery table keys it
STREAM: Final = ("lane", "origin")


# ---------------------------------------------------------------- context


def context_table(events: DataFrame) -> DataFrame:
    """(run_id, group, node, view_id, is_view) -> `crashed` (0/1: a crash row among them),
    `deliveries` (deliver rows of messages)."""
    from pyspark.sql import functions as F

    kind = F.col("kind")
    is_delivery = ((kind == "deliver") & F.col("index").isNotNull()
                   & F.col("origin").isNotNull() & F.col("seq").isNotNull())
    return events.groupBy(
        "run_id", "group", "node", "view_id", (kind == "view").alias("is_view"),
    ).agg(F.max((kind == "crash").cast("int")).alias("crashed"),
          F.sum(is_delivery.cast("bigint")).alias("deliveries"))


def node_table(context: DataFrame) -> DataFrame:
    """(run_id, node) -> `rank` (0-based, node order within the run), `correct`."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    per_node = context.groupBy("run_id", "node").agg(F.max("crashed").alias("crashed"))
    order = Window.partitionBy("run_id").orderBy(node_order_key(F.col("node")))
    return per_node.select("run_id", "node", (F.row_number().over(order) - 1).alias("rank"),
                           (F.col("crashed") == 0).alias("correct"))


def word_count(nodes: DataFrame) -> int:
    """How many 64-bit words a node set of the largest run needs (a tiny action)."""
    from pyspark.sql import functions as F

    top = nodes.agg(F.max("rank")).first()
    highest = 0 if top is None or top[0] is None else int(top[0])
    return highest // WORD_BITS + 1


def _mask_agg(rank: Column, words: int, when: Column | None = None) -> list[Column]:
    from pyspark.sql import functions as F

    return [F.bit_or(w if when is None else F.when(when, w)) for w in one_hot(rank, words)]


def correct_masks(nodes: DataFrame, words: int) -> DataFrame:
    """(run_id) -> `correct_mask`, the run's correct nodes."""
    from pyspark.sql import functions as F

    parts = _mask_agg(F.col("rank"), words, F.col("correct"))
    return (nodes.groupBy("run_id").agg(*[p.alias(f"w{i}") for i, p in enumerate(parts)])
            .select("run_id", as_mask([F.col(f"w{i}") for i in range(words)])
                    .alias("correct_mask")))


def reference_nodes(context: DataFrame, nodes: DataFrame) -> DataFrame:
    """(run_id, group) -> `ref_rank`: the node with the most deliveries (ties: node order).
    Total order compares every node with it first; any choice is correct, one that
    delivered everything is fastest."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    counts = (context.where(~F.col("is_view")).groupBy("run_id", "group", "node")
              .agg(F.sum("deliveries").alias("deliveries")).where(F.col("deliveries") > 0))
    ranked = join_on(counts, nodes.select("run_id", "node", "rank"),
                     [("run_id", "run_id"), ("node", "node")])
    best = Window.partitionBy("run_id", "group").orderBy(F.col("deliveries").desc(), "rank")
    return (ranked.withColumn("pick", F.row_number().over(best)).where(F.col("pick") == 1)
            .select("run_id", "group", F.col("rank").alias("ref_rank")))


def row_context(context: DataFrame, nodes: DataFrame, words: int) -> DataFrame:
    """(run_id, group, node, view_id) -> `rank`, `correct`, `lane` (a number for
    (run_id, group, node)), `is_ref`, `has_views` (the group has view rows), `installed`
    (nodes with a view row for this view_id)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    views = context.where(F.col("is_view"))
    has_views = views.select("run_id", "group").distinct().withColumn("has_views", F.lit(True))
    installers = join_on(views.where(F.col("view_id").isNotNull()),
                         nodes.select("run_id", "node", "rank"),
                         [("run_id", "run_id"), ("node", "node")])
    parts = _mask_agg(F.col("rank"), words)
    installed = (installers.groupBy("run_id", "group", "view_id")
                 .agg(*[p.alias(f"w{i}") for i, p in enumerate(parts)])
                 .select("run_id", "group", "view_id",
                         as_mask([F.col(f"w{i}") for i in range(words)]).alias("installed")))
    keys = context.select("run_id", "group", "node", "view_id").distinct()
    with_node = join_on(keys, nodes, [("run_id", "run_id"), ("node", "node")])
    with_views = join_on(with_node, has_views, [("run_id", "run_id"), ("group", "group")],
                         "left")
    with_installed = join_on(with_views, installed, [
        ("run_id", "run_id"), ("group", "group"), ("view_id", "view_id")], "left",
        null_safe=("group", "view_id"))
    with_ref = join_on(with_installed, reference_nodes(context, nodes),
                       [("run_id", "run_id"), ("group", "group")], "left")
    # `lane` numbers (run_id, group, node): one node's deliveries in one group. Windows and
    # joins over deliveries key on it (an int) instead of three strings.
    lanes = Window.orderBy("run_id", "group", "node")
    return with_ref.select(
        "run_id", "group", "node", "view_id", "rank", "correct",
        F.dense_rank().over(lanes).alias("lane"),
        F.coalesce(F.col("ref_rank") == F.col("rank"), F.lit(False)).alias("is_ref"),
        F.coalesce(F.col("has_views"), F.lit(False)).alias("has_views"),
        F.coalesce(F.col("installed"), zero_mask(words)).alias("installed"))


# ---------------------------------------------------------------- per message


def message_rows(events: DataFrame, context_rows: DataFrame) -> DataFrame:
    """The send/deliver/opt_deliver rows (with origin and seq) and their row context (a
    broadcast join: the rows stay where the scan put them)."""
    from pyspark.sql import functions as F

    rows = events.where(F.col("kind").isin(*_MESSAGE_KINDS) & F.col("origin").isNotNull()
                        & F.col("seq").isNotNull()).select(
        *MESSAGE_KEY, "node", "kind", "index", "t_ns", "view_id", "deps", "size")
    return join_on(rows, F.broadcast(context_rows), [
        ("run_id", "run_id"), ("group", "group"), ("node", "node"), ("view_id", "view_id")],
        "inner", null_safe=("group", "view_id"))


def by_message(rows: DataFrame) -> DataFrame:
    """`rows` hash-partitioned by message (shuffle 1): the message and delivery tables
    both partition this way, so joining them needs no further shuffle."""
    return rows.repartition(shuffle_partitions(rows), *MESSAGE_PARTITIONING)


def _is_own_send() -> Column:
    from pyspark.sql import functions as F

    return (F.col("kind") == "send") & (F.col("node") == F.col("origin"))


_POSITION_BITS: Final = 40


def witness_code(rank: Column, index: Column) -> Column:
    """(rank, index) packed in one bigint so `min` picks node order, then position (a
    fixed-width value: the aggregation stays a hash aggregation). An index outside
    [0, 2**40) — no writer reaches it, a trace may hold it — is clamped into it: it must
    not carry into the rank (a unit whose witness decodes to a node that does not exist
    is lost); only such a counterexample's position shows the clamped value."""
    from pyspark.sql import functions as F

    top = F.lit((1 << _POSITION_BITS) - 1).cast("bigint")
    clamped = F.least(F.greatest(index, F.lit(0).cast("bigint")), top)
    return F.shiftleft(rank.cast("bigint"), _POSITION_BITS) + clamped


def _witness_code() -> Column:
    from pyspark.sql import functions as F

    return witness_code(F.col("rank"), F.col("index"))


def witness_rank(code: Column) -> Column:
    from pyspark.sql import functions as F

    return F.shiftright(code, _POSITION_BITS).cast("int")


def witness_index(code: Column) -> Column:
    from pyspark.sql import functions as F

    return code.bitwiseAND(F.lit((1 << _POSITION_BITS) - 1).cast("bigint"))


def _one_view(where: Column) -> Column:
    """All rows matching `where` have one and the same non-null view_id (or none match)."""
    from pyspark.sql import functions as F

    views = F.when(where, F.col("view_id"))
    nulls = F.sum((where & F.col("view_id").isNull()).cast("int"))
    return (nulls == 0) & F.coalesce(F.min(views) == F.max(views), F.lit(True))


def message_table(rows: DataFrame, correct: DataFrame, words: int) -> DataFrame:
    """One row per message, from one hash aggregation of `rows`:

    - `sent` (its origin wrote a send row), `send_t_ns`, `size`, `origin_correct`,
      `origin_delivered`, `deliveries` (deliver rows), `opt_deliveries`;
    - `delivered` (nodes with a deliver row), `owed_by_correct` / `owed_by_any` (nodes
      that installed the view of some delivery by a correct node / by any node),
      `correct_mask` (the run's correct nodes), `has_views`;
    - `ref_index`: its first position at the group's reference node;
    - `low_correct` / `low_any`: the lowest (node order, position) delivery by a correct /
      any node (decode with `witness_rank`, `witness_index`), and `one_view_correct` /
      `one_view_any`: whether those deliveries all name one view.
    """
    from pyspark.sql import functions as F

    delivery, send = is_delivery(), _is_own_send()
    installed = [F.col("installed")[i] for i in range(words)]
    aggregates = [
        F.max(send.cast("int")).alias("_sent"),
        F.min(F.when(send, F.col("t_ns"))).alias("send_t_ns"),
        F.max(F.when(send, F.col("size"))).alias("size"),
        F.max(F.when(send, F.col("correct").cast("int"))).alias("_origin_correct"),
        F.max((delivery & (F.col("node") == F.col("origin"))).cast("int"))
        .alias("_origin_delivered"),
        F.sum(delivery.cast("bigint")).alias("deliveries"),
        F.sum((F.col("kind") == "opt_deliver").cast("bigint")).alias("opt_deliveries"),
        F.max(F.col("has_views").cast("int")).alias("_has_views"),
        F.min(F.when(delivery & F.col("is_ref"), F.col("index"))).alias("ref_index"),
        # The lowest (rank, position) deliverer, correct or any, and whether the deliveries
        # were all in one view: then it is the witness the agreement checks cite.
        F.min(F.when(delivery & F.col("correct"), _witness_code())).alias("low_correct"),
        F.min(F.when(delivery, _witness_code())).alias("low_any"),
        _one_view(delivery & F.col("correct")).alias("one_view_correct"),
        _one_view(delivery).alias("one_view_any"),
        *[a.alias(f"d{i}") for i, a in enumerate(_mask_agg(F.col("rank"), words, delivery))],
        *[F.bit_or(F.when(delivery & F.col("correct"), w)).alias(f"c{i}")
          for i, w in enumerate(installed)],
        *[F.bit_or(F.when(delivery, w)).alias(f"a{i}") for i, w in enumerate(installed)],
    ]
    per_message = by_message(rows).groupBy(*MESSAGE_KEY).agg(*aggregates)
    shaped = per_message.select(
        *MESSAGE_KEY,
        (F.col("_sent") == 1).alias("sent"), "send_t_ns", "size",
        (F.col("_origin_correct") == 1).alias("origin_correct"),
        (F.col("_origin_delivered") == 1).alias("origin_delivered"),
        "deliveries", "opt_deliveries", (F.col("_has_views") == 1).alias("has_views"),
        "ref_index", "low_correct", "low_any", "one_view_correct", "one_view_any",
        as_mask([F.col(f"d{i}") for i in range(words)]).alias("delivered"),
        as_mask([F.col(f"c{i}") for i in range(words)]).alias("owed_by_correct"),
        as_mask([F.col(f"a{i}") for i in range(words)]).alias("owed_by_any"))
    return join_on(shaped, F.broadcast(correct), [("run_id", "run_id")], "left").withColumn(
        "correct_mask", F.coalesce(F.col("correct_mask"), zero_mask(words)))


def merged_deps(rows: DataFrame) -> DataFrame:
    """One row per sent message with deps: `deps`, its send rows' maps merged to the
    largest bound per origin (only causal checking needs it; it is the one aggregation
    here that collects, one small map per send row)."""
    from pyspark.sql import functions as F

    sends = by_message(rows.where(_is_own_send() & F.col("deps").isNotNull()))
    collected = sends.groupBy(*MESSAGE_KEY).agg(F.collect_list("deps").alias("maps"))
    empty = F.create_map().cast("map<string,bigint>")
    merged = F.aggregate(F.col("maps"), empty, lambda acc, m: F.map_zip_with(
        acc, m, lambda _k, a, b: F.greatest(a, b)))
    return collected.select(*MESSAGE_KEY, F.when(F.size("maps") == 1, F.col("maps")[0])
                            .otherwise(merged).alias("deps"))


# ---------------------------------------------------------------- per delivery


def delivery_table(
    rows: DataFrame,
    messages: DataFrame,
    deps: DataFrame | None = None,
    *,
    broadcast_facts: bool = False,
) -> DataFrame:
    """One row per deliver row: message key, `node`, `rank`, `lane`, `index`, `t_ns`;
    from its message `sent` and `ref_index` (and `deps` when given); hash-partitioned by
    lane (shuffle 2);
    and from one window over its stream (node, group, origin) in DELIVERY_ORDER
    (abcast.checks.facts: position, ties by t_ns, then message):
    `prev_seq`, `prev_index` (the stream's previous delivery) and `max_before` (highest
    seq delivered earlier in the stream).

    `broadcast_facts` (without `deps`): the messages' facts are few enough to go to
    every task, so the deliver rows join them where the scan put them instead of being
    shuffled by message first."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    delivered = rows.where(is_delivery())
    facts = messages.select(*MESSAGE_KEY, "sent", "ref_index")
    key_pairs = [(k, k) for k in MESSAGE_KEY]
    columns = (*MESSAGE_KEY, "node", "rank", "lane", "index", "t_ns")
    if broadcast_facts and deps is None:
        joined = join_on(delivered.select(*columns), F.broadcast(facts), key_pairs, "left")
    else:
        # Both sides partitioned by message: a hash join, no further shuffle, no sort.
        joined = join_on(by_message(delivered).select(*columns), facts.hint("shuffle_hash"),
                         key_pairs, "left")
        if deps is not None:
            joined = join_on(joined, deps.hint("shuffle_hash"), key_pairs, "left")
    by_lane = joined.repartition(shuffle_partitions(rows), "lane")
    stream = Window.partitionBy(*STREAM).orderBy(*DELIVERY_ORDER)
    before = stream.rowsBetween(Window.unboundedPreceding, -1)
    return by_lane.select(
        "*",
        F.lag("seq").over(stream).alias("prev_seq"),
        F.lag("index").over(stream).alias("prev_index"),
        F.max("seq").over(before).alias("max_before"))


def notable_deliveries(deliveries: DataFrame) -> DataFrame:
    """The few deliveries the integrity and FIFO checks start from: a seq lower than the
    stream's previous one, a gap after it, a seq not above all earlier ones, or a
    message never sent. A clean trace has none, so those checks read this small table
    instead of scanning every delivery."""
    from pyspark.sql import functions as F

    seq, prev = F.col("seq"), F.col("prev_seq")
    return deliveries.where((prev > seq) | skips(prev, seq) | (seq <= F.col("max_before"))
                            | ~F.coalesce(F.col("sent"), F.lit(False)))


def irregular_streams(deliveries: DataFrame) -> DataFrame:
    """(run_id, node, group, origin) of the streams where some delivery's seq is not above
    every seq delivered before it in the stream (a repeat or a late one): the only
    streams whose first deliveries need a second look."""
    from pyspark.sql import functions as F

    return (deliveries.where(F.col("seq") <= F.col("max_before"))
            .select(*STREAM, *STREAM_KEY).distinct())


def irregular_rows(deliveries: DataFrame, irregular: DataFrame) -> DataFrame:
    """The deliveries of irregular streams, each with `first` (the node's first delivery
    of that seq), `copies` (how many times the node delivered it), `positions` (all its
    positions, ascending) and `below` (the next lower seq the node delivered from the
    origin), from a window over the stream in seq order."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    rows = join_on(deliveries, F.broadcast(irregular.select(*STREAM)),
                   [(k, k) for k in STREAM], "left_semi")
    by_seq = Window.partitionBy(*STREAM).orderBy("seq", *DELIVERY_ORDER)
    same_seq = Window.partitionBy(*STREAM, "seq")
    previous = F.lag("seq").over(by_seq)
    first = previous.isNull() | (previous != F.col("seq"))
    flagged = rows.select("*", first.alias("first"), previous.alias("_previous"),
                          F.count("*").over(same_seq).alias("copies"),
                          F.array_sort(F.collect_list("index").over(same_seq))
                          .alias("positions"))
    return flagged.withColumn("below", F.when(F.col("first"), F.col("_previous"))).drop(
        "_previous")


def first_copies(deliveries: DataFrame, irregular: DataFrame) -> DataFrame:
    """The node's first delivery of each message (docs/checks.md positions for total and
    causal order): every row of a regular stream, the flagged ones of irregular streams.
    Taken from the flagged rows themselves, not by matching flags back to deliveries: a
    trace may repeat a row, or two rows may share a node, index and t_ns, and a match on
    those would count such a row twice."""
    from pyspark.sql import functions as F

    regular = join_on(deliveries, F.broadcast(irregular.select(*STREAM)),
                      [(k, k) for k in STREAM], "left_anti")
    firsts = irregular_rows(deliveries, irregular).where(F.col("first"))
    return regular.unionByName(firsts.select(*[F.col(f"`{c}`") for c in deliveries.columns]))


def nonconforming_nodes(first: DataFrame) -> DataFrame:
    """(run_id, group, node) of the nodes whose first deliveries are not in increasing
    `ref_index` order, or that delivered a message the reference node never did. Only
    pairs with such a node can disagree on order (abcast.pipeline.checks_delivery)."""
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    by_position = Window.partitionBy("lane").orderBy(*DELIVERY_ORDER)
    steps = first.select("run_id", "group", "node", "ref_index",
                         F.lag("ref_index").over(by_position).alias("prev_ref"))
    # Two messages at one reference position (a writer that repeated an index) have no
    # reference order between them: a node with both adjacent is walked too.
    return (steps.where(F.col("ref_index").isNull() | (F.col("prev_ref") >= F.col("ref_index")))
            .select("run_id", "group", "node").distinct())


# ---------------------------------------------------------------- the bundle


@dataclass(frozen=True, slots=True)
class TraceTables:
    """Everything the checks read, derived from one events frame by the transforms above
    and in abcast.pipeline.membership_tables, and computed by `materialize_tables`."""

    events: DataFrame
    words: int
    nodes: DataFrame
    rows: DataFrame
    messages: DataFrame
    deliveries: DataFrame
    notable: DataFrame
    irregular: DataFrame
    nonconforming: DataFrame
    #: known counts (None: not computed). A 0 lets a check skip work that would find
    #: nothing: the second look at irregular streams, the pairwise total-order walk.
    irregular_count: int | None = None
    nonconforming_count: int | None = None
    #: messages whose deliveries name more than one view (`one_view_any` false in a
    #: group with views): only those send the agreement checks back to the message rows
    mixed_view_count: int | None = None
    #: the view checks' tables (`view_rows`, `view_message_rows`), when materialized;
    #: None: abcast.pipeline.checks_views derives them on use
    views: DataFrame | None = None
    view_messages: DataFrame | None = None
    #: `snapshot_tops` (lane, origin, since) -> until, snap; None when
    #: `snapshots_possible` says no node can hold one (FIFO and causal order then take
    #: their plain path)
    snapshots: DataFrame | None = None

    @property
    def first(self) -> DataFrame:
        """The first delivery of each message at each node (see `first_copies`)."""
        if self.irregular_count == 0:
            return self.deliveries
        return first_copies(self.deliveries, self.irregular)

    @property
    def irregular_deliveries(self) -> DataFrame:
        """`irregular_rows` of these tables (empty, without a job, when there are none)."""
        source = self.deliveries.limit(0) if self.irregular_count == 0 else self.deliveries
        return irregular_rows(source, self.irregular)

    def only(self, run_ids: Sequence[str] | None) -> TraceTables:
        """The same tables restricted to some runs."""
        if run_ids is None:
            return self
        return replace(
            self, events=restrict(self.events, run_ids), rows=restrict(self.rows, run_ids),
            messages=restrict(self.messages, run_ids),
            deliveries=restrict(self.deliveries, run_ids),
            notable=restrict(self.notable, run_ids), irregular=restrict(self.irregular, run_ids),
            nonconforming=restrict(self.nonconforming, run_ids),
            views=None if self.views is None else restrict(self.views, run_ids),
            view_messages=(None if self.view_messages is None
                           else restrict(self.view_messages, run_ids)))


def materialize_tables(
    events: DataFrame,
    *,
    with_deps: bool = True,
    with_total: bool = True,
    with_views: bool = False,
) -> TraceTables:
    """The tables of one events frame, computed now: the one function here that runs
    jobs. `with_deps=False` leaves the merged deps out of `deliveries` (only the causal
    check reads them); `with_total=False` leaves the total-order pre-pass lazy (for runs
    that do not claim total order it would be wasted). `with_views=True` computes the
    view checks' tables too (cached, like the delivery table); without it they are
    derived lazily, only if a view check is asked for.

    The small tables are checkpointed (their derivations are long chains of tiny
    shuffles that every later plan would otherwise carry and re-analyse); the message
    and delivery tables are cached in Spark's columnar cache (memory, then disk), which
    keeps their partitioning, so the checks neither re-shuffle them nor read more
    columns than they use. Call `release` when done.
    """
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    level = StorageLevel.MEMORY_AND_DISK
    context = context_table(events).localCheckpoint(storageLevel=level)
    nodes = node_table(context).localCheckpoint(storageLevel=level)
    width = word_count(nodes)
    context_rows = row_context(context, nodes, width).localCheckpoint(storageLevel=level)
    correct = correct_masks(nodes, width).localCheckpoint(storageLevel=level)
    rows = message_rows(events, context_rows)
    # Two jobs: the message table (cached), then the delivery table, which joins the
    # message rows (scanned and shuffled again: cheaper than caching them) with it.
    messages = message_table(rows, correct, width).persist(level)
    # The action that fills the cache counts the messages delivered in several views.
    counted = messages.agg(F.count("*"), F.count_if(F.col("has_views")
                                                     & ~F.col("one_view_any"))).first()
    message_count, mixed_view_count = (0, 0) if counted is None else map(int, counted)
    deliveries = delivery_table(rows, messages, merged_deps(rows) if with_deps else None,
                                broadcast_facts=message_count <= BROADCAST_MESSAGES
                                ).persist(level)
    deliveries.count()
    notable = notable_deliveries(deliveries).localCheckpoint(storageLevel=level)
    irregular = irregular_streams(notable).localCheckpoint(storageLevel=level)
    irregular_count = irregular.count()
    # Snapshots exist only where a view changed under deliveries: a trace without view
    # rows, or with one view throughout, pays one tiny look at the (checkpointed)
    # context table, nothing more.
    snapshots = None
    if snapshots_possible(context):
        snapshots = snapshot_tops(events, rows, context_rows).localCheckpoint(
            storageLevel=level)
    tables = TraceTables(events=events, words=width, nodes=nodes, rows=rows,
                         messages=messages, deliveries=deliveries, notable=notable,
                         irregular=irregular, irregular_count=irregular_count,
                         mixed_view_count=mixed_view_count,
                         nonconforming=deliveries.limit(0).select("run_id", "group", "node"),
                         snapshots=snapshots)
    if with_views:
        crashes = crash_times(events).localCheckpoint(storageLevel=level)
        view_messages = view_message_rows(rows, crashes).persist(level)
        view_messages.count()
        tables = replace(tables, views=view_rows(events, crashes).localCheckpoint(
            storageLevel=level), view_messages=view_messages)
    if not with_total:  # left lazy: computed only if total_order is asked for anyway
        return replace(tables, nonconforming=nonconforming_nodes(tables.first))
    # The one sort of every delivery in position order that total order needs, done once.
    nonconforming = nonconforming_nodes(tables.first).localCheckpoint(storageLevel=level)
    return replace(tables, nonconforming=nonconforming,
                   nonconforming_count=nonconforming.count())


def release(tables: TraceTables) -> None:
    """Drop the cached tables of `materialize_tables`."""
    for frame in (tables.deliveries, tables.messages, tables.view_messages):
        if frame is not None:
            frame.unpersist()
