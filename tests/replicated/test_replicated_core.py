"""The sans-IO replica: declarations are checked, calls are refused unless every replica
would execute the very same thing (plain data, right signature), every replica that
applies the same operations in the same order ends in the same state, outcomes go to the
issuing node only, and bytes from a peer can never make a replica import or call
anything."""

from __future__ import annotations

import os
import pickle
import random
from typing import Any

import pytest

from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.replicated import (
    Account,
    Counter,
    Lock,
    Outcome,
    Replica,
    ReplicatedDict,
    read,
    replicated,
    write,
)
from abcast.replicated._args import check_plain
from abcast.replicated.directory import Directory, encode_create


@replicated
class Bag:
    def __init__(self) -> None:
        self.items: list[Any] = []

    @write
    def add(self, item: Any, *, times: int = 1) -> int:
        self.items.extend([item] * times)
        return len(self.items)

    @write
    def fail(self, message: str) -> None:
        self.items.append("half-done")
        raise ValueError(message)

    @read
    def count(self) -> int:
        return len(self.items)


# -- declarations ------------------------------------------------------------------------


def test_a_class_without_writes_is_refused() -> None:
    class Nothing:
        @read
        def get(self) -> int:
            return 0

    with pytest.raises(LocalProtocolError, match="no @write"):
        replicated(Nothing)


def test_a_method_cannot_be_both_read_and_write() -> None:
    with pytest.raises(LocalProtocolError, match="both @write and @read"):

        class Both:
            @read
            @write
            def m(self) -> None: ...


def test_async_and_private_methods_are_refused() -> None:
    with pytest.raises(LocalProtocolError, match="async"):

        class Async:
            @write
            async def m(self) -> None: ...

    class Private:
        @write
        def _m(self) -> None: ...

    with pytest.raises(LocalProtocolError, match="public name"):
        replicated(Private)


def test_an_undecorated_class_has_no_replica() -> None:
    class Plain:
        pass

    with pytest.raises(LocalProtocolError, match="not decorated with @replicated"):
        Replica(Plain())


# -- arguments -----------------------------------------------------------------------------


@pytest.mark.parametrize(("value", "words"), [
    ({3, 1, 2}, ["argument 'item'", "set", "sorted list"]),
    (frozenset({"a"}), ["argument 'item'", "frozenset"]),
    (lambda: 1, ["argument 'item'", "function"]),
    ([1, {"k": object()}], ["argument 'item'[1]['k']", "builtins.object"]),
    ({(1, 2): "v"}, ["argument 'item'", "key of type tuple"]),
    (open, ["argument 'item'", "builtin_function"]),
])
def test_non_deterministic_or_unpicklable_arguments_are_refused(value: Any,
                                                                words: list[str]) -> None:
    replica = Replica(Bag(), "n1")
    with pytest.raises(LocalProtocolError) as caught:
        replica.invocation("add", (value,))
    for word in words:
        assert word in str(caught.value)


def test_a_self_referencing_argument_is_refused() -> None:
    loop: list[Any] = []
    loop.append(loop)
    with pytest.raises(LocalProtocolError, match="nested deeper"):
        Replica(Bag(), "n1").invocation("add", (loop,))


def test_plain_data_passes_and_keeps_its_types() -> None:
    value = {"a": [1, 2.5, (b"x", None, True)], 3: {"nested": ("t",)}}
    check_plain(value, "v")
    first, second = Replica(Bag(), "n1"), Replica(Bag(), "n2")
    payload = first.invocation("add", (value,), {"times": 2})
    for replica in (first, second):
        replica.apply("n1", 1, payload)
    assert first.obj.items == second.obj.items == [value, value]
    assert type(second.obj.items[0]["a"][2]) is tuple


def test_calls_are_checked_against_the_signature_and_kind() -> None:
    replica = Replica(Bag(), "n1")
    with pytest.raises(LocalProtocolError, match=r"Bag.add: .*missing"):
        replica.invocation("add")
    with pytest.raises(LocalProtocolError, match="unexpected keyword"):
        replica.invocation("add", (1,), {"colour": "red"})
    with pytest.raises(LocalProtocolError, match="is a @read"):
        replica.invocation("count")
    with pytest.raises(LocalProtocolError, match="no @write or @read method 'nope'"):
        replica.invocation("nope")
    with pytest.raises(LocalProtocolError, match="is a @write"):
        replica.read("add")


# -- applying operations ---------------------------------------------------------------------


