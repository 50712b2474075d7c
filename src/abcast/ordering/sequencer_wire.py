"""The sequencer family's wire messages: the steady state's, the flush's, membership's and
the evs merge's (abcast.ordering.sequencer describes the protocol).

Rules: every struct here is a frozen, tagged `Header` (or a part of one); a node decodes
only these, bounded in size, so a peer's packet is either one of them or a DecodeError.
Meaning lives in the modules that send and take them: steady state
(abcast.ordering.sequencer_numbering), flush (sequencer_flush), join and leave
(sequencer_join), evs merge (sequencer_merge).
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

from abcast.codec import Count, Header, NodeField, Seq
from abcast.errors import ConfigError
from abcast.ordering.causal import DepsField

#: most ids one order packet carries (the decoder refuses more)
MAX_ORDER_IDS: Final = 4096
#: body bytes one relayed order packet carries at most (a larger body goes alone): the
#: runtime's largest batch (abcast.batching), so that relaying never makes a packet larger
#: than the data packets broadcast-broadcast sends, however many ids became ready at once
RELAY_ORDER_BYTES: Final = 256 * 1024
_MANY: Final = 10_000_000

NodeList = Annotated[list[NodeField], msgspec.Meta(max_length=4096)]


def check_batch(batch: int | None) -> int | None:
    """Validate a `--batch` value for the sequencer family."""
    if batch is not None and not 1 <= batch <= MAX_ORDER_IDS:
        raise ConfigError(f"batch must be between 1 and {MAX_ORDER_IDS} ids, got {batch}")
    return batch


# -- steady state -------------------------------------------------------------------------
class SData(Header, frozen=True):
    """A broadcast message; its origin is the packet's sender."""

    seq: Seq


class CTData(Header, frozen=True):
    """Causal total order: a broadcast message and its origin's vector clock when sent."""

    seq: Seq
    deps: DepsField = {}


class OData(Header, frozen=True):
    """Optimistic total order: a broadcast message and the delay (µs) its origin suggests
    the sequencer impose on the sequencer's own messages (sequencer_optimistic). A plain
    int: a negative or absurd value is the core's RemoteProtocolError, not a DecodeError."""

    seq: Seq
    suggest: int = 0


class SOrder(Header, frozen=True):
    """The sequencer's verdict: `ids[i]` gets global number `first + i`; in relay mode
    `bodies[i]` is that message (else `bodies` is empty)."""

    first: Seq
    ids: Annotated[list[tuple[NodeField, Seq]], msgspec.Meta(max_length=MAX_ORDER_IDS)]
    bodies: Annotated[list[bytes], msgspec.Meta(max_length=MAX_ORDER_IDS)] = []


class SStable(Header, frozen=True):
    """Up: I delivered through `upto`. Down: every member did (collect the log)."""

    upto: Count


class SAck(Header, frozen=True):
    """SAFE: I hold every number through `upto` and its body."""

    upto: Count


class SSafe(Header, frozen=True):
    """SAFE: a quorum holds every number through `upto`; deliver it."""

    upto: Count


# -- the flush (view change) --------------------------------------------------------------
class VcPrepare(Header, frozen=True):
    """Coordinator → proposed members: freeze and send me your state."""

    target: Seq
    attempt: Count
    members: NodeList


class VcState(Header, frozen=True):
    """Member → coordinator: what it delivered, the numbers it knows, the bodies it holds."""

    target: Seq
    attempt: Count
    view_id: Count
    delivered: Count  # highest number delivered
    per_origin: dict[NodeField, Count]  # highest seq delivered per origin
    numbers: Annotated[list[tuple[Seq, NodeField, Seq]], msgspec.Meta(max_length=_MANY)]
    held: Annotated[list[tuple[NodeField, Seq, DepsField, bytes]], msgspec.Meta(max_length=_MANY)]
    #: the highest target this member answered *another* coordinator for before: that
    #: coordinator may have installed it (alone, cut off right after concluding)
    prior: Count = 0
    #: SAFE: the highest safe point this member heard announced
    safe: Count = 0


class VcInstall(Header, frozen=True):
    """Coordinator → members: the old view's last numbers and bodies, and the new view."""

    view_id: Seq
    attempt: Count  # only members that answered this attempt install it
    members: NodeList
    first: Seq  # ids[i] has number first + i
    ids: Annotated[list[tuple[NodeField, Seq]], msgspec.Meta(max_length=_MANY)]
    bodies: Annotated[list[tuple[NodeField, Seq, bytes]], msgspec.Meta(max_length=_MANY)]
    safe: Count  # numbers up to here may be delivered at once (SAFE mode)
    #: the new view's first number when above the outcome's last + 1 (evs: numbers the
    #: old sequencer gave beyond the outcome are never reused)
    next_number: Count = 0


