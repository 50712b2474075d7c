"""Wire messages of Chandra-Toueg atomic broadcast (consensus on batches of message ids).

Rules: plain msgspec Structs with the decoder's limits on them; no behaviour. A batch
(`ids`, `remove`, `add`) is what one consensus instance decides: the next messages to
deliver, in list order, then the members to remove from the view and the joiners to
add to it. Membership traffic outside the instances is the membership layer's own
records (abcast.membership.wire): a joiner's `MJoin` and a contact's `MJoinFwd`, a
leaver's `MLeave`, a joiner's `MWithdraw` (it gave its join up), and the `MWelcome` a
member sends a joiner once admitted — `attempt` is the instance that admitted it, `cut`
the `JoinCut` (per origin, how many of its messages the state holds), preceded by the
`Bodies` held above the cut.
"""

from __future__ import annotations

from typing import Annotated

import msgspec

from abcast.codec import Count, Header, NodeField, Seq
from abcast.membership.wire import MJoin, MJoinFwd, MLeave, MWelcome, MWithdraw

MsgRef = tuple[NodeField, Seq]
IdList = Annotated[list[MsgRef], msgspec.Meta(max_length=1_000_000)]
NodeList = Annotated[list[NodeField], msgspec.Meta(max_length=4096)]


class CtData(Header, frozen=True):
    """A broadcast message; its origin is the packet's sender, its body the payload."""

    seq: Seq


class Propose(Header, frozen=True):
    """The coordinator of round r of instance k proposes a batch."""

    k: Seq
    r: Seq
    ids: IdList
    remove: NodeList
    stable: Count  # every member has delivered instances 1..stable
    add: NodeList = []


class Ack(Header, frozen=True):
    k: Seq
    r: Seq
    delivered: Count  # the acker has delivered instances 1..delivered


class Nack(Header, frozen=True):
    k: Seq
    r: Seq


class Estimate(Header, frozen=True):
    """Phase 1 of rounds after the first: my current estimate and when I adopted it."""

    k: Seq
    r: Seq
    ids: IdList
    remove: NodeList
    ts: Count  # round in which the estimate was adopted; 0 = never adopted one
    delivered: Count
    add: NodeList = []


class Decide(Header, frozen=True):
    k: Seq
    ids: IdList
    remove: NodeList
    add: NodeList = []


class Fetch(Header, frozen=True):
    """Send me the bodies of these messages."""

    ids: IdList


class Bodies(Header, frozen=True):
    items: Annotated[list[tuple[NodeField, Seq, bytes]], msgspec.Meta(max_length=1_000_000)]


CtHeader = (
    CtData | Propose | Ack | Nack | Estimate | Decide | Fetch | Bodies | MJoin | MJoinFwd
    | MLeave | MWelcome | MWithdraw
)