def test_replicas_applying_one_order_agree_and_outcomes_go_to_the_origin() -> None:
    rng = random.Random(5)
    nodes = ("n1", "n2", "n3")
    replicas = {n: Replica(Account(), n) for n in nodes}
    seqs = dict.fromkeys(nodes, 0)
    log: list[tuple[str, int, bytes]] = []
    for _ in range(200):
        origin = rng.choice(nodes)
        method = "deposit" if rng.random() < 0.5 else "withdraw"
        seqs[origin] += 1
        log.append((origin, seqs[origin],
                    replicas[origin].invocation(method, (rng.randint(1, 50),))))
    outcomes: dict[str, list[int]] = {n: [] for n in nodes}
    for origin, seq, payload in log:
        for node, replica in replicas.items():
            outcome = replica.apply(origin, seq, payload)
            if node == origin:
                assert outcome is not None and outcome.seq == seq
                outcomes[node].append(seq)
            else:
                assert outcome is None
    balances = {r.obj.balance for r in replicas.values()}
    assert len(balances) == 1 and balances.pop() >= 0
    assert all(outcomes[n] == list(range(1, seqs[n] + 1)) for n in nodes)


def test_a_write_that_raises_raises_for_its_caller_and_leaves_equal_states() -> None:
    a, b = Replica(Bag(), "n1"), Replica(Bag(), "n2")
    payload = a.invocation("fail", ("no",))
    outcome = a.apply("n1", 1, payload)
    assert b.apply("n1", 1, payload) is None
    assert outcome is not None and isinstance(outcome.error, ValueError)
    with pytest.raises(ValueError, match="no"):
        outcome.result()
    assert a.obj.items == b.obj.items == ["half-done"]
    assert a.caught_up() or a.issued == 0


def test_reads_wait_for_own_writes_only() -> None:
    replica = Replica(Counter(), "n1")
    payload = replica.invocation("add", (2,))
    replica.issued_as(1)
    assert not replica.caught_up()
    replica.apply("n2", 1, Replica(Counter(), "n2").invocation("add", (5,)))
    assert not replica.caught_up()
    replica.apply("n1", 1, payload)
    assert replica.caught_up() and replica.read("get") == 7


@pytest.mark.parametrize("payload", [
    b"", b"garbage", pickle.dumps(os.system), pickle.dumps(("x", "y")),
    pickle.dumps((Bag.__module__ + ".Bag", "add", [1], {})),
])
def test_bytes_that_are_not_an_operation_are_refused(payload: bytes) -> None:
    replica = Replica(Bag(), "n1")
    with pytest.raises(RemoteProtocolError):
        replica.apply("n2", 1, payload)
    assert replica.applied == 0 and replica.obj.items == []


def test_operations_of_another_class_or_method_are_refused() -> None:
    other = Replica(Counter(), "n2").invocation("add", (1,))
    with pytest.raises(RemoteProtocolError, match="operation of"):
        Replica(Bag(), "n1").apply("n2", 1, other)
    forged = pickle.dumps((Replica(Bag()).spec.name, "count", (), {}))
    with pytest.raises(RemoteProtocolError, match="not a @write"):
        Replica(Bag(), "n1").apply("n2", 1, forged)


# -- state transfer ------------------------------------------------------------------------------


def test_state_moves_to_a_fresh_replica() -> None:
    source = Replica(ReplicatedDict(), "n1")
    source.apply("n1", 1, source.invocation("put", ("k", [1, 2])))
    source.apply("n1", 2, source.invocation("put", (3, {"x": b"y"})))
    joiner = Replica(ReplicatedDict(), "n9")
    joiner.load(source.state())
    assert joiner.obj.data == source.obj.data
    assert joiner.state() == source.state()


def test_state_hooks_and_their_absence() -> None:
    @replicated
    class Slotted:
        __slots__ = ("n",)

        def __init__(self) -> None:
            self.n = 0

        @write
        def inc(self) -> None:
            self.n += 1

    with pytest.raises(LocalProtocolError, match="get_state"):
        Replica(Slotted()).state()

    @replicated
    class Hooked:
        def __init__(self) -> None:
            self.n = 0

        @write
        def inc(self) -> None:
            self.n += 1

        def get_state(self) -> bytes:
            return str(self.n).encode()

        def set_state(self, data: bytes) -> None:
            self.n = int(data)

    source = Replica(Hooked(), "n1")
    for seq in (1, 2, 3):
        source.apply("n1", seq, source.invocation("inc"))
    joiner = Replica(Hooked(), "n2")
    joiner.load(source.state())
    assert joiner.obj.n == 3
    with pytest.raises(RemoteProtocolError):
        Replica(Bag()).load(b"Pnot a pickle")


