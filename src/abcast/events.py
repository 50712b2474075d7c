"""Events: what a protocol core is told. Time is never an event field; it is the second
argument of `Layer.handle`, in integer microseconds.

A layer hears from the application (through the stack's top), from the layer above
(`SendRequested`/`MulticastRequested`, carrying that layer's packet opaque), from the layer
below (`Received`, with this layer's own header already decoded), from its timers and
from membership.

Each record is a frozen `msgspec.Struct` with gc=False, not a dataclass: several are built
per packet, and a Struct is built about 8x faster (measured: 77 ns against ~600 ns).
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import msgspec

from abcast.codec import Packet
from abcast.ids import NodeId, View


class BroadcastRequested(msgspec.Struct, frozen=True, gc=False):
    """The application on this node broadcasts message (self, seq) with this payload."""

    seq: int
    payload: bytes


class SendRequested(msgspec.Struct, frozen=True, gc=False):
    """The layer above sends `packet` to one node (`control`: reliability traffic, which
    layers below pass on as such so drivers do not count it as a protocol packet)."""

    to: NodeId
    packet: Packet
    control: bool = False


class MulticastRequested(msgspec.Struct, frozen=True, gc=False):
    """The layer above sends `packet` to each node in `to` (never including this node;
    `control`: reliability traffic, passed on as such, as for `SendRequested`)."""

    to: tuple[NodeId, ...]
    packet: Packet
    control: bool = False


class Received(msgspec.Struct, frozen=True, gc=False):
    """A packet from `sender` for this layer: its own header, and what it carries up."""

    sender: NodeId
    header: Any
    inner: Packet


class TimerFired(msgspec.Struct, frozen=True, gc=False):
    key: Hashable


class ViewInstalled(msgspec.Struct, frozen=True, gc=False):
    """A membership this layer must now work in (the first one starts the layer)."""

    view: View


class Suspected(msgspec.Struct, frozen=True, gc=False):
    node: NodeId


class Restored(msgspec.Struct, frozen=True, gc=False):
    node: NodeId


class Excluded(msgspec.Struct, frozen=True, gc=False):
    """Member `by` has installed a view (`view_id`) without this node."""

    by: NodeId
    view_id: int


class Forgotten(msgspec.Struct, frozen=True, gc=False):
    """From a layer above (`Forget`): `node` stopped for good; drop what is held of it."""

    node: NodeId


class JoinRequested(msgspec.Struct, frozen=True, gc=False):
    """The application asks to join the group through any of `contacts` (members)."""

    contacts: tuple[NodeId, ...]


class LeaveRequested(msgspec.Struct, frozen=True, gc=False):
    """The application asks to leave the group gracefully."""


class JoinAbandoned(msgspec.Struct, frozen=True, gc=False):
    """The application gives its join up (it timed out): a joiner not yet admitted
    withdraws and stops; one the group admitted meanwhile leaves gracefully."""


class SnapshotTaken(msgspec.Struct, frozen=True, gc=False):
    """The application's state right after the deliveries that preceded the matching
    `TakeSnapshot` effect (the driver answers synchronously, so the cut is exact)."""

    token: int
    state: bytes


class StatesMerged(msgspec.Struct, frozen=True, gc=False):
    """The application's answer to a `MergeStates` effect: the merged state."""

    token: int
    state: bytes


Event = (
    BroadcastRequested | SendRequested | MulticastRequested | Received | TimerFired
    | ViewInstalled | Suspected | Restored | Excluded | Forgotten | JoinRequested | LeaveRequested
    | JoinAbandoned | SnapshotTaken | StatesMerged
)
