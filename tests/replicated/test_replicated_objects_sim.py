"""Named replicated objects in the simulator: two objects in one group, created by racing
members and written by three of them, end equal on every member — a joiner included —
each with its own state; a name is created once, and every other create of it is refused
at the same point of the order everywhere; a planted divergence is caught."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from abcast.ids import NodeId
from abcast.replicated import Account, ObjectExistsError
from abcast.replicated.directory import Directory, encode_call, encode_create
from abcast.replicated.replica import Replica
from abcast.replicated.sim import ReplicaRun, simulate_replicas

NAMES = ("alice", "bob")
#: three writers; n1, the sequencer, only holds copies (its own writes would execute at
#: once, so it would issue nearly all of them)
WRITERS = ("n2", "n3", "n4")


def deposit(name: str, amount: int) -> bytes:
    return encode_call(name, Replica(Account()).invocation("deposit", (amount,)))


class Workload:
    """Each writer first tries to create both objects (they race: one create of each
    name wins, the others are refused), then deposits to a random one of them; what each
    node issued is kept, in order, to match against its outcomes."""

    def __init__(self) -> None:
        self.issued: dict[NodeId, list[tuple[str, str, int]]] = {}

    def __call__(self, rng: random.Random, node: NodeId, directory: Directory) -> bytes:
        mine = self.issued.setdefault(node, [])
        for name in NAMES:
            if not any(kind == "create" and n == name for kind, n, _ in mine):
                mine.append(("create", name, 0))
                return encode_create(name, Account, (), {})
        name = rng.choice(NAMES)
        amount = rng.randint(1, 9)
        mine.append(("deposit", name, amount))
        return deposit(name, amount)


def run(ordering: str, seed: int, faults: str) -> tuple[ReplicaRun, Workload]:
    work = Workload()
    result = simulate_replicas(
        Account, lambda *_: ("get", ()), ordering=ordering, nodes=4, operations=90,
        seed=seed, faults=faults, writers=WRITERS, core=Directory, invoke=work)
    return result, work


@pytest.mark.parametrize(("ordering", "faults"), [
    ("sequencer", "drop=0.05,delay=1-30ms,join=n5@40ms"),
    ("matrix", "drop=0.05,delay=1-30ms,join=n5@40ms"),
    ("skeen", "drop=0.05,dup=0.02"),
])
@pytest.mark.parametrize("seed", [1, 2])
def test_two_named_objects_end_equal_everywhere(ordering: str, faults: str, seed: int) -> None:
    result, work = run(ordering, seed, faults)
    assert result.violations == [] and result.converged
    directories: dict[NodeId, Directory] = result.objects
    if "join" in faults:
        assert "n5" in directories  # the joiner holds both objects, from its snapshot
    # Each name was created exactly once; every other create of it was refused; each
    # object's balance is the deposits its callers were told executed on it.
    created: Counter[str] = Counter()
    expected = dict.fromkeys(NAMES, 0)
    for node, issued in work.issued.items():
        outcomes = result.outcomes[node]
        assert len(outcomes) == len(issued)
        for (kind, name, amount), outcome in zip(issued, outcomes, strict=True):
            if kind == "create":
                assert outcome.error is None or isinstance(outcome.error, ObjectExistsError)
                created[name] += outcome.error is None
            elif outcome.error is None:
                expected[name] += amount
    assert created == dict.fromkeys(NAMES, 1)
    for directory in directories.values():
        assert set(directory.names()) == set(NAMES)
        assert {n: directory.replica(n).obj.balance for n in NAMES} == expected
    assert all(expected.values())


def test_a_planted_divergence_of_one_object_shows() -> None:
    result, _ = run("sequencer", 4, "join=n5@30ms")
    directories: dict[NodeId, Directory] = result.objects
    assert len({d.state() for d in directories.values()}) == 1
    directories["n5"].replica("bob").obj.balance += 1  # the joiner's bob misses one
    assert len({d.state() for d in directories.values()}) == 2
    assert directories["n5"].replica("alice").obj.balance == \
        directories["n1"].replica("alice").obj.balance


def test_a_second_create_of_a_name_is_refused_at_the_same_point_everywhere() -> None:
    ops = [("n1", 1, encode_create("alice", Account, (5,), {})),
           ("n2", 1, encode_create("alice", Account, (7,), {})),
           ("n3", 1, deposit("alice", 2))]
    for node in ("n1", "n2", "n3"):
        directory = Directory(node)
        verdicts: dict[NodeId, Any] = {}
        for origin, seq, payload in ops:
            outcome = directory.apply(origin, seq, payload)
            if outcome is not None:
                verdicts[origin] = outcome.error
        assert directory.replica("alice").obj.balance == 7
        expected = ObjectExistsError if node == "n2" else type(None)
        assert type(verdicts[node]) is expected


def test_unknown_classes_and_bad_bytes_are_refused_without_importing_anything() -> None:
    import pickle

    from abcast.errors import RemoteProtocolError
    from abcast.replicated import NoSuchObjectError

    directory = Directory("n1")
    create = pickle.dumps(("abcast.objects", "create", "evil", "os.system", ("id",), {}))
    assert directory.apply("n2", 1, create) is None  # a placeholder, nothing built
    with pytest.raises(NoSuchObjectError, match=r"os\.system"):
        directory.replica("evil")
    outcome = directory.apply("n1", 1, deposit("evil", 3))
    assert outcome is not None and isinstance(outcome.error, NoSuchObjectError)
    with pytest.raises(RemoteProtocolError):
        directory.apply("n2", 2, b"not a pickle")
    with pytest.raises(RemoteProtocolError):
        directory.apply("n2", 3, pickle.dumps(("abcast.objects", "explode", "x")))
    # the snapshot keeps the placeholder and real objects alike
    directory.apply("n2", 4, encode_create("alice", Account, (9,), {}))
    joiner = Directory("n3")
    joiner.load(directory.state())
    assert joiner.names() == ("evil", "alice") and joiner.state() == directory.state()
    assert joiner.replica("alice").obj.balance == 9
