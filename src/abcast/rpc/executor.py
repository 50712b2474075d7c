"""At-most-once execution of requests on one server: the duplicate table and the reply cache.

Sans-IO: the server driver (abcast.rpc.server) asks it what to do and does it.

    input                         | state of (client, rid)        | answer
    ------------------------------+-------------------------------+-------------------------
    request frame, Case B or this | unknown, not proposed         | PROPOSE (broadcast it)
    server leads the view         |                               |
    request frame, Case A, this   | unknown, not held             | HOLD (the leader proposes)
    server does not lead          |                               |
    request frame (a retry)       | held                          | PROPOSE (leader lost it?)
    any request frame             | proposed, not yet ordered     | WAIT (ours is on its way)
                                  | ordered, reply cached         | RESEND the cached reply
                                  | ordered, reply not yet known  | WAIT (the reply follows)
    this server became the leader | held                          | PROPOSE every held one
    the proposal was refused      | proposed, not yet ordered     | forgotten (`withdraw`):
    (backpressure)                |                               | a retry PROPOSEs again
    ordered request (delivery)    | unknown                       | EXECUTE (remember it)
                                  | already ordered               | DUPLICATE (drop it)
    the application replied       | ordered                       | cache the reply

Rules: the duplicate table changes only on ordered deliveries, so every server that
delivers the same sequence keeps the same table and executes the same copy of a request.
Case A: the client sends the request to every server; the view's leader proposes it and
the others hold it until it is ordered — one broadcast per request — and a held request
is proposed by a server that becomes leader, or that the client asks again (a retry
means the leader's copy may be lost). Case B: a retry through another contact proposes
it again. Either way two copies may be ordered; the first one wins everywhere. The
table is bounded: past `capacity` entries the oldest is forgotten, in delivery order, on
every server alike; a request retried after that many later requests would run again.
Proposals are local (`proposed`), bounded the same way. The reply cache keeps the
newest replies up to `cache_bytes` (a retry of a request whose reply was forgotten gets
no answer from this server: WAIT). The ids travel with the application's state to a
joiner (`export`/`load`), so a joiner does not run again what the group ran before it
came; the replies do not.
"""

from __future__ import annotations

import enum
from collections import OrderedDict
from dataclasses import dataclass
from typing import Final

from abcast.ids import NodeId
from abcast.rpc.wire import Request

#: requests remembered per server (their ids)
DEFAULT_CAPACITY: Final = 10_000
#: reply bytes cached per server (the newest replies; older ones are forgotten first)
DEFAULT_CACHE_BYTES: Final = 8 * 1024 * 1024

Key = tuple[NodeId, int]


class Action(enum.Enum):
    PROPOSE = "propose"
    HOLD = "hold"
    WAIT = "wait"
    RESEND = "resend"
    EXECUTE = "execute"
    DUPLICATE = "duplicate"


@dataclass(frozen=True, slots=True)
class Cached:
    ok: bool
    value: bytes


@dataclass(slots=True)
class ExecutorStats:
    proposed: int = 0
    executed: int = 0
    duplicates: int = 0  # ordered copies dropped
    resent: int = 0  # replies sent again from the cache
    waited: int = 0  # request frames that needed nothing (a copy in flight)
    held: int = 0  # Case A frames kept while the leader proposes


class Executor:
    def __init__(self, capacity: int = DEFAULT_CAPACITY,
                 cache_bytes: int = DEFAULT_CACHE_BYTES) -> None:
        if capacity < 1 or cache_bytes < 0:
            raise ValueError("capacity must be positive, cache_bytes not negative")
        self.capacity = capacity
        self.cache_bytes = cache_bytes
        self._ordered: OrderedDict[Key, None] = OrderedDict()
        self._replies: OrderedDict[Key, Cached] = OrderedDict()
        self._reply_bytes = 0
        self._proposed: OrderedDict[Key, None] = OrderedDict()
        self._held: OrderedDict[Key, Request] = OrderedDict()
        self.stats = ExecutorStats()

    def on_frame(self, request: Request, *, leader: bool = True
                 ) -> tuple[Action, Cached | None]:
        """A client sent `request` to this server (`leader`: this server leads its view)."""
        key = (request.client, request.rid)
        if key in self._ordered:
            cached = self._replies.get(key)
            if cached is not None:
                self.stats.resent += 1
                return Action.RESEND, cached
            self.stats.waited += 1
            return Action.WAIT, None
        if key in self._proposed:
            self.stats.waited += 1
            return Action.WAIT, None
        if request.path == "direct" and not leader and key not in self._held:
            self._held[key] = request
            if len(self._held) > self.capacity:
                self._held.popitem(last=False)
            self.stats.held += 1
            return Action.HOLD, None
        self._held.pop(key, None)
        self._proposed[key] = None
        if len(self._proposed) > self.capacity:
            self._proposed.popitem(last=False)
        self.stats.proposed += 1
        return Action.PROPOSE, None

    def on_ordered(self, request: Request) -> Action:
        """`request` was delivered in the group's order."""
        key = (request.client, request.rid)
        if key in self._ordered:
            self.stats.duplicates += 1
            return Action.DUPLICATE
        self._ordered[key] = None
        if len(self._ordered) > self.capacity:
            old, _ = self._ordered.popitem(last=False)
            self._forget_reply(old)
        self._proposed.pop(key, None)
        self._held.pop(key, None)
        self.stats.executed += 1
        return Action.EXECUTE

    def release_held(self) -> list[Request]:
        """This server became the leader: the held requests, now to propose (oldest first)."""
        held = list(self._held.values())
        self._held.clear()
        for request in held:
            self._proposed[(request.client, request.rid)] = None
        while len(self._proposed) > self.capacity:
            self._proposed.popitem(last=False)
        self.stats.proposed += len(held)
        return held

    def withdraw(self, request: Request) -> None:
        """The proposal of `request` never went out (the group refused the broadcast:
        backpressure): forget it, so that the client's retry proposes it again instead
        of waiting for a copy that is not on its way."""
        self._proposed.pop((request.client, request.rid), None)

    def replied(self, client: NodeId, rid: int, ok: bool, value: bytes) -> None:
        key = (client, rid)
        if key not in self._ordered or key in self._replies:
            return
        self._replies[key] = Cached(ok, value)
        self._reply_bytes += len(value)
        while self._reply_bytes > self.cache_bytes and self._replies:
            self._forget_reply(next(iter(self._replies)))

    def _forget_reply(self, key: Key) -> None:
        cached = self._replies.pop(key, None)
        if cached is not None:
            self._reply_bytes -= len(cached.value)

    def cached(self, client: NodeId, rid: int) -> Cached | None:
        return self._replies.get((client, rid))

    def export(self) -> list[tuple[NodeId, int]]:
        """The ids ordered so far, oldest first (a joiner's state carries them; not the
        replies: a joiner answers no retry of what ran before it came)."""
        return list(self._ordered)

    def load(self, rows: list[tuple[NodeId, int]]) -> None:
        self._ordered = OrderedDict(((client, rid), None) for client, rid in rows)
        self._replies.clear()
        self._reply_bytes = 0

    def __len__(self) -> int:
        return len(self._ordered)
