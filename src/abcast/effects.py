"""Effects: what a protocol core asks for. The stack routes each one.

Down (to the layer below): `Send`, `Multicast`. Up: `Up` (to the layer above), `Deliver`
(to the application; only the top layer emits it). Sideways: `SetTimer`/`CancelTimer`
in the layer's own key space, `InstallView` (to every other layer and the application),
`Suspect`/`Restore` (failure-detector verdicts for the layers above), `NotifyExcluded`
(a peer says the group has removed this node). To the application: `TakeSnapshot`,
`InstallState`, and `MergeStates` (extended virtual synchrony: fold the states two or
more partitions reached into one).

At the bottom of a stack, `Send`/`Multicast` become `Transmit` (encoded bytes for the
driver), and timer keys are namespaced by layer.
"""

from __future__ import annotations

import enum
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

from abcast.codec import EMPTY, Packet
from abcast.ids import NodeId, View


class Stage(enum.Enum):
    FINAL = "deliver"
    OPTIMISTIC = "opt_deliver"


@dataclass(frozen=True, slots=True)
class Send:
    to: NodeId
    header: Any
    inner: Packet = EMPTY
    control: bool = False  # reliability traffic: not counted as a protocol packet


@dataclass(frozen=True, slots=True)
class Multicast:
    to: tuple[NodeId, ...]
    header: Any
    inner: Packet = EMPTY


@dataclass(frozen=True, slots=True)
class Up:
    sender: NodeId
    packet: Packet


@dataclass(frozen=True, slots=True)
class Deliver:
    origin: NodeId
    seq: int
    payload: bytes
    stage: Stage = Stage.FINAL


@dataclass(frozen=True, slots=True)
class SetTimer:
    """Fire `key` at absolute time `at` (µs); setting an armed key moves it."""

    key: Hashable
    at: int


@dataclass(frozen=True, slots=True)
class CancelTimer:
    key: Hashable


@dataclass(frozen=True, slots=True)
class InstallView:
    view: View


@dataclass(frozen=True, slots=True)
class Suspect:
    node: NodeId


@dataclass(frozen=True, slots=True)
class Restore:
    node: NodeId


@dataclass(frozen=True, slots=True)
class NotifyExcluded:
    """`by`, a member of this node's view, says this node is not in its (later) view."""

    by: NodeId
    view_id: int


@dataclass(frozen=True, slots=True)
class TakeSnapshot:
    """Ask the application for its state now, between the deliveries before this effect
    and those after it; the driver answers at once with `SnapshotTaken(token, state)`."""

    token: int


@dataclass(frozen=True, slots=True)
class InstallState:
    """A joiner's starting state (from a member's `TakeSnapshot`), or the state of a
    merge view (`merged`: partitions healed, `MergeStates` made it): the application
    replaces its state with it before any delivery that follows this effect."""

    state: bytes
    merged: bool = False


@dataclass(frozen=True, slots=True)
class MergeStates:
    """Extended virtual synchrony: partitions that went on apart are merging, and these
    are their states (each side's snapshot at its last delivery, the side holding the
    lowest member first). The driver answers at once with `StatesMerged(token, state)`:
    the application's merge hook applied to them, or, without a hook, `states[0]` (the
    other sides' partition-time updates are then lost, as in JGroups without a state
    merge)."""

    token: int
    states: tuple[bytes, ...]


@dataclass(frozen=True, slots=True)
class Transmit:
    """Bottom of the stack: bytes for the transport to carry to each node in `to`."""

    to: tuple[NodeId, ...]
    data: bytes
    control: bool = False


Effect = (
    Send | Multicast | Up | Deliver | SetTimer | CancelTimer | InstallView | Suspect | Restore
    | NotifyExcluded | TakeSnapshot | InstallState | MergeStates
)
Output = (
    Transmit | Deliver | SetTimer | CancelTimer | InstallView | TakeSnapshot | InstallState
    | MergeStates
)
