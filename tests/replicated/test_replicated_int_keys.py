"""Int dict keys of any width are plain data, but no more than MAX_SHARED_HASH distinct ones
beyond ±INT_KEY_BOUND of one hash in a value: Python hashes an int n to n mod (2**61 − 1),
so k·(2**61 − 1) for k = 1, 2, … all hash to 0, and a dict of N of them takes N² steps to
fill, on every replica. The issuer refuses such a call (all its arguments together, as
they travel in one pickle), a write leaving such a state is undone alike everywhere, and
ReplicatedDict refuses the entry that would make too many (it counts per hash, so a put
costs the same whatever it holds); 64-bit ids, which never share a hash more than 12 to
one, always pass. The guard's side (a peer's pickle) is tests/property/test_memo_guard."""

from __future__ import annotations

import pickle
import random
from typing import Any

import pytest

from abcast.errors import LocalProtocolError
from abcast.replicated import Outcome, Replica, ReplicatedDict, replicated, write
from abcast.replicated._args import check_plain, decode_invocation
from abcast.replicated._memo_guard import MAX_SHARED_HASH, check_memo
from abcast.replicated.directory import encode_create

P = 2**61 - 1  # the int hash's modulus: k·P all hash to 0
#: every int of 64 bits (signed or unsigned) that hashes to 0 and lies beyond the bound
ALL_64_BIT_OF_HASH_0 = [k * P for k in range(1, 9)] + [-k * P for k in range(1, 5)]


def _colliding(count: int, start: int = 1) -> dict[int, int]:
    return {k * P: k for k in range(start, start + count)}


@replicated
class Bag:
    def __init__(self) -> None:
        self.items: list[Any] = []

    @write
    def add(self, item: Any, other: Any = None) -> int:
        self.items.append(item)
        return len(self.items)

    @write
    def spread(self, count: int) -> None:
        """Stores `count` keys of one hash, 5 to a dict, in fresh dicts."""
        keys = [k * P for k in range(1, count + 1)]
        self.items.extend(dict.fromkeys(keys[i:i + 5]) for i in range(0, count, 5))


@pytest.mark.parametrize("value", [
    {P: 1}, {-P: 1}, {2**8000: 1}, {"n": {3: 0, 2**64 - 1: 1}}, [{"a": 1, 2 * P: 2}],
    dict.fromkeys(ALL_64_BIT_OF_HASH_0), _colliding(MAX_SHARED_HASH),
    [_colliding(8), _colliding(8, start=9), _colliding(16)],  # 16 distinct in all
])
def test_wide_int_keys_pass_up_to_the_bound_of_one_hash(value: Any) -> None:
    replica = Replica(Bag(), "n1")
    payload = replica.invocation("add", (value,))
    assert decode_invocation(payload).args == (value,)
    assert replica.apply("n1", 1, payload) == Outcome(1, 1)
    assert replica.obj.items == [value]


@pytest.mark.parametrize(("args", "where"), [
    ((_colliding(MAX_SHARED_HASH + 1),), "argument 'item'"),
    (([_colliding(9), _colliding(8, start=10)],), "argument 'item'"),
    (({"a": {"b": _colliding(17)}},), "argument 'item'"),
    ((_colliding(9), _colliding(8, start=10)), "the arguments together"),  # one pickle: together
])
def test_more_than_the_bound_of_one_hash_is_refused_before_broadcasting(
        args: tuple[Any, ...], where: str) -> None:
    with pytest.raises(LocalProtocolError, match=rf"Bag.add: {where}: 17 distinct int keys "
                                                 r"share the hash 0, more than 16"):
        Replica(Bag(), "n1").invocation("add", args)


def test_a_hundred_thousand_random_64_bit_keys_pass() -> None:
    rng = random.Random(64)
    value = {rng.getrandbits(64): i for i in range(100_000)}
    value.update({-rng.getrandbits(63): i for i in range(1000)})
    check_plain(value, "v")
    check_plain({"state": value}, "v")
    assert decode_invocation(Replica(Bag(), "n1").invocation("add", (value,))).args[0] == value


