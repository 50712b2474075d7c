"""The state one Chandra-Toueg instance keeps per round, and the wire form of a batch.

Rules: plain data and conversions, no behaviour: what a coordinator gathers in its round
(estimates, acks, nacks, its proposal), a proposal a node will adopt once it holds the
bodies, and a decided batch waiting to be delivered with the membership before and after
it. Batches travel as lists (`ids`, `remove`, `add`) in `Propose`, `Estimate` and `Decide`.
What it does not know: quorums, timing or the order rounds follow
(abcast.ordering.chandra_toueg).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from abcast.consensus.membership import Batch
from abcast.consensus.messages import Ack, Decide, Estimate, Nack, Propose
from abcast.ids import MsgId, NodeId

#: headers of a consensus instance (they name it: `k`)
INSTANCE_HEADERS = (Propose, Ack, Nack, Estimate, Decide)


def batch_of(ids: list[tuple[str, int]], remove: list[str], add: list[str]) -> Batch:
    return Batch(tuple(MsgId(o, s) for o, s in ids), tuple(remove), tuple(add))


def ids_of(batch: Batch) -> list[tuple[str, int]]:
    return [(m.origin, m.seq) for m in batch.ids]


def propose(k: int, r: int, batch: Batch, stable: int) -> Propose:
    return Propose(k, r, ids_of(batch), list(batch.remove), stable, list(batch.add))


def estimate(k: int, r: int, batch: Batch, ts: int, delivered: int) -> Estimate:
    return Estimate(k, r, ids_of(batch), list(batch.remove), ts, delivered, list(batch.add))


def decide(k: int, batch: Batch) -> Decide:
    return Decide(k, ids_of(batch), list(batch.remove), list(batch.add))


@dataclass(slots=True)
class Coordination:
    """What the coordinator of the current round has gathered."""

    estimates: dict[NodeId, tuple[Batch, int]] = field(default_factory=dict)
    acks: set[NodeId] = field(default_factory=set)
    nacks: set[NodeId] = field(default_factory=set)
    proposal: Batch | None = None


@dataclass(slots=True)
class PendingAdopt:
    """A proposal this node adopts (and acks) once it holds every body in it."""

    round: int
    batch: Batch
    coordinator: NodeId
    fetch_from: NodeId  # who holds the bodies this node lacks


@dataclass(frozen=True, slots=True)
class DecidedBatch:
    """A decided batch waiting for its bodies, and the membership before and after it."""

    k: int
    batch: Batch
    source: NodeId
    before: tuple[NodeId, ...]
    after: tuple[NodeId, ...]


class DecisionLog:
    """Decided batches, kept until stable to answer stragglers, and how far each member
    is known to have delivered (from the `delivered` its acks and estimates carry)."""

    def __init__(self) -> None:
        self._batches: dict[int, Batch] = {}
        self._known: dict[NodeId, int] = {}
        self._collected_upto = 0
        self._retained: dict[NodeId, int] = {}  # removed member -> until when (µs)

    def __bool__(self) -> bool:
        return bool(self._batches)

    def record(self, k: int, batch: Batch) -> None:
        self._batches[k] = batch

    def get(self, k: int) -> Batch | None:
        return self._batches.get(k)

    def note(self, node: NodeId, delivered: int) -> None:
        if delivered > self._known.get(node, 0):
            self._known[node] = delivered

    def start_at(self, k: int) -> None:
        """Nothing up to k concerns this node (a joiner admitted by instance k)."""
        self._collected_upto = k

    def retain(self, removed: NodeId, until: int) -> None:
        """A member was removed: until `until`, keep what it has not delivered (it may
        not have heard of its removal yet, and a leaver must deliver up to it)."""
        self._retained[removed] = until

    def stable(self, members: tuple[NodeId, ...], me: NodeId, delivered: int, now: int) -> int:
        """Every member (and every recently removed one) has delivered 1..stable."""
        for node in [n for n, until in self._retained.items() if until <= now]:
            del self._retained[node]
        known = [delivered if m == me else self._known.get(m, 0)
                 for m in (*members, *self._retained)]
        return min(known, default=0)

    def collect(self, upto: int) -> list[Batch]:
        """Forget the decisions up to `upto`; returns them (their bodies can go too)."""
        out: list[Batch] = []
        while self._collected_upto < upto:
            self._collected_upto += 1
            batch = self._batches.pop(self._collected_upto, None)
            if batch is not None:
                out.append(batch)
        return out