def test_the_lock_battery_queues_in_order() -> None:
    lock = Lock()
    assert lock.request("a") is True
    assert lock.request("b") is False
    assert lock.request("a") is True  # asking again changes nothing
    assert lock.release("a") == "b"
    assert lock.holder() == "b"
    assert lock.release("b") is None


def test_the_package_is_the_decorator_too() -> None:
    import abcast
    import abcast.replicated

    # mypy does not know the package is callable (see abcast.replicated's docstring)
    @abcast.replicated
    class Tally:  # type: ignore[operator]
        def __init__(self) -> None:
            self.n = 0

        @abcast.replicated.write
        def inc(self) -> None:
            self.n += 1

    replica = Replica(Tally(), "n1")
    replica.apply("n1", 1, replica.invocation("inc"))
    assert replica.obj.n == 1


@replicated
class Tagged:
    """Its writes can leave state the state encoder refuses (as a careless class might)."""

    def __init__(self) -> None:
        self.tags: list[str] = []

    @write
    def tag(self, name: str) -> int:
        self.tags.append(name)
        return len(self.tags)

    @write
    def as_set(self) -> None:
        self.tags.append("seen")
        self.unique = set(self.tags)  # a set: not plain data

    @write
    def pair(self, a: int, b: int) -> None:
        self.pairs = {(a, b): True}  # a tuple key: not plain data

    @write
    def nest_then_fail(self) -> None:
        self.tags.append("x")
        self.tags.append({"inner": frozenset()})  # type: ignore[arg-type]
        raise ValueError("the method's own failure")


@pytest.mark.parametrize(("method", "args"), [
    ("put", ((1, 2), "x")), ("put", (1.5, "y")), ("put_if_absent", ((0, "a"), 1))])
def test_a_dict_key_the_state_could_not_hold_fails_its_write_alike(
        method: str, args: tuple[Any, ...]) -> None:
    """The verdict falls where the write executes, the same on every replica: the write
    fails for its caller, the state is unchanged, and a joiner can still be given it."""
    replicas = [Replica(ReplicatedDict(), f"n{i}") for i in (1, 2)]
    ops = [("n1", 1, replicas[0].invocation("put", ("k", [1, 2]))),
           ("n2", 1, replicas[1].invocation(method, args)),
           ("n1", 2, replicas[0].invocation("put", ("j", 3)))]
    outcomes = [[r.apply(*op) for op in ops] for r in replicas]
    failed = outcomes[1][1]
    assert failed is not None and isinstance(failed.error, LocalProtocolError)
    kind = type(args[0]).__name__
    assert f"the new entry has a key of type {kind}; dict keys must be" in str(failed.error)
    assert outcomes[0][1] is None  # n1's copy refused it too, silently (not its write)
    for replica in replicas:
        assert replica.obj.data == {"k": [1, 2], "j": 3}
    joiner = Replica(ReplicatedDict(), "n3")
    joiner.load(replicas[0].state())
    assert joiner.state() == replicas[1].state() == replicas[0].state()


def test_any_write_leaving_a_non_plain_attribute_is_undone() -> None:
    replica = Replica(Tagged(), "n1")
    replica.apply("n1", 1, replica.invocation("tag", ("a",)))
    outcome = replica.apply("n1", 2, replica.invocation("as_set"))
    assert outcome is not None and isinstance(outcome.error, LocalProtocolError)
    assert "Tagged.as_set was undone" in str(outcome.error)
    assert "['unique'] is a set" in str(outcome.error)
    assert vars(replica.obj) == {"tags": ["a"]}
    outcome = replica.apply("n1", 3, replica.invocation("pair", (1, 2)))
    assert outcome is not None and "['pairs'] has a key of type tuple" in str(outcome.error)
    assert vars(replica.obj) == {"tags": ["a"]}
    # a method that raised after storing non-plain data: undone as well, and the state
    # verdict is the caller's outcome
    outcome = replica.apply("n1", 4, replica.invocation("nest_then_fail"))
    assert outcome is not None and "is a frozenset" in str(outcome.error)
    assert vars(replica.obj) == {"tags": ["a"]}
    assert replica.apply("n1", 5, replica.invocation("tag", ("b",))) == Outcome(5, 2)
    replica.state()  # encodes


def test_an_object_whose_state_is_not_plain_is_refused_when_made() -> None:
    obj = Tagged()
    obj.tags = {"a"}  # type: ignore[assignment]
    with pytest.raises(LocalProtocolError, match=r"the state of Tagged\['tags'\] is a set"):
        Replica(obj)

    @replicated
    class Hooked:  # its own hooks: its state is its business, not checked
        def __init__(self) -> None:
            self.seen: set[str] = set()

        @write
        def see(self, name: str) -> None:
            self.seen.add(name)

        def get_state(self) -> bytes:
            return ",".join(sorted(self.seen)).encode()

        def set_state(self, data: bytes) -> None:
            self.seen = set(data.decode().split(",")) if data else set()

    hooked = Replica(Hooked(), "n1")
    assert hooked.apply("n1", 1, hooked.invocation("see", ("x",))) == Outcome(1, None)
    assert hooked.obj.seen == {"x"}


