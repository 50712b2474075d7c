"""The sequencer family's wire messages: the steady state's and SAFE's
(abcast.ordering.sequencer describes the protocol; views are abcast.membership.wire's).

Rules: every struct here is a frozen, tagged `Header` (or a part of one); a node decodes
only these, bounded in size, so a peer's packet is either one of them or a DecodeError.
Meaning lives in the modules that send and take them: steady state
(abcast.ordering.sequencer_numbering), SAFE (sequencer_view). `VcState` is no message: it
is the shape a flush's outcome is computed from (abcast.ordering._flush_outcome; members
report `abcast.membership.wire.ViewReport`, which sequencer_view turns into it).
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


class SAck(Header, frozen=True):
    """SAFE: I hold every number through `upto` and its body."""

    upto: Count


class SSafe(Header, frozen=True):
    """SAFE: a quorum holds every number through `upto`; deliver it."""

    upto: Count


# -- what a member reports at a view change, in the shape the outcome is computed from ----
class VcState(Header, frozen=True):
    """A member's report at a view change: what it delivered, the numbers it knows, the
    bodies it holds (not sent: abcast.ordering.sequencer_view builds it from a
    `ViewReport`)."""

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


STEADY_HEADERS = SData | CTData | OData | SOrder
#: everything the family puts on the wire (one union for every option: a member of a
#: plain sequencer group refuses a `CTData`, and a causal-total one an `SData`); its views
#: are the membership layer's, whose messages are abcast.membership.wire's
SEQUENCER_HEADERS = STEADY_HEADERS | SAck | SSafe