def test_a_write_leaving_too_many_of_one_hash_is_undone_alike() -> None:
    replicas = [Replica(Bag(), f"n{i}") for i in (1, 2)]
    ok, too_many = (replicas[0].invocation("spread", (n,)) for n in (16, 17))
    assert [r.apply("n1", 1, ok) for r in replicas] == [Outcome(1, None), None]
    outcome = replicas[0].apply("n1", 2, too_many)
    replicas[1].apply("n1", 2, too_many)
    assert outcome is not None and isinstance(outcome.error, LocalProtocolError)
    assert "Bag.spread was undone" in str(outcome.error)
    assert "17 distinct int keys share the hash 0" in str(outcome.error)
    assert replicas[0].state() == replicas[1].state()
    assert len(replicas[1].obj.items) == 4  # 16 keys, 5 to a dict: the first write's


def _apply_all(replicas: list[Replica[ReplicatedDict]], seq: int, method: str,
               *args: Any) -> Outcome | None:
    payload = replicas[0].invocation(method, args)
    outcomes = [r.apply("n1", seq, payload) for r in replicas]
    assert outcomes[1] is None
    return outcomes[0]


def test_a_replicated_dict_keeps_at_most_the_bound_of_one_hash() -> None:
    """Each put is checked alone ({key: value}), but the state a joiner is handed holds
    them all: the dictionary counts its entries' wide keys per hash, and refuses the one
    that would make 17 of one hash (a key, or a key inside a value) on every replica."""
    replicas: list[Replica[ReplicatedDict]] = [Replica(ReplicatedDict(), f"n{i}")
                                               for i in (1, 2)]
    for k in range(1, 16):
        assert _apply_all(replicas, k, "put", k * P, "v") == Outcome(k, None)
    assert _apply_all(replicas, 16, "put", "nested", {16 * P: 0, 2**64: 1}).error is None
    assert _apply_all(replicas, 17, "put", 3 * P, "again").value == "v"  # the same key
    for seq, (method, args) in enumerate([
            ("put", (17 * P, "v")), ("put_if_absent", (17 * P, "v")),
            ("put", ("other", [{17 * P: 0}]))], 18):
        outcome = _apply_all(replicas, seq, method, *args)
        assert outcome is not None and isinstance(outcome.error, LocalProtocolError)
        assert "17 distinct int keys share the hash 0" in str(outcome.error)
    assert len(replicas[1].obj.data) == 16
    # an entry's keys leave the count with it: deleted, or overwritten
    assert _apply_all(replicas, 21, "delete", 1 * P).value is True
    assert _apply_all(replicas, 22, "put", 17 * P, "v").error is None
    assert _apply_all(replicas, 23, "put", "nested", "flat").error is None
    assert _apply_all(replicas, 24, "put", "other", [{18 * P: 0}]).error is None
    joiner = Replica(ReplicatedDict(), "n3")
    joiner.load(replicas[0].state())
    assert vars(joiner.obj) == vars(replicas[0].obj) == vars(replicas[1].obj)
    assert len(joiner.obj._wide_keys[0]) == MAX_SHARED_HASH


def test_a_named_objects_constructor_arguments_are_judged_together() -> None:
    """A create travels as one pickle, positional and keyword arguments in it."""
    create = encode_create("b", Bag, (_colliding(8),), {"other": _colliding(8, start=9)})
    check_memo(create)
    with pytest.raises(LocalProtocolError, match=r"the arguments of Bag\(\) together: 17 "):
        encode_create("b", Bag, (_colliding(9),), {"other": _colliding(8, start=10)})


@pytest.mark.timeout(20)
def test_a_dictionary_state_whose_entries_share_a_container_loads_in_one_walk() -> None:
    """The count is rebuilt from the state in one walk (a per-entry walk would scan a
    container the peer's pickle shares between 50 000 entries 50 000 times)."""
    shared = [[i, {P * 2: i}] for i in range(50_000)]
    state = pickle.dumps(dict.fromkeys(range(50_000), shared), protocol=5)
    joiner = Replica(ReplicatedDict(), "n3")
    joiner.load(b"H" + state)
    assert joiner.obj._wide_keys == {0: {2 * P: 50_000}}
    # the shared container counted once, deleting two entries that hold it takes its
    # count below zero: dropped, not kept as -50 000 (one more key of its hash)
    for key in (0, 1):
        joiner.apply("n1", key + 1, joiner.invocation("delete", (key,)))
    assert joiner.obj._wide_keys == {}
