"""`GroupApp`: a sans-IO replica core as a running group's application (asyncio side).

Rules: the core (a `Replica`, or a `Directory` of named objects) executes each final
delivery; this class feeds it — from the group's `on_deliver` hook (synchronously, so a
state-transfer snapshot falls at its exact point of the order) or from a task reading
`group.deliveries()` — and hands each outcome of this node's own operations to the
caller waiting for it, matched by the group's seq (an outcome that comes before its
caller started waiting is kept until then). A delivery the core refuses is logged and
counted, never raised into the group's driver. It answers the group's `get_state` /
`set_state`, and binding refuses an ordering that does not claim total order.

A group has at most one of these on a node (`bound_to(group)`): a second reader of one
delivery stream would take some of its deliveries from the first, and both copies would
miss writes. Binding refuses a second one with LocalProtocolError; several objects on a
group are named objects in its one `Objects`. (A loop of the application's own over
`group.deliveries()` is refused by the group: one reader per delivery stream.)

When the group ends on this node — the reading task's `deliveries()` ends, or, given as
`app=`, the group calls `group_ended` (closed here, left, removed by the group, or its
opening failed once the object was bound) — or on `close()`, the object is gone:
every pending write and every waiting read fails with LocalProtocolError saying why,
and so does every later call, at once. A closed object
applies no more deliveries (its copy keeps the state it had), even as the `app=` of a
group still open here, and so it has no state to hand a joiner: its `get_state` raises
(the group logs it and answers no snapshot, so a joiner times out rather than starting
from a stale copy). To end an `app=` object with its group, leave or close the group.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable
from typing import Any, Final, Generic, Protocol, TypeVar

from abcast.effects import Deliver, Stage
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.ids import NodeId
from abcast.replicated._group import GroupLike, require_total_order
from abcast.replicated.replica import Outcome
from abcast.tasks import stop_task

log: Final = logging.getLogger(__name__)

#: the one GroupApp bound to each group on this node, until it is gone
_BOUND: weakref.WeakKeyDictionary[Any, GroupApp[Any]] = weakref.WeakKeyDictionary()


def bound_to(group: GroupLike) -> GroupApp[Any] | None:
    """The replicated object(s) this node has on `group`, if any."""
    return _BOUND.get(group)


class Core(Protocol):
    node: NodeId | None

    def apply(self, origin: NodeId, seq: int, payload: bytes) -> Outcome | None: ...

    def state(self) -> bytes: ...

    def load(self, state: bytes) -> None: ...


C = TypeVar("C", bound=Core)


class GroupApp(Generic[C]):
    def __init__(self, core: C, what: str) -> None:
        self.core = core
        self._what = what  # for errors: "replicated object", "replicated objects"
        self._group: GroupLike | None = None
        self._futures: dict[int, asyncio.Future[Any]] = {}
        self._early: dict[int, Outcome] = {}  # outcomes that came before their future
        self._changed: asyncio.Event | None = None
        self._reader: asyncio.Task[None] | None = None
        self._gone: str | None = None  # why calls fail now (the group ended, close())
        self.bad_deliveries = 0

    def bind(self, group: GroupLike) -> None:
        """Use `group` (open, with this object's `on_deliver` as its delivery hook)."""
        if self._group is not None:
            raise LocalProtocolError(f"this {self._what} is already bound to a group")
        if self._gone is not None:
            raise LocalProtocolError(self._gone)
        other = _BOUND.get(group)
        if other is not None:
            raise LocalProtocolError(
                f"group {getattr(group, 'name', '')!r} already has its {other._what} on "
                f"this node, applying its deliveries: a second reader would take some of "
                f"them and both would miss writes. Attach one object per group; for "
                f"several, name them: attach(group, cls, name=...) (or give the group "
                f"app=Objects())")
        ordering = getattr(group, "ordering", None)
        if isinstance(ordering, str):
            require_total_order(ordering, getattr(group, "options", None))
        self._group = group
        self.core.node = group.node
        _BOUND[group] = self

    def get_state(self) -> bytes:
        """The state, for a joiner (the group's snapshot hook). State made by writes is
        always plain data (Replica checks it after each); only a class's own get_state()
        can fail here, or a closed object, whose copy stopped applying deliveries: raised
        to the group, which logs and counts it (`app_errors`) and answers no snapshot."""
        if self._gone is not None:
            raise LocalProtocolError(f"{self._gone}: its copy applies no deliveries since, "
                                     f"so it has no state to hand a joiner")
        return self.core.state()

    def set_state(self, state: bytes) -> None:
        """Replace the state with a member's snapshot (this node just joined)."""
        if self._gone is not None:
            raise LocalProtocolError(f"{self._gone}: it takes no state")
        self.core.load(state)
        self._wake()

    def start_reading(self) -> None:
        """Apply the group's deliveries from a task (a group made without on_deliver)."""
        group = self._require_group()
        if self._reader is not None:
            raise LocalProtocolError(f"this {self._what} already reads its group")
        self._reader = asyncio.get_running_loop().create_task(self._read_all(group))

    async def _read_all(self, group: GroupLike) -> None:
        try:
            async for delivery in group.deliveries():
                self.on_deliver(delivery)
        except Exception as exc:  # deliveries() refused (a group with on_deliver=, say)
            log.error("%s stopped reading its group: %s", self._what, exc)
            self._end(f"{self._what} gone: its group's deliveries failed: {exc}")
            return
        removed = getattr(group, "removed_view", None) is not None
        self._end(f"{self._what} gone: " + ("this member left its group or was removed from "
                                            "it" if removed else "its group was closed here"))

    def group_ended(self, why: str) -> None:
        """The group (this object is its `app=`) ended on this node: `why` says how."""
        self._end(f"{self._what} gone: {why}")

    async def close(self) -> None:
        """Stop applying deliveries; pending and later calls fail with LocalProtocolError."""
        if self._reader is not None:
            await stop_task(self._reader)
            self._reader = None
        self._end(f"{self._what} closed")

    def _end(self, why: str) -> None:
        """The object is gone (`why`): fail what waits, and every call from now on."""
        if self._gone is None:
            self._gone = why
        for future in self._futures.values():
            if not future.done():
                future.set_exception(LocalProtocolError(self._gone))
        self._futures.clear()
        if self._group is not None and _BOUND.get(self._group) is self:
            del _BOUND[self._group]
        self._wake()

    def _require_group(self) -> GroupLike:
        if self._gone is not None:
            raise LocalProtocolError(self._gone)
        if self._group is None:
            raise LocalProtocolError(f"bind the {self._what} to an open group first")
        return self._group

    def on_deliver(self, delivery: Deliver) -> None:
        """The group's delivery hook: execute the operation, resolve our caller."""
        if delivery.stage is not Stage.FINAL:
            return  # a tentative delivery (ordering "optimistic"): the final one applies
        if self._gone is not None:
            return  # closed (as an app=, the group still open): the copy stays as it was
        try:
            outcome = self.core.apply(delivery.origin, delivery.seq, delivery.payload)
        except RemoteProtocolError as exc:
            self.bad_deliveries += 1
            log.warning("ignored %s#%d: %s", delivery.origin, delivery.seq, exc)
            return
        if outcome is not None:
            future = self._futures.pop(outcome.seq, None)
            if future is None:
                self._early[outcome.seq] = outcome
            elif not future.done():
                _settle(future, outcome)
        self._wake()

    def submit(self, payload: bytes) -> tuple[int, asyncio.Future[Any]]:
        """Broadcast one operation now: (its seq, a future for its outcome here)."""
        group = self._require_group()
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        seq = group.broadcast_nowait(payload).seq
        early = self._early.pop(seq, None)
        if early is not None:
            _settle(future, early)
        else:
            self._futures[seq] = future
        return seq, future

    async def _wait(self, predicate: Callable[[], bool]) -> None:
        """Until `predicate()` holds; re-checked after every operation executed here."""
        if self._changed is None:
            self._changed = asyncio.Event()
        while True:
            if self._gone is not None:
                raise LocalProtocolError(self._gone)
            if predicate():
                return
            self._changed.clear()
            await self._changed.wait()

    def _wake(self) -> None:
        if self._changed is not None:
            self._changed.set()


def _settle(future: asyncio.Future[Any], outcome: Outcome) -> None:
    if outcome.error is not None:
        future.set_exception(outcome.error)
    else:
        future.set_result(outcome.value)