class VcBusy(Header, frozen=True):
    """To a coordinator whose `VcPrepare` came too late: I answered (target, attempt)
    of another coordinator (attempt numbers are chosen independently and may tie)."""

    target: Seq
    attempt: Count


# -- join and leave -----------------------------------------------------------------------
class SJoin(Header, frozen=True):
    """Joiner → contact: admit me (the sender is the joiner)."""


class SJoinFwd(Header, frozen=True):
    """Contact → its leader: `joiner` asks to be admitted."""

    joiner: NodeField


class SWelcome(Header, frozen=True):
    """Coordinator → joiner: the view, and the group's state at the cut."""

    view_id: Seq
    attempt: Count
    members: NodeList
    first: Seq  # the first number the joiner delivers; ids[i] has number first + i
    ids: Annotated[list[tuple[NodeField, Seq]], msgspec.Meta(max_length=_MANY)]
    bodies: Annotated[list[tuple[NodeField, Seq, bytes]], msgspec.Meta(max_length=_MANY)]
    per_origin: dict[NodeField, Count]  # at the cut: highest seq delivered per origin
    safe: Count  # SAFE mode: numbers up to here may be delivered at once
    state: bytes


class SNotYet(Header, frozen=True):
    """A proposed member that is still joining answers a `VcPrepare`: no state here."""

    target: Seq
    attempt: Count


class SLeave(Header, frozen=True):
    """Member → leader: leave me out of the next view."""


class SFarewell(Header, frozen=True):
    """Member → node that view `view_id` leaves out: you are not in it."""

    view_id: Seq


# -- the evs merge ------------------------------------------------------------------------
class MProbe(Header, frozen=True):
    """A view's leader → a node its lineage lost: I lead this view; merge if you can."""

    view_id: Seq
    members: NodeList


class MPrepare(Header, frozen=True):
    """Merge coordinator → every proposed member: freeze, send me your state."""

    target: Seq
    attempt: Count
    members: NodeList


class MState(Header, frozen=True):
    """Member → merge coordinator: my view and what the flush needs of me."""

    target: Seq
    attempt: Count
    members: NodeList
    state: VcState


class MSide(msgspec.Struct, frozen=True, array_like=True):
    """What one side delivers in its last view before the merge view."""

    view_id: Count
    first: Seq  # ids[i] has number first + i
    ids: Annotated[list[tuple[NodeField, Seq]], msgspec.Meta(max_length=_MANY)]
    bodies: Annotated[list[tuple[NodeField, Seq, bytes]], msgspec.Meta(max_length=_MANY)]
    next_number: Seq  # above every number the side's sequencer may have given


class MOutcome(Header, frozen=True):
    """Merge coordinator → a side's lowest member: deliver this, then send your state."""

    target: Seq
    attempt: Count
    side: MSide


class MSideState(Header, frozen=True):
    """A side's lowest member → merge coordinator: the state after the side's outcome."""

    target: Seq
    attempt: Count
    view_id: Count
    state: bytes


class MInstall(Header, frozen=True):
    """Merge coordinator → every member: the sides' outcomes, the merge view, its state."""

    target: Seq
    attempt: Count
    members: NodeList
    sides: Annotated[list[MSide], msgspec.Meta(max_length=4096)]
    state: bytes
    per_origin: dict[NodeField, Count]  # highest seq delivered per origin, any side
    next_number: Seq  # the merge view's first number


class MAbort(Header, frozen=True):
    """Merge coordinator → every proposed member: this merge is off; thaw."""

    target: Seq
    attempt: Count


STEADY_HEADERS = SData | CTData | OData | SOrder
FLUSH_HEADERS = VcPrepare | VcState | VcInstall | SStable | SAck | SSafe | VcBusy
MEMBERSHIP_HEADERS = SJoin | SJoinFwd | SWelcome | SNotYet | SLeave | SFarewell
MERGE_HEADERS = MProbe | MPrepare | MState | MOutcome | MSideState | MInstall | MAbort
#: everything the family puts on the wire (one union for every option: a member of a
#: plain sequencer group refuses a `CTData`, and a causal-total one an `SData`)
#: what the core sends under the membership layer (its views are the layer's)
MANAGED_HEADERS = STEADY_HEADERS | SStable | SAck | SSafe
SEQUENCER_HEADERS = STEADY_HEADERS | FLUSH_HEADERS | MEMBERSHIP_HEADERS | MERGE_HEADERS
