"""Ready-made replicated objects: a counter, a dictionary, a FIFO lock and a bank account.

Rules: each is an ordinary `@replicated` class (plain local objects when constructed
directly; replicated through abcast.replicated.attach / ReplicatedHandle), every @write
deterministic, every @read side-effect free. The lock's blocking `acquire` is a helper
over the handle (`acquire`, `release`, `locked`): the queue of requesters is replicated
state, so every replica agrees on who holds the lock; an `acquire` given up (cancelled,
a timeout around it) takes its owner out of the queue again.

The dictionary checks the key each write stores (the state's own rules:
abcast.replicated._args) and hands its state over itself, so that no write needs the
check of the whole state a replica makes after each write of a class without hooks: a
`put` costs the same whatever the dictionary holds. It counts the int keys beyond
±INT_KEY_BOUND its entries hold (`_wide_keys`, per hash, rebuilt by set_state), so that
no more than MAX_SHARED_HASH of one hash are ever stored and its state stays one a
joiner accepts.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import pickle
from collections.abc import AsyncIterator
from typing import Any, Final

from abcast.errors import AbcastError, LocalProtocolError, RemoteProtocolError
from abcast.replicated._args import (
    check_key,
    count_wide_keys,
    loads_plain,
    plain_wide_keys,
    tally_wide_keys,
)
from abcast.replicated._declare import read, replicated, write
from abcast.replicated.handle import ReplicatedHandle

log: Final = logging.getLogger(__name__)


@replicated
class Counter:
    def __init__(self, value: int = 0) -> None:
        self.value = value

    @write
    def add(self, amount: int = 1) -> int:
        self.value += amount
        return self.value

    @write
    def set(self, value: int) -> None:
        self.value = value

    @read
    def get(self) -> int:
        return self.value


@replicated
class ReplicatedDict:
    """Keys are None, bool, int, str or bytes (a write naming any other fails, with
    LocalProtocolError, on every replica alike); values are plain data."""

    def __init__(self) -> None:
        self.data: dict[Any, Any] = {}
        # the entries' int keys beyond ±INT_KEY_BOUND: per hash, how many entries hold each
        self._wide_keys: dict[int, dict[int, int]] = {}

    @write
    def put(self, key: Any, value: Any) -> Any:
        """Set key to value; returns the previous value (None if there was none)."""
        check_key(key, "the new entry")  # by type, before anything hashes a peer's key
        wide = plain_wide_keys({key: value}, "the new entry")
        previous = self.data.get(key, _MISSING)
        self._recount(key, previous, wide)
        self.data[key] = value
        return None if previous is _MISSING else previous

    @write
    def put_if_absent(self, key: Any, value: Any) -> bool:
        check_key(key, "the new entry")
        wide = plain_wide_keys({key: value}, "the new entry")
        if key in self.data:
            return False
        self._recount(key, _MISSING, wide)
        self.data[key] = value
        return True

    @write
    def delete(self, key: Any) -> bool:
        check_key(key, "delete(key)")
        previous = self.data.pop(key, _MISSING)
        self._recount(key, previous, [])
        return previous is not _MISSING

    def _recount(self, key: Any, previous: Any, wide: list[int]) -> None:
        """Count the wide int keys of the entry `key` will hold (`wide`) in place of those
        of `previous` (_MISSING: none); LocalProtocolError if too many would share a hash."""
        gone = ([] if previous is _MISSING or not self._wide_keys
                else plain_wide_keys({key: previous}, "the entry"))
        count_wide_keys(self._wide_keys, gone, wide, "the dictionary with the new entry")

    @read
    def get(self, key: Any, default: Any = None) -> Any:
        return self.data.get(key, default)

    @read
    def items(self) -> list[tuple[Any, Any]]:
        return list(self.data.items())

    @read
    def size(self) -> int:
        return len(self.data)

    def get_state(self) -> bytes:
        return pickle.dumps(self.data, protocol=5)

    def set_state(self, state: bytes) -> None:
        data = loads_plain(state, "dictionary state")
        if type(data) is not dict:
            raise RemoteProtocolError(f"dictionary state is a {type(data).__name__}")
        try:
            tally = tally_wide_keys(data, "dictionary state")  # (checks it is plain data)
        except LocalProtocolError as exc:  # a peer's bytes
            raise RemoteProtocolError(str(exc)) from None
        self.data, self._wide_keys = data, tally


_MISSING = object()


@replicated
class Lock:
    """A FIFO lock: requesters queue in the group's total order; the head holds it."""

    def __init__(self) -> None:
        self.queue: list[str] = []

    @write
    def request(self, owner: str) -> bool:
        """Queue `owner` (once); True when it holds the lock now."""
        _check_owner(owner)  # a str: comparing a peer's nested tuple walks every path
        if owner not in self.queue:
            self.queue.append(owner)
        return self.queue[0] == owner

    @write
    def release(self, owner: str) -> str | None:
        """`owner` gives the lock up (or leaves the queue); returns the new holder."""
        _check_owner(owner)
        if owner in self.queue:
            self.queue.remove(owner)
        return self.queue[0] if self.queue else None

    @read
    def holder(self) -> str | None:
        return self.queue[0] if self.queue else None