def test_a_named_object_whose_state_is_not_plain_fails_its_create_alike() -> None:
    @replicated
    class Bad:
        def __init__(self) -> None:
            self.seen = {1}

        @write
        def noop(self) -> None:
            pass

    directories = [Directory(f"n{i}") for i in (1, 2)]
    create = encode_create("bad", Bad, (), {})
    outcomes = [d.apply("n1", 1, create) for d in directories]
    assert outcomes[0] is not None and "is a set" in str(outcomes[0].error)
    assert not any(d.has("bad") for d in directories)
    assert directories[0].state() == directories[1].state()


@pytest.mark.parametrize("state", [{(1, 2): "x"}, {"k": {1, 2}}, [("k", 1)]])
def test_a_dict_state_from_a_peer_that_is_not_plain_is_refused(state: object) -> None:
    joiner = Replica(ReplicatedDict(), "n3")
    with pytest.raises(RemoteProtocolError, match="dictionary state"):
        joiner.load(b"H" + pickle.dumps(state, protocol=5))
    assert joiner.obj.data == {}


def _shared_pairs(levels: int) -> tuple[Any, ...]:
    """(x, x) nested `levels` deep: 2**levels paths to the bottom, `levels` tuples."""
    value: tuple[Any, ...] = ()
    for _ in range(levels):
        value = (value, value)
    return value


@pytest.mark.timeout(20)
def test_shared_containers_are_checked_once_not_once_per_path() -> None:
    """An operation of ~200 bytes holding (x, x) nested 40 deep (legal: plain data 40
    levels deep) made the plain-data check walk 2**40 paths: the peer's put(k, v) to a
    ReplicatedDict hung every replica's loop (22 levels took 13 s). Each shared container
    is now checked once: the write runs, on a peer's copy as on the issuer's."""
    value = _shared_pairs(40)
    issuer, peer = Replica(ReplicatedDict(), "n1"), Replica(ReplicatedDict(), "n2")
    payload = issuer.invocation("put", ("k", value))
    assert len(payload) < 300
    for replica in (issuer, peer):
        replica.apply("n1", 1, payload)
    # (== would compare the two copies path by path: pickle them, sharing kept)
    assert pickle.dumps(peer.obj.data["k"]) == pickle.dumps(value)
    check_plain({"state": [value, value]}, "v")


def test_sharing_does_not_hide_nesting_deeper_than_the_bound() -> None:
    """A container checked first where it sits shallow, then reached where it sits deep,
    is still judged by its full depth there: a chain of 100 lists, each also listed at
    the top first (so each is first met at depth 1), is refused; so is a cycle."""
    chain: list[Any] = [[]]
    for _ in range(100):
        chain.append([chain[-1]])
    with pytest.raises(LocalProtocolError, match="nested deeper"):
        check_plain(chain, "v")
    loop: list[Any] = [1]
    loop.append([loop])
    with pytest.raises(LocalProtocolError, match="nested deeper"):
        check_plain({"a": [loop, loop]}, "v")


@pytest.mark.parametrize(("cls", "method", "args", "refused"), [
    (ReplicatedDict, "put", ([1], 1), "the new entry has a key of type list"),
    (ReplicatedDict, "put_if_absent", ([1], 1), "the new entry has a key of type list"),
    (ReplicatedDict, "delete", ([1],), r"delete\(key\) has a key of type list"),
    (ReplicatedDict, "delete", ((1, 2),), r"delete\(key\) has a key of type tuple"),
    (Lock, "request", ((1, 2),), "a lock's owner is a str, not a tuple"),
    (Lock, "release", ([1],), "a lock's owner is a str, not a list"),
])
def test_a_key_or_owner_is_judged_by_its_type_before_anything_hashes_it(
        cls: type, method: str, args: tuple[Any, ...], refused: str) -> None:
    """The batteries hashed (dict keys) or compared (lock owners) a peer's argument before
    judging it: a key (x, x) nested 40 deep, ~200 bytes, hashes path by path — every
    replica stuck in C for good (a list key showed it as a TypeError from the hash); a
    lock queued any owner, and compared the next one with it. The type of the key (the
    owner) is judged first, alike everywhere."""
    issuer, peer = Replica(cls(), "n1"), Replica(cls(), "n2")
    payload = issuer.invocation(method, args)
    for replica in (issuer, peer):
        replica.apply("n2", 1, payload)  # a peer's write: runs (and fails) alike
    outcome = issuer.apply("n1", 1, payload)
    assert outcome is not None
    with pytest.raises(LocalProtocolError, match=refused):
        outcome.result()
    assert vars(issuer.obj) == vars(peer.obj)


