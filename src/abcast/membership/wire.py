"""The membership layer's wire: join, leave, the flush, the evs merge, and what an
ordering reports.

Rules: one Struct per message, tagged by class name (`abcast.codec.Header`): the flush
(prepare, state, install, busy, abort), membership (join, forwarded join, welcome,
not-yet, leave, farewell, stability) and, under evs, the merge of sides (probe, merge
prepare, merge state, a side's outcome, its state, merge install, merge abort:
abcast.membership.merge), with the ordering's own part reduced to two typed records every
ordering fills in the same way: `FlushMessage` (a message of the closing view, with
what the ordering needs to place it) and `ViewReport` (what a member holds of the view).
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

from abcast.codec import Count, Header, NodeField, Seq

_MANY: Final = 10_000_000
NodeList = Annotated[list[NodeField], msgspec.Meta(max_length=4096)]
Clock = Annotated[dict[NodeField, Count], msgspec.Meta(max_length=4096)]


class FlushMessage(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """A message of the closing view: its id, its body, and where the ordering places
    it — `deps` (causal: the origin's vector when it sent it) and `stamp` (skeen: its
    final or best known timestamp; matrix: its Lamport stamp). `final` says the stamp
    is the one the ordering decided (skeen), not a proposal; `delivered`, that the
    reporting member delivered it; `held=False`, that it knows the message's stamp but
    not its body (the sequencer: a number announced before the body arrived)."""

    origin: NodeField
    seq: Seq
    body: bytes
    deps: Clock = {}
    stamp: Count = 0
    final: bool = False
    delivered: bool = False
    held: bool = True


Messages = Annotated[list[FlushMessage], msgspec.Meta(max_length=_MANY)]


class ViewReport(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """What one member holds of the closing view: `delivered` per origin (how many of
    its messages, 1..k, this member delivered: the contiguous prefix), the messages it
    delivered in this view or holds back (`messages`, with their bodies) and the
    ordering's clock (causal: its vector; skeen: its Lamport clock under "" ; matrix:
    its row)."""

    delivered: Clock
    messages: Messages
    clock: Clock = {}


class JoinCut(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """What a joiner starts from: per origin, how many messages the state it is given
    holds, the ordering's clock at that point, and messages of the view it joins that
    the state does not hold yet (the sequencer under SAFE: numbered, not yet safe)."""

    delivered: Clock
    clock: Clock = {}
    messages: Messages = []


class MJoin(Header, frozen=True):
    """Joiner → contact: admit me (the sender is the joiner). `ask` names this join
    (the joiner's clock when it asked: a later stack of the same node asks with a
    larger one; 0: unnamed)."""

    ask: Count = 0


class MJoinFwd(Header, frozen=True):
    """Contact → its leader: `joiner` asks to be admitted."""

    joiner: NodeField
    ask: Count = 0


class MLeave(Header, frozen=True):
    """Member → leader: leave me out of the next view."""


class MWithdraw(Header, frozen=True):
    """Joiner → its contacts: I gave my join up and have stopped; drop my ask, and leave
    me out of any view that admitted me (I will answer nothing: count on me nowhere).
    `ask` names the join given up: its asks still on their way are stale."""

    ask: Count = 0


class MFarewell(Header, frozen=True):
    """Member → a node view `view_id` leaves out: you are not in it. `attempt`: the
    flush that installed it (0: a welcome's) — a leaver that did not answer that one
    waits for no install from it (abcast.membership.layer, evs)."""

    view_id: Seq
    attempt: Count = 0


class MStable(Header, frozen=True):
    """Up (member → acting leader): what I delivered, per origin (1..k). Down (leader →
    members): what every member of view `view_id` delivered; drop it from the log."""

    view_id: Seq
    delivered: Clock
    up: bool


class MPrepare(Header, frozen=True):
    """Coordinator → proposed members: freeze and report (flush attempt `attempt` for
    view `target`)."""

    target: Seq
    attempt: Count
    members: NodeList


class MState(Header, frozen=True):
    """Member → coordinator: what it holds of its view `view_id`."""

    target: Seq
    attempt: Count
    view_id: Count
    report: ViewReport
    #: the highest target it answered *another* coordinator for before: that one may
    #: have installed it, so this flush must take a higher view id
    prior: Count = 0


class MBusy(Header, frozen=True):
    """To a coordinator whose prepare came too late: I answered (target, attempt)."""

    target: Seq
    attempt: Count


class MAbort(Header, frozen=True):
    """Coordinator → members it prepared: this attempt is given up (it no longer
    coordinates, or cannot reach a majority); no install for it will come."""

    target: Seq
    attempt: Count


class MInstall(Header, frozen=True):
    """Coordinator → the flush's members: deliver `outcome` (in this order, what you
    have not) in the old view, then install view `view_id` with `members`."""

    view_id: Seq
    attempt: Count
    members: NodeList
    outcome: Messages
    #: evs: the ordering's numbers through this are used up (abcast.membership.api)
    spent: Count = 0
    #: members of the old view that answered not-yet (`MNotYet`: its welcome never
    #: reached them): welcomed into this view, which admits them (`admitted_in`)
    fresh: NodeList = []


class MNotYet(Header, frozen=True):
    """A proposed member still joining answers a prepare: no state here; welcome me."""

    target: Seq
    attempt: Count


class MRefuse(Header, frozen=True):
    """A joiner admitted twice (under evs, two sides' contacts each took its join) →
    the coordinator whose welcome came second: I am a member of another view, not of
    your view `view_id`; go on without me."""

    view_id: Seq


class MWelcome(Header, frozen=True):
    """Coordinator → joiner: the view, the application's state at the cut, the cut."""

    view_id: Seq
    attempt: Count
    members: NodeList
    cut: JoinCut
    state: bytes


# -- evs: the merge of partitions that meet again (abcast.membership.merge) -----------------
class MMergeProbe(Header, frozen=True):
    """A view's coordinator → a node its lineage lost: I lead view `view_id` of `members`;
    merge if you can."""

    view_id: Seq
    members: NodeList


class MMergePrepare(Header, frozen=True):
    """Merge coordinator → every proposed member (both sides): freeze and report."""

    target: Seq
    attempt: Count
    members: NodeList


class MMergeDecline(Header, frozen=True):
    """Member → a merge coordinator whose prepare it cannot answer (it answers another
    merge: it will once that is off; or the prepare does not list its whole view): my
    view is `view_id` of `members`. The probe that started the merge may have been a
    late retransmission naming the member's view as it was long ago."""

    target: Seq
    attempt: Count
    view_id: Seq
    members: NodeList


class MMergeState(Header, frozen=True):
    """Member → merge coordinator: my view (`view_id`, `members`) and what I hold of it."""

    target: Seq
    attempt: Count
    view_id: Count
    members: NodeList
    report: ViewReport


class SideOutcome(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """What one side delivers in its last view before the merge view: the ordering's
    settled messages, and `spent` (the ordering's numbers through it are used up)."""

    view_id: Count
    outcome: Messages
    spent: Count = 0


class MMergeOutcome(Header, frozen=True):
    """Merge coordinator → a side's lowest member: deliver this, then send your state."""

    target: Seq
    attempt: Count
    side: SideOutcome


class MMergeSideState(Header, frozen=True):
    """A side's lowest member → merge coordinator: the state after the side's outcome."""

    target: Seq
    attempt: Count
    view_id: Count
    state: bytes


class MMergeInstall(Header, frozen=True):
    """Merge coordinator → every member: deliver your side's outcome in your old view,
    then install the merge view with the merged state, the ordering restarting from
    `cut`."""

    target: Seq
    attempt: Count
    members: NodeList
    sides: Annotated[list[SideOutcome], msgspec.Meta(max_length=4096)]
    state: bytes
    cut: JoinCut


class MMergeAbort(Header, frozen=True):
    """Merge coordinator → every proposed member: this merge is off; thaw. Once the
    sides' outcomes are fixed (some side's lowest member may have delivered its own),
    `sides` carries them: each member delivers its side's in its view and goes on in it."""

    target: Seq
    attempt: Count
    sides: Annotated[list[SideOutcome], msgspec.Meta(max_length=4096)] = []


MERGE_HEADERS: Final = (MMergeProbe, MMergePrepare, MMergeDecline, MMergeState, MMergeOutcome,
                        MMergeSideState, MMergeInstall, MMergeAbort)
MembershipHeader = (
    MJoin | MJoinFwd | MLeave | MFarewell | MStable | MPrepare | MState | MBusy | MAbort
    | MInstall | MNotYet | MRefuse | MWelcome | MWithdraw | MMergeProbe | MMergePrepare
    | MMergeDecline | MMergeState | MMergeOutcome | MMergeSideState | MMergeInstall | MMergeAbort
)
MEMBERSHIP_HEADERS: Final = (MJoin, MJoinFwd, MLeave, MFarewell, MStable, MPrepare, MState,
                             MBusy, MAbort, MInstall, MNotYet, MRefuse, MWelcome,
                             MWithdraw, *MERGE_HEADERS)
#: the same, for a lookup by exact type (the layer's steady path)
MEMBERSHIP_TYPES: Final[frozenset[type]] = frozenset(MEMBERSHIP_HEADERS)
