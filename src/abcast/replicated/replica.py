"""`Replica`: one node's copy of a replicated object — the sans-IO core of RepMI.

Rules: the replica turns a local write call into the bytes to broadcast
(`invocation`), executes every delivered operation on its copy in delivery order
(`apply`), and returns the outcome of the operations *this* node issued, keyed by the
message's (origin, seq), so the driver above can resolve the caller waiting for it. A
write that raises raises on every replica alike (it is deterministic); its exception
is the caller's outcome and the state is whatever the method left, everywhere the
same — unless it left state `encode_state` refuses (a set, a tuple or float as a dict
key, any object): then every replica alike puts the state back as it was before the
write, and the caller's outcome is a LocalProtocolError naming what was refused. So a
member can always hand its state to a joiner (an object whose class brings its own
`get_state`/`set_state` is not checked: its hooks are its business), and an object
whose state is not plain data from the start is refused when made. Reads run on the
local copy (`read`), and `caught_up` says whether every write this node issued has been
executed here (reads wait for that). What a read returns, what this node's write
returns to its caller, and the whole object handed out (`copy`: what the facade's
`wait_until` predicate is given) is a copy (`_args.detached`): a caller that changes a
list it was given changes its own list, never the replica's copy (which would then
differ from the others' and be handed to joiners). State for a joiner goes through
`state()` / `load()`.

No I/O, no clock, no asyncio: the async facade (abcast.replicated.handle) and the
simulator's application (abcast.replicated.sim) drive it.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.ids import NodeId
from abcast.replicated._args import (
    check_state,
    checkpoint_state,
    decode_invocation,
    decode_state,
    detached,
    encode_invocation,
    encode_state,
)
from abcast.replicated._declare import READ, WRITE, ClassSpec, spec_of

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Outcome:
    """What one of this node's writes returned (or raised) when it was executed here."""

    seq: int
    value: Any = None
    error: Exception | None = None

    def result(self) -> Any:
        if self.error is not None:
            raise self.error
        return self.value


class Replica(Generic[T]):
    """`Replica(Account(), node="n1")`; `node` may be set later (before this node's first
    write), since a runtime learns its node id only once the group is open."""

    def __init__(self, obj: T, node: NodeId | None = None) -> None:
        self.spec: ClassSpec = spec_of(obj)
        check_state(obj)
        self.obj = obj
        self.node = node
        self.applied = 0  # operations executed here
        self.issued = 0  # writes this node issued (its own seqs are 1..issued)
        self._last_issued_seq = 0
        self._executed_own = 0  # own writes executed here (they execute in seq order)

    # -- this node's calls -------------------------------------------------------------
    def invocation(self, method: str, args: tuple[Any, ...] = (),
                   kwargs: Mapping[str, Any] | None = None) -> bytes:
        """The bytes to broadcast for a write call (LocalProtocolError if the call is not
        a write of this class or an argument is not plain data)."""
        entry = self.spec.method(method)
        if entry.kind != WRITE:
            raise LocalProtocolError(f"{self.spec.cls.__name__}.{method} is a @read: call it "
                                     "locally, it is not broadcast")
        return encode_invocation(self.spec, method, args, kwargs or {})

    def issued_as(self, seq: int) -> None:
        """The write just broadcast got this message number (the group's seq)."""
        if seq <= self._last_issued_seq:
            raise LocalProtocolError(f"seq {seq} issued after {self._last_issued_seq}")
        self._last_issued_seq = seq
        self.issued += 1

    @property
    def last_issued(self) -> int:
        """The seq of this node's latest write (0: none)."""
        return self._last_issued_seq

    def copy(self) -> T:
        """A copy of the object that shares nothing mutable with it (`_args.detached`, as
        a read's result): what a caller may be handed to look at the whole state."""
        copied: T = detached(self.obj)
        return copied

    def caught_up(self) -> bool:
        """Every write this node issued has been executed here."""
        return self._executed_own >= self.issued

    def read(self, method: str, args: tuple[Any, ...] = (),
             kwargs: Mapping[str, Any] | None = None) -> Any:
        entry = self.spec.method(method)
        if entry.kind != READ:
            raise LocalProtocolError(f"{self.spec.cls.__name__}.{method} is a @write: it "
                                     "must go through the group")
        return detached(entry.function(self.obj, *args, **(kwargs or {})))

    # -- delivered operations ------------------------------------------------------------
    def apply(self, origin: NodeId, seq: int, payload: bytes) -> Outcome | None:
        """Execute one delivered operation; its outcome if this node issued it, else
        None. RemoteProtocolError (nothing executed) for bytes that are not an operation
        of this class."""
        invocation = decode_invocation(payload)
        if invocation.cls != self.spec.name:
            raise RemoteProtocolError(
                f"{origin}#{seq} is an operation of {invocation.cls}, this replica holds "
                f"{self.spec.name}")
        entry = self.spec.methods.get(invocation.method)
        if entry is None or entry.kind != WRITE:
            raise RemoteProtocolError(f"{origin}#{seq} calls {invocation.method!r}, which is "
                                      f"not a @write of {self.spec.name}")
        value: Any = None
        error: Exception | None = None
        before = checkpoint_state(self.obj)
        try:
            value = entry.function(self.obj, *invocation.args, **invocation.kwargs)
        except Exception as exc:  # the method's own failure: the same on every replica
            error = exc
        if before is not None:
            try:
                check_state(self.obj)
            except LocalProtocolError as exc:  # the same verdict on every replica
                decode_state(self.obj, before)
                value, error = None, LocalProtocolError(
                    f"{self.spec.cls.__name__}.{invocation.method} was undone: {exc} (an "
                    "object's state must stay plain data, so that joiners can be given it)")
        self.applied += 1
        if origin != self.node or self.node is None:
            return None
        self._executed_own += 1
        return Outcome(seq, detached(value), error)

    # -- state transfer ----------------------------------------------------------------------
    def state(self) -> bytes:
        return encode_state(self.obj)

    def load(self, state: bytes) -> None:
        decode_state(self.obj, state)