WIDE = 2**61 - 1  # the int hash's modulus: k·WIDE all hash to 0


@pytest.mark.parametrize("value", [
    {WIDE: 1}, {-WIDE: 1}, [{"a": 1, 2 * WIDE: 2}], {"n": {3: 0, 2**64: 1}}])
def test_an_int_key_beyond_the_bound_is_refused_before_broadcasting(value: Any) -> None:
    """Ints beyond ±(2**61 − 2) share hashes at will: a dict of N such keys takes N²
    steps to fill, on every replica (the guard refuses a peer's). The issuer refuses one
    first, naming where it is; every int key within the bound passes."""
    replica = Replica(Bag(), "n1")
    with pytest.raises(LocalProtocolError, match=r"int key beyond ±2305843009213693950"):
        replica.invocation("add", (value,))
    check_plain({WIDE - 1: 0, -(WIDE - 1): 1, 0: 2, "s": 3, True: 4}, "v")


@pytest.mark.parametrize("method", ["put", "put_if_absent", "delete"])
def test_a_replicated_dict_refuses_an_int_key_beyond_the_bound(method: str) -> None:
    """k·(2**61 − 1) for k = 1, 2, … all hash alike: main stored them, each put probing
    past every one before it (N puts, N² steps on every replica). The key is judged
    where the write executes, as its type is: the write fails alike everywhere."""
    replicas = [Replica(ReplicatedDict(), f"n{i}") for i in (1, 2)]
    args = (3 * WIDE,) if method == "delete" else (3 * WIDE, "v")
    payload = replicas[0].invocation(method, args)
    outcomes = [r.apply("n1", 1, payload) for r in replicas]
    assert outcomes[1] is None and replicas[1].obj.data == replicas[0].obj.data == {}
    assert outcomes[0] is not None and isinstance(outcomes[0].error, LocalProtocolError)
    assert "int key beyond ±2305843009213693950" in str(outcomes[0].error)
    edge = replicas[0].invocation("put", (WIDE - 1, "v"))  # within the bound: stored
    outcomes = [r.apply("n1", 2, edge) for r in replicas]
    assert outcomes[0] == Outcome(2, None) and replicas[1].obj.data == {WIDE - 1: "v"}


@replicated
class Shelf:
    """A class whose read and write hand out parts of its state."""

    def __init__(self) -> None:
        self.rows: dict[str, list[Any]] = {}

    @write
    def push(self, row: str, item: Any) -> list[Any]:
        self.rows.setdefault(row, []).append(item)
        return self.rows[row]  # the live list

    @read
    def row(self, row: str) -> list[Any]:
        return self.rows[row]

    @read
    def everything(self) -> dict[str, list[Any]]:
        return self.rows


def test_a_caller_changing_what_a_read_or_its_write_returned_leaves_the_replica_alone() -> None:
    """On main a read returned the replica's own list: `got.append(3)` changed this copy
    only, which then differed from the others' — and was handed to joiners so. A read's
    result and this node's write's result are copies now."""
    replicas = [Replica(ReplicatedDict(), "n1"), Replica(ReplicatedDict(), "n2")]
    put = replicas[0].invocation("put", ("k", [1, {"deep": [2]}]))
    for replica in replicas:
        replica.apply("n1", 1, put)
    got = replicas[0].read("get", ("k",))
    got.append(3)
    got[1]["deep"].append(4)
    replicas[0].read("items")[0][1].append(5)
    shelves = [Replica(Shelf(), "n1"), Replica(Shelf(), "n2")]
    push = shelves[0].invocation("push", ("a", [1]))
    outcome, _ = (s.apply("n1", 1, push) for s in shelves)
    assert outcome is not None
    outcome.result().append("mine")
    shelves[0].read("row", ("a",))[0].append(2)
    shelves[0].read("everything")["b"] = []
    for pair in (replicas, shelves):
        assert pair[0].state() == pair[1].state()
    assert replicas[0].obj.data == {"k": [1, {"deep": [2]}]}
    assert shelves[0].obj.rows == {"a": [[1]]}
    scalars = (1, "s", b"b")  # immutable: handed out as they are
    assert Replica(ReplicatedDict(), "n1").read("get", ("x", scalars)) is scalars
