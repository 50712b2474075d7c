"""`abcast demo certify`: optimistic transaction certification on a replicated key-value
store (the database state machine over optimistic total order).

Rules: five simulated nodes on the five-site WAN model (transport/wan_matrices), ordering
"optimistic"; each node submits transactions (read 2 keys, write 1 or 2) at `rate` per
second. A transaction carries the versions its origin read (its committed store when it
submitted). Every replica (`CertifyingReplica`) runs over its node's delivery stream:

- opt-delivery: execute it tentatively, in opt order, on the tentative store (the
  committed store plus the tentative log);
- final delivery: certify it against the committed store — commit iff no transaction
  ordered before it wrote a key it read since the version it read (else abort) — then, if
  it was the tentative log's head, the guess was right (the work done at opt-delivery
  stands, `saved` = final − opt time); if not, every tentative execution is undone and
  the log's rest is executed again on the new committed store (`undone`).

The outcome depends on the final order only, so every replica ends with the same store
(checked). Prints the counts, or with --json one line; exit 0 when the stores are equal.
The replicas read the simulator's delivery streams in time order: what a delivery
callback would see, deterministically.
"""

from __future__ import annotations

import json
import random
import sys
from dataclasses import dataclass, field
from statistics import mean
from typing import Final

import click

from abcast.cli_params import SEED, Number, count
from abcast.ids import MsgId, NodeId
from abcast.ordering.registry import OrderingOptions
from abcast.ordering.sequencer_state import OptimisticConfig
from abcast.sim import SimConfig, run_simulation
from abcast.sim.network import LinkModel
from abcast.trace.rows import EventRow
from abcast.transport.wan import EXAMPLE_MATRIX, load_matrix, node_links_us

KEYS: Final = 16
NODES: Final = 5

Store = dict[str, tuple[int, int]]  # key → (value, version)


@dataclass(frozen=True, slots=True)
class Txn:
    """Read `reads` (at the versions seen), write `writes` := sum of the reads + 1."""

    mid: MsgId
    reads: tuple[tuple[str, int], ...]  # (key, version read)
    writes: tuple[str, ...]


def make_txn(mid: MsgId, seed: int, committed: Store) -> Txn:
    rng = random.Random(f"{seed}:{mid.origin}:{mid.seq}")
    keys = [f"k{i}" for i in range(KEYS)]
    reads = rng.sample(keys, 2)
    writes = tuple(rng.sample(keys, rng.randint(1, 2)))
    return Txn(mid, tuple((k, committed.get(k, (0, 0))[1]) for k in reads), writes)


def apply(store: Store, txn: Txn) -> bool:
    """Certify `txn` against `store` and apply it if it passes; its verdict."""
    if any(store.get(k, (0, 0))[1] != version for k, version in txn.reads):
        return False
    total = sum(store.get(k, (0, 0))[0] for k, _ in txn.reads) + 1
    for k in txn.writes:
        store[k] = (total, store.get(k, (0, 0))[1] + 1)
    return True


@dataclass(slots=True)
class CertifyingReplica:
    """One node's store: committed, and the tentative log over it (see the rules)."""

    committed: Store = field(default_factory=dict)
    tentative: list[Txn] = field(default_factory=list)
    opt_at: dict[MsgId, int] = field(default_factory=dict)
    executions: int = 0  # tentative executions, re-executions included
    committed_count: int = 0
    aborted: int = 0
    right: int = 0
    wrong: int = 0
    undone: int = 0
    saved_ns: list[int] = field(default_factory=list)

    def opt_deliver(self, txn: Txn, t_ns: int) -> None:
        self.tentative.append(txn)
        self.opt_at[txn.mid] = t_ns
        self.executions += 1  # executed on top of the tentative store, at once

    def tentative_store(self) -> Store:
        store = dict(self.committed)
        for txn in self.tentative:
            apply(store, txn)
        return store

    def final_deliver(self, txn: Txn, t_ns: int) -> None:
        if apply(self.committed, txn):
            self.committed_count += 1
        else:
            self.aborted += 1
        if self.tentative and self.tentative[0].mid == txn.mid:
            self.tentative.pop(0)
            self.right += 1
            self.saved_ns.append(t_ns - self.opt_at.pop(txn.mid))
            return
        # A wrong guess: undo every tentative execution and run the rest again.
        self.wrong += 1
        self.undone += len(self.tentative)
        self.tentative = [t for t in self.tentative if t.mid != txn.mid]
        self.opt_at.pop(txn.mid, None)
        self.executions += len(self.tentative)


