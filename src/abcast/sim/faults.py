"""Fault specifications: the `--faults` text and the plan it parses to.

Rules: parsing only. `drop=P`, `dup=P` (probabilities per packet), `delay=A-Bms` (per
packet, uniform), `crash=NODE@T`, `partition=NODES|NODES@T1-T2` (two-way; `NODES>NODES`
is one-way: the left side's packets to the right side are lost), `hold=NODES|NODES@T1-T2`
(the links between the sides keep their packets from T1 and let them all go, in the order
sent, at T2; `>`: one way), `join=NODE@T`, `leave=NODE@T`; NODES are joined by `+`; times
take `us`, `ms` or `s`. Every mistake is a ConfigError whose message names the bad item,
because users type these by hand.

A partition cuts only the links between the nodes it names: a node on neither side (one
left out of the list, or a joiner) still reaches both sides — a partial partition, which
a group must survive too, but not a clean split. For a clean split write `*` as one side:
every node not on the other side, joiners included (`partition=n1+n2|*@1s-4s`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from abcast.errors import ConfigError
from abcast.ids import NodeId, sorted_nodes
from abcast.sim.network import REST

_TIME = re.compile(r"^(\d+(?:\.\d+)?)(us|ms|s)$")
_UNIT_US = {"us": 1, "ms": 1_000, "s": 1_000_000}
_NODE = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")


@dataclass(frozen=True, slots=True)
class Crash:
    node: NodeId
    at_us: int


@dataclass(frozen=True, slots=True)
class Partition:
    """`left`/`right` name nodes; one of them may be `(REST,)`: everybody else."""

    left: tuple[NodeId, ...]
    right: tuple[NodeId, ...]
    start_us: int
    end_us: int
    one_way: bool = False


@dataclass(frozen=True, slots=True)
class Hold:
    """The links from `left` to `right` (and back, unless one way) hold their packets
    from `start_us` and release them at `end_us`."""

    left: tuple[NodeId, ...]
    right: tuple[NodeId, ...]
    start_us: int
    end_us: int
    one_way: bool = False

    def links(self) -> tuple[tuple[NodeId, NodeId], ...]:
        there = tuple((a, b) for a in self.left for b in self.right)
        return there if self.one_way else there + tuple((b, a) for a, b in there)


@dataclass(frozen=True, slots=True)
class Join:
    node: NodeId
    at_us: int


@dataclass(frozen=True, slots=True)
class Leave:
    node: NodeId
    at_us: int


@dataclass(frozen=True, slots=True)
class FaultPlan:
    drop: float = 0.0
    dup: float = 0.0
    delay_us: tuple[int, int] | None = None
    crashes: tuple[Crash, ...] = ()
    partitions: tuple[Partition, ...] = ()
    joins: tuple[Join, ...] = ()
    leaves: tuple[Leave, ...] = ()
    text: str = ""
    holds: tuple[Hold, ...] = ()

    def kinds(self) -> set[str]:
        """Fault kinds present, for `OrderingSpec.refuse_faults`."""
        present = {
            "drop": self.drop > 0, "dup": self.dup > 0, "delay": self.delay_us is not None,
            "crash": bool(self.crashes), "partition": bool(self.partitions),
            "join": bool(self.joins), "leave": bool(self.leaves), "hold": bool(self.holds),
        }
        return {k for k, on in present.items() if on}

    def nodes_named(self) -> set[NodeId]:
        named = {c.node for c in self.crashes} | {j.node for j in self.joins}
        named |= {lv.node for lv in self.leaves}
        cuts: tuple[Partition | Hold, ...] = (*self.partitions, *self.holds)
        for sides in cuts:
            named |= (set(sides.left) | set(sides.right)) - {REST}
        return named


def parse_time_us(text: str, item: str) -> int:
    m = _TIME.match(text.strip())
    if not m:
        raise ConfigError(f"bad time {text!r} in fault {item!r} (write e.g. 250ms, 2s, 900us)")
    return round(float(m.group(1)) * _UNIT_US[m.group(2)])


def _probability(value: str, item: str) -> float:
    try:
        p = float(value)
    except ValueError:
        raise ConfigError(f"bad probability in fault {item!r}") from None
    if not 0.0 <= p < 1.0:
        raise ConfigError(f"probability in fault {item!r} must be in [0, 1)")
    return p


def _node(value: str, item: str) -> NodeId:
    if not _NODE.match(value):
        raise ConfigError(f"bad node name {value!r} in fault {item!r}")
    return value


def _nodes(value: str, item: str) -> tuple[NodeId, ...]:
    if value == REST:
        return (REST,)
    if REST in value.split("+"):
        raise ConfigError(f"'*' stands alone as a side in fault {item!r}")
    nodes = [_node(v, item) for v in value.split("+")]
    if len(set(nodes)) != len(nodes):
        raise ConfigError(f"a node is named twice in fault {item!r}")
    return sorted_nodes(nodes)


def _at(value: str, item: str) -> tuple[NodeId, int]:
    node, sep, when = value.partition("@")
    if not sep:
        raise ConfigError(f"fault {item!r} needs NODE@TIME, e.g. n2@300ms")
    return _node(node, item), parse_time_us(when, item)


def _delay(value: str, item: str) -> tuple[int, int]:
    m = re.match(r"^(\d+(?:\.\d+)?)-(\d+(?:\.\d+)?)(us|ms|s)$", value)
    if not m:
        raise ConfigError(f"bad delay {value!r} in fault {item!r} (write e.g. 1-30ms)")
    unit = _UNIT_US[m.group(3)]
    lo, hi = round(float(m.group(1)) * unit), round(float(m.group(2)) * unit)
    if lo > hi:
        raise ConfigError(f"delay range {value!r} runs backwards")
    return lo, hi


def _partition(value: str, item: str) -> Partition:
    sides, sep, window = value.partition("@")
    if not sep:
        raise ConfigError(f"fault {item!r} needs SIDES@T1-T2, e.g. n1+n2|n3@100ms-400ms")
    one_way = ">" in sides
    left, mark, right = sides.partition(">" if one_way else "|")
    if not mark or not left or not right:
        raise ConfigError(f"fault {item!r} needs two sides split by '|' (or '>' for one-way)")
    start_text, dash, end_text = window.partition("-")
    if not dash:
        raise ConfigError(f"fault {item!r} needs a time window T1-T2")
    start, end = parse_time_us(start_text, item), parse_time_us(end_text, item)
    if end <= start:
        raise ConfigError(f"partition window in {item!r} must end after it starts")
    lnodes, rnodes = _nodes(left, item), _nodes(right, item)
    if set(lnodes) & set(rnodes):
        raise ConfigError(f"a node is on both sides of {item!r}")
    if lnodes == rnodes == (REST,):
        raise ConfigError(f"only one side of {item!r} may be '*'")
    return Partition(lnodes, rnodes, start, end, one_way)


def _hold(value: str, item: str) -> Hold:
    sides = _partition(value, item)
    if REST in (*sides.left, *sides.right):
        raise ConfigError(f"a hold names the nodes of both sides; '*' is for partitions "
                          f"({item!r})")
    return Hold(sides.left, sides.right, sides.start_us, sides.end_us, sides.one_way)


def parse_faults(text: str | None) -> FaultPlan:
    """Parse a `--faults` string; the empty string means a fault-free run."""
    if not text or not text.strip():
        return FaultPlan()
    drop = dup = 0.0
    delay: tuple[int, int] | None = None
    crashes: list[Crash] = []
    partitions: list[Partition] = []
    joins: list[Join] = []
    leaves: list[Leave] = []
    holds: list[Hold] = []
    for raw in text.split(","):
        item = raw.strip()
        key, eq, value = item.partition("=")
        if not eq or not value:
            raise ConfigError(f"fault {item!r} is not KEY=VALUE")
        match key:
            case "drop":
                drop = _probability(value, item)
            case "dup":
                dup = _probability(value, item)
            case "delay":
                delay = _delay(value, item)
            case "crash":
                crashes.append(Crash(*_at(value, item)))
            case "partition":
                partitions.append(_partition(value, item))
            case "join":
                joins.append(Join(*_at(value, item)))
            case "leave":
                leaves.append(Leave(*_at(value, item)))
            case "hold":
                holds.append(_hold(value, item))
            case _:
                raise ConfigError(f"unknown fault {key!r}; known: drop, dup, delay, crash, "
                                  "partition, hold, join, leave")
    return FaultPlan(
        drop, dup, delay, tuple(crashes), tuple(partitions), tuple(joins), tuple(leaves),
        text.strip(), tuple(holds),
    )
