"""Vocabulary and column helpers shared by the Spark checks (docs/checks.md).

Rules: the codes, which guarantee claims which codes, the one schema every check returns
(run_id, code, nodes, messages, positions, detail; one row = one unit of the code), and the
small Column builders the checks and their tables share: printable message ids, node
order, null-safe joins, the partitioning by message, and node sets as bitmasks. No check
lives here (abcast.pipeline.checks_message, checks_delivery and checks_views hold them)
and nothing here touches data.

Node sets are bitmasks: each node of a run has a `rank` (0, 1, … in node order, n2 before
n10), and a set of nodes is an array<bigint> of `words` 64-bit words, bit `rank % 64` of
word `rank // 64`. They let one hash aggregation per message know exactly which nodes
delivered it, however many copies there were, without collecting a list.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import reduce
from typing import TYPE_CHECKING, Final

from abcast.trace.schema import (
    GUARANTEE_CODES,
    GUARANTEES,
)

if TYPE_CHECKING:
    from pyspark.sql import Column, DataFrame, SparkSession

VIOLATION_DDL: Final = (
    "run_id string, code string, nodes array<string>, messages array<string>, "
    "positions array<bigint>, detail string"
)
VIOLATION_COLUMNS: Final = ("run_id", "code", "nodes", "messages", "positions", "detail")
MESSAGE_KEY: Final = ("run_id", "group", "origin", "seq")
# Tables partitioned by message use these, a subset of the message key: a join on the
# message key with `group` compared null-safe can then reuse the partitioning.
MESSAGE_PARTITIONING: Final = ("run_id", "origin", "seq")
STREAM_KEY: Final = ("run_id", "node", "group", "origin")
WORD_BITS: Final = 64

def codes_for(guarantees: Sequence[str]) -> tuple[str, ...]:
    """The codes a run claiming these guarantees is checked for (unknown names ignored)."""
    return tuple(code for g in GUARANTEES if g in guarantees for code in GUARANTEE_CODES[g])


# ---------------------------------------------------------------- printing


def message_id(group: Column, origin: Column, seq: Column) -> Column:
    """The printable message id "group/origin:seq" ("origin:seq" for a null group)."""
    from pyspark.sql import functions as F

    return F.concat(F.coalesce(F.concat(group, F.lit("/")), F.lit("")), origin, F.lit(":"),
                    seq.cast("string"))


def msg(origin: Column | str, seq: Column | str, group: Column | str = "group") -> Column:
    """`message_id` from column names or columns."""
    from pyspark.sql import functions as F

    def as_col(c: Column | str) -> Column:
        return F.col(c) if isinstance(c, str) else c

    return message_id(as_col(group), as_col(origin), as_col(seq))


def node_order_key(node: Column) -> Column:
    """A sortable key giving abcast.ids node order (n2 before n10), ties by the raw string.

    Mirrors `node_sort_key` part for part: a text run is (0, 0, text), a digit run (1, its
    length without leading zeros, those digits), so digit runs rank after text runs and
    compare as numbers of any length (a cast to a number would stop at 38 digits).
    """
    from pyspark.sql import functions as F

    parts = F.regexp_extract_all(node, F.lit(r"([0-9]+|[^0-9]+)"), 1)

    def run_key(part: Column) -> Column:
        digits = F.regexp_replace(part, r"^0+", "")
        return F.when(part.rlike(r"^[0-9]+$"), F.struct(
            F.lit(1).alias("k"), F.length(digits).alias("n"), digits.alias("s"),
        )).otherwise(F.struct(F.lit(0).alias("k"), F.lit(0).alias("n"), part.alias("s")))

    return F.struct(F.transform(parts, run_key).alias("natural"), node.alias("raw"))


# ---------------------------------------------------------------- frames


def join_on(
    left: DataFrame,
    right: DataFrame,
    pairs: Sequence[tuple[str, str]],
    how: str = "inner",
    *,
    null_safe: Sequence[str] = ("group",),
) -> DataFrame:
    """`left` joined with `right` where each (left, right) pair of named columns is equal.

    Pairs whose left column is named in `null_safe` compare null-safe (a null group is a
    group of its own); the others with plain equality, which keeps the join's inputs'
    hash partitioning usable. The right-hand key columns are dropped; the other columns of
    both sides must have distinct names. Both sides may derive from one frame (keys are
    matched by name, so Spark sees no ambiguous self-join).
    """
    from pyspark.sql import functions as F

    right_keys = {b for _, b in pairs}
    renamed = right.select(*[F.col(f"`{c}`").alias(f"__r_{c}") if c in right_keys
                             else F.col(f"`{c}`") for c in right.columns])

    def equal(a: str, b: str) -> Column:
        if a in null_safe:
            return F.col(f"`{a}`").eqNullSafe(F.col(f"__r_{b}"))
        return F.col(f"`{a}`") == F.col(f"__r_{b}")

    condition = reduce(lambda x, y: x & y, [equal(a, b) for a, b in pairs])
    joined = left.join(renamed, condition, how)
    if how in ("left_semi", "semi", "left_anti", "anti"):
        return joined
    return joined.drop(*[f"__r_{b}" for b in right_keys])


def shuffle_partitions(frame: DataFrame) -> int:
    """The partition count the tables repartition to: an explicit count, which adaptive
    execution leaves alone, so two tables partitioned by the same keys stay co-partitioned
    (joins between them need no shuffle)."""
    return int(frame.sparkSession.conf.get("spark.sql.shuffle.partitions") or "8")


def is_delivery() -> Column:
    """A `deliver` row with a position (deliver rows without index are skipped)."""
    from pyspark.sql import functions as F

    return (F.col("kind") == "deliver") & F.col("index").isNotNull()


def skips(lower: Column, upper: Column) -> Column:
    """Whether `upper` is more than one above `lower` (a seq skipped between them),
    without the subtraction that overflows a bigint for seqs a trace may hold (ANSI mode
    would fail the job): a difference past the bigint range is a skip when upper is the
    higher."""
    from pyspark.sql import functions as F

    return F.coalesce(F.try_subtract(upper, lower) > 1, upper > lower)


def restrict(frame: DataFrame, run_ids: Sequence[str] | None) -> DataFrame:
    """The rows of the named runs (all rows when `run_ids` is None)."""
    from pyspark.sql import functions as F

    return frame if run_ids is None else frame.where(F.col("run_id").isin(*run_ids))


def violations(
    frame: DataFrame,
    code: str,
    nodes: Column,
    messages: Column,
    positions: Column,
    detail: Column,
) -> DataFrame:
    """Violation rows (run_id taken from `frame`) in the one schema every check returns."""
    from pyspark.sql import functions as F

    return frame.select(
        F.col("run_id"),
        F.lit(code).alias("code"),
        nodes.cast("array<string>").alias("nodes"),
        messages.cast("array<string>").alias("messages"),
        positions.cast("array<bigint>").alias("positions"),
        detail.alias("detail"),
    )


def empty_violations(spark: SparkSession) -> DataFrame:
    """No violation rows, in the violation schema."""
    return spark.createDataFrame([], VIOLATION_DDL)


def no_positions() -> Column:
    from pyspark.sql import functions as F

    return F.array().cast("array<bigint>")


# ---------------------------------------------------------------- node sets as bitmasks


def one_hot(rank: Column, words: int) -> list[Column]:
    """The words of the set {rank}, one Column per word."""
    from pyspark.sql import functions as F

    bit = F.call_function("shiftleft", F.lit(1).cast("bigint"), (rank % WORD_BITS).cast("int"))
    word = F.floor(rank / WORD_BITS)
    return [F.when(word == w, bit).otherwise(F.lit(0).cast("bigint")) for w in range(words)]


def as_mask(words: Sequence[Column]) -> Column:
    """array<bigint> from word Columns (a null word, from an empty aggregate, is 0)."""
    from pyspark.sql import functions as F

    return F.array(*[F.coalesce(w, F.lit(0).cast("bigint")) for w in words])


def zero_mask(words: int) -> Column:
    from pyspark.sql import functions as F

    return F.array(*[F.lit(0).cast("bigint") for _ in range(words)])


# Given `words` (the tables' width), these build plain word-by-word expressions that Spark
# compiles, instead of higher-order functions it interprets per row: the ones run over
# every message take it.


def mask_and(a: Column, b: Column, words: int | None = None) -> Column:
    from pyspark.sql import functions as F

    if words is not None:
        return F.array(*[a[w].bitwiseAND(b[w]) for w in range(words)])
    return F.zip_with(a, b, lambda x, y: x.bitwiseAND(y))


def mask_minus(a: Column, b: Column, words: int | None = None) -> Column:
    """a \\ b."""
    from pyspark.sql import functions as F

    if words is not None:
        return F.array(*[a[w].bitwiseAND(F.bitwise_not(b[w])) for w in range(words)])
    return F.zip_with(a, b, lambda x, y: x.bitwiseAND(F.bitwise_not(y)))


def mask_empty(a: Column, words: int | None = None) -> Column:
    from pyspark.sql import functions as F

    if words is not None:
        return reduce(lambda x, y: x & y, [a[w] == 0 for w in range(words)])
    return F.forall(a, lambda x: x == 0)


def mask_has(a: Column, rank: Column) -> Column:
    """Whether node `rank` is in the set."""
    from pyspark.sql import functions as F

    word = F.element_at(a, (F.floor(rank / WORD_BITS) + 1).cast("int"))
    shifted = F.call_function("shiftright", word, (rank % WORD_BITS).cast("int"))
    return shifted.bitwiseAND(F.lit(1)) == 1


def mask_ranks(a: Column) -> Column:
    """array<int>: the ranks in the set, ascending."""
    from pyspark.sql import functions as F

    bits = F.sequence(F.lit(0), F.lit(WORD_BITS - 1))
    return F.flatten(F.transform(a, lambda x, w: F.transform(
        F.filter(bits, lambda b: F.call_function("shiftright", x, b).bitwiseAND(F.lit(1)) == 1),
        lambda b: w * WORD_BITS + b)))