def _check_owner(owner: object) -> None:
    if type(owner) is not str:
        raise LocalProtocolError(f"a lock's owner is a str, not a {type(owner).__name__}")


async def acquire(lock: ReplicatedHandle[Lock], owner: str) -> None:
    """Block until `owner` holds the replicated lock. Given up — cancelled (a timeout
    around it), or failed — once its request is broadcast, it broadcasts `owner`'s
    release too, once the request has executed here (an ordering without FIFO, skeen,
    could otherwise run the release first), so the lock never passes to an owner that
    stopped waiting."""
    requested = lock.call_write("request", owner)
    try:
        # shielded: a cancelled caller leaves the request's outcome to `_give_up`
        if not await asyncio.shield(requested):
            await lock.wait_until(lambda copy: bool(copy.queue) and copy.queue[0] == owner)
    except BaseException:
        _give_up(lock, owner, requested)
        raise


def _give_up(lock: ReplicatedHandle[Lock], owner: str, requested: asyncio.Future[Any]) -> None:
    """Take `owner` out of the queue once its request has executed here, without
    waiting for it (a cancelled caller cannot wait)."""

    def release_now(done: asyncio.Future[Any]) -> None:
        if done.cancelled() or done.exception() is not None:
            return  # the object went away: the request never ran here, nothing to undo
        try:
            lock.call_write("release", owner).add_done_callback(_retrieved)
        except AbcastError as exc:  # the object is gone (nothing more runs), or backpressure
            log.warning("lock: %s's release not sent: %s", owner, exc)

    requested.add_done_callback(release_now)


def _retrieved(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()  # the object went away meanwhile: nothing left to release


async def release(lock: ReplicatedHandle[Lock], owner: str) -> None:
    await lock.call_write("release", owner)


@contextlib.asynccontextmanager
async def locked(lock: ReplicatedHandle[Lock], owner: str) -> AsyncIterator[None]:
    """`async with locked(lock, "n1:worker"): …` — the critical section of a group."""
    await acquire(lock, owner)
    try:
        yield
    finally:
        await release(lock, owner)


@replicated
class Account:
    """The thesis's bank account: deposits, and withdrawals that never overdraw."""

    def __init__(self, balance: int = 0) -> None:
        self.balance = balance

    @write
    def deposit(self, amount: int) -> int:
        if amount <= 0:
            raise ValueError(f"deposit of {amount}: amounts must be positive")
        self.balance += amount
        return self.balance

    @write
    def withdraw(self, amount: int) -> bool:
        if amount <= 0:
            raise ValueError(f"withdrawal of {amount}: amounts must be positive")
        if amount > self.balance:
            return False
        self.balance -= amount
        return True

    @read
    def get(self) -> int:
        return self.balance
