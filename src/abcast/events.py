"""Events: what a protocol core is told. Time is never an event field; it is the second
argument of `Layer.handle`, in integer microseconds.

A layer hears from the application (through the stack's top), from the layer above
(`SendRequested`/`MulticastRequested`, carrying that layer's packet opaque), from the layer
below (`Received`, with this layer's own header already decoded), from its timers and
from membership.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from abcast.codec import Packet
from abcast.ids import NodeId, View


@dataclass(frozen=True, slots=True)
class BroadcastRequested:
    """The application on this node broadcasts message (self, seq) with this payload."""

    seq: int
    payload: bytes


@dataclass(frozen=True, slots=True)
class SendRequested:
    """The layer above sends `packet` to one node (`control`: reliability traffic, which
    layers below pass on as such so drivers do not count it as a protocol packet)."""

    to: NodeId
    packet: Packet
    control: bool = False


@dataclass(frozen=True, slots=True)
class MulticastRequested:
    """The layer above sends `packet` to each node in `to` (never including this node)."""

    to: tuple[NodeId, ...]
    packet: Packet


@dataclass(frozen=True, slots=True)
class Received:
    """A packet from `sender` for this layer: its own header, and what it carries up."""

    sender: NodeId
    header: Any
    inner: Packet


@dataclass(frozen=True, slots=True)
class TimerFired:
    key: Hashable


@dataclass(frozen=True, slots=True)
class ViewInstalled:
    """A membership this layer must now work in (the first one starts the layer)."""

    view: View


@dataclass(frozen=True, slots=True)
class Suspected:
    node: NodeId


@dataclass(frozen=True, slots=True)
class Restored:
    node: NodeId


@dataclass(frozen=True, slots=True)
class Excluded:
    """Member `by` has installed a view (`view_id`) without this node."""

    by: NodeId
    view_id: int


@dataclass(frozen=True, slots=True)
class JoinRequested:
    """The application asks to join the group through any of `contacts` (members)."""

    contacts: tuple[NodeId, ...]


@dataclass(frozen=True, slots=True)
class LeaveRequested:
    """The application asks to leave the group gracefully."""


@dataclass(frozen=True, slots=True)
class SnapshotTaken:
    """The application's state right after the deliveries that preceded the matching
    `TakeSnapshot` effect (the driver answers synchronously, so the cut is exact)."""

    token: int
    state: bytes


@dataclass(frozen=True, slots=True)
class StatesMerged:
    """The application's answer to a `MergeStates` effect: the merged state."""

    token: int
    state: bytes


Event = (
    BroadcastRequested | SendRequested | MulticastRequested | Received | TimerFired
    | ViewInstalled | Suspected | Restored | Excluded | JoinRequested | LeaveRequested
    | SnapshotTaken | StatesMerged
)