@dataclass(frozen=True, slots=True)
class CertifyOutcome:
    transactions: int
    committed: int
    aborted: int
    right_guesses: int
    wrong_guesses: int
    undone: int
    saved_ms: float
    stores: dict[NodeId, str]

    @property
    def equal(self) -> bool:
        return len(set(self.stores.values())) == 1

    def as_json(self) -> dict[str, object]:
        return {"transactions": self.transactions, "committed": self.committed,
                "aborted": self.aborted, "right_guesses": self.right_guesses,
                "wrong_guesses": self.wrong_guesses, "undone": self.undone,
                "saved_ms_mean": round(self.saved_ms, 2), "replicas": len(self.stores),
                "equal": self.equal}


def replay(rows: list[EventRow], seed: int) -> tuple[dict[NodeId, CertifyingReplica], int]:
    """Run a replica per node over the rows, in time order (the send row of a
    transaction fixes its read versions from its origin's committed store)."""
    replicas: dict[NodeId, CertifyingReplica] = {}
    txns: dict[MsgId, Txn] = {}
    for row in sorted(rows, key=lambda r: r.t_ns):
        if row.origin is None or row.seq is None:
            continue
        replica = replicas.setdefault(row.node, CertifyingReplica())
        mid = MsgId(row.origin, row.seq)
        if row.kind == "send":
            txns[mid] = make_txn(mid, seed, replica.committed)
        elif row.kind == "opt_deliver":
            replica.opt_deliver(txns[mid], row.t_ns)
        elif row.kind == "deliver":
            replica.final_deliver(txns[mid], row.t_ns)
    return replicas, len(txns)


def run_certify(transactions: int = 200, rate: float = 20.0, seed: int = 1,
                compensate: bool = True) -> CertifyOutcome:
    ids = [f"n{i}" for i in range(1, NODES + 1)]
    links = tuple((a, b, LinkModel(lo, hi))
                  for a, b, lo, hi in node_links_us(load_matrix(EXAMPLE_MATRIX), ids))
    result = run_simulation(SimConfig(
        "optimistic", nodes=NODES, messages=transactions, seed=seed, rate=rate * NODES,
        links=links, options=OrderingOptions(
            optimistic=OptimisticConfig(compensate=compensate))))
    replicas, count = replay(result.recorder.rows(), seed)
    first = replicas[ids[0]]
    saved = [s for r in replicas.values() for s in r.saved_ns]
    return CertifyOutcome(
        count, first.committed_count, first.aborted,
        sum(r.right for r in replicas.values()), sum(r.wrong for r in replicas.values()),
        sum(r.undone for r in replicas.values()), mean(saved) / 1e6 if saved else 0.0,
        {n: json.dumps(sorted(r.committed.items())) for n, r in replicas.items()})


@click.command("certify")
@click.option("--transactions", default=200, show_default=True, type=count(1),
              help="Transactions over the whole run.")
@click.option("--rate", default=20.0, show_default=True, type=Number(float, low=0.1, what="rate"),
              help="Transactions per node per second.")
@click.option("--seed", default=1, show_default=True, type=SEED,
              help="The simulation's seed.")
@click.option("--plain", is_flag=True, help="No delay compensation (receipt order).")
@click.option("--json", "as_json", is_flag=True, help="One JSON line on stdout.")
def certify(transactions: int, rate: float, seed: int, plain: bool, as_json: bool) -> None:
    """Optimistic transaction certification on a replicated KV store (simulated WAN)."""
    outcome = run_certify(transactions, rate, seed, compensate=not plain)
    if as_json:
        click.echo(json.dumps(outcome.as_json()))
    else:
        for key, value in outcome.as_json().items():
            click.echo(f"{key:>15}: {value}")
    sys.exit(0 if outcome.equal else 1)
