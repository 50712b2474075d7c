"""Causal broadcast: vector clocks and a holdback queue, in a group members join and leave.

Rules: the origin delivers its own message at once and multicasts it with its vector
clock — how many of each other node's messages it had delivered when it sent (exactly
the `deps` the trace records on the send row). A receiver holds a message back until it
has delivered every message the vector names and the origin's earlier ones, then
delivers it and whatever that unblocks (abcast.ordering._holdback). One multicast per
message: n−1 packets. Guarantees: integrity, validity, agreement, fifo, causal.

Membership. The view's leader (its lowest member) alone changes the view, by causal
messages of its own *view stream* (`CMember`, origin key "<leader>/view", numbered
1, 2, 3 …): JOIN(j) and LEAVE(q). They travel and wait in the holdback like any message,
so every member changes view after everything the leader had delivered when it issued
the change, and in the leader's order (one stream: the same view sequence everywhere;
a new leader's stream depends on the old one's last change).

- Join: a joiner asks a contact (`CJoinAsk`; the next one every `join_retry_us`). The leader
  issues JOIN(j), installs the next view and snapshots the application there
  (`TakeSnapshot`); the *cut* is its vector at that point (the JOIN's own deps, plus the
  JOIN). It sends j a `CWelcome`: view, state, cut. j seeds its holdback with the cut and
  from then on delivers exactly the messages that follow it: each member, where it
  delivers the JOIN, forwards j its own messages above the cut that it had sent before
  (concurrent with the JOIN, so neither in the state nor sent to j); its later messages
  go to j directly.
- Leave: a leaver stops broadcasting and asks the leader (`CLeaveAsk(last)`, repeated
  until done), who issues LEAVE(q) once it has delivered q's messages 1..last — so every
  member delivers all of them before the change. Each member, where it delivers the
  LEAVE, tells q the last message it sent it (`CFarewell`); q installs its view without
  itself — departs — once it has delivered every member's messages up to there, so it
  delivers everything the others delivered in its last view.

Members keep their own messages for forwarding until every other member's vector shows
it delivered them. Concurrent messages may be delivered on either side of a view change
at different members (causal order does not order them with the change). What it does
not do: order concurrent messages (that is `causal_total`), or survive crashes (a crashed
member's messages and a crashed leader's stream are awaited for ever).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Annotated, Final

import msgspec

from abcast.codec import Count, Header, NodeField, Packet, Seq
from abcast.effects import (
    CancelTimer,
    Deliver,
    Effect,
    InstallState,
    InstallView,
    Multicast,
    Send,
    SetTimer,
    TakeSnapshot,
)
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.events import (
    BroadcastRequested,
    Event,
    JoinRequested,
    LeaveRequested,
    Received,
    SnapshotTaken,
    TimerFired,
    ViewInstalled,
)
from abcast.ids import NodeId, View
from abcast.layer import Layer
from abcast.ordering._holdback import CausalHoldback, Held

#: a dependency vector on the wire: {node: k}, zero entries and the origin left out
DepsField = Annotated[dict[NodeField, Count], msgspec.Meta(max_length=1024)]
NodeList = Annotated[list[NodeField], msgspec.Meta(max_length=4096)]

RETRY: Final = "retry"  # a joiner's ask, or a leaver's, not yet answered
STREAM_SUFFIX: Final = "/view"


def view_stream(leader: NodeId) -> str:
    """The holdback key of a leader's stream of view changes."""
    return leader + STREAM_SUFFIX


class CData(Header, frozen=True):
    """A broadcast message and its origin's vector clock when it was sent."""

    seq: Seq
    deps: DepsField = {}


class CMember(Header, frozen=True):
    """Change n of the sender's view stream: add (`join`) or remove `subject`."""

    n: Seq
    deps: DepsField
    join: bool
    subject: NodeField


class CJoinAsk(Header, frozen=True):
    """The sender asks to be added to the group."""


class CLeaveAsk(Header, frozen=True):
    """The sender leaves once its broadcasts 1..last are delivered by the leader."""

    last: Count


class CWelcome(Header, frozen=True):
    """To a joiner: the view that added it, the state at the JOIN, and the cut."""

    view_id: Count
    members: NodeList
    cut: DepsField
    state: bytes


class CFarewell(Header, frozen=True):
    """To a leaver: the last message the sender sent it."""

    last: Count


CausalHeader = CData | CMember | CJoinAsk | CLeaveAsk | CWelcome | CFarewell


@dataclass(frozen=True, slots=True)
class _Change:
    """A view change as it waits in the holdback."""

    join: bool
    subject: NodeId


@dataclass(frozen=True, slots=True)
class _Sent:
    deps: dict[NodeId, int]
    payload: bytes


class Causal(Layer):
    name = "causal"
    header_type = CausalHeader

    def __init__(self, node: NodeId, join_retry_us: int = 200_000) -> None:
        super().__init__(node)
        self.join_retry_us = join_retry_us
        self._now = 0
        self.view: View | None = None
        self._others: tuple[NodeId, ...] = ()
        self._holdback: CausalHoldback[bytes | _Change] = CausalHoldback()
        self.status = "member"  # member | joining → member | leaving → left → gone
        self._last_seq = 0
        self._sent: dict[int, _Sent] = {}  # own messages, kept to forward to joiners
        self._acked: dict[NodeId, int] = {}  # member -> how many of ours it delivered
        # leader
        self._changes = 0  # changes issued in this node's view stream
        self._leaves: dict[NodeId, int] = {}  # leaver -> its last broadcast
        self._admitted: set[NodeId] = set()
        self._drafts: dict[int, tuple[NodeId, View, dict[NodeId, int]]] = {}
        self._tokens = 0
        self._welcomes: dict[NodeId, CWelcome] = {}  # kept for a joiner's retries
        # joiner
        self._contacts: tuple[NodeId, ...] = ()
        #: a joiner's cut: per origin, how many of its messages the state it was given holds
        self.cut: dict[NodeId, int] = {}
        self._early: list[tuple[NodeId, object, bytes]] = []
        self._queued: list[tuple[int, bytes]] = []
        self._leave_after_join = False
        # leaver
        self._final: View | None = None  # the view without us, once LEAVE(us) is delivered
        self._farewells: dict[NodeId, int] = {}

    def held(self) -> int:
        """Messages received but waiting for a causal predecessor."""
        return self._holdback.held()

    def handle(self, event: Event, now: int) -> list[Effect]:
        self._now = now
        match event:
            case _ if self.status == "gone":
                return []
            case BroadcastRequested(seq, payload):
                return self._broadcast(seq, payload)
            case Received(sender, header, inner):
                if sender == self.node:
                    raise RemoteProtocolError(f"{self.node} received its own packet")
                return self._receive(sender, header, inner.payload)
            case ViewInstalled(view):
                if self.view is None:  # the first; later ones are this layer's own
                    self.view, self._others = view, view.others(self.node)
                return []
            case JoinRequested(contacts):
                return self._join(contacts, now)
            case LeaveRequested():
                return self._leave(now)
            case SnapshotTaken(token, state):
                return self._welcome(token, state)
            case TimerFired(key) if key == RETRY:
                return self._retry(now)
            case _:
                return []

    # -- broadcasting and receiving ------------------------------------------------------
    def _broadcast(self, seq: int, payload: bytes) -> list[Effect]:
        if self.view is None:
            raise LocalProtocolError(f"{self.name} on {self.node} has no view yet")
        if self.status == "joining":
            self._queued.append((seq, payload))  # sent once the group has admitted us
            return []
        if self.status != "member":
            raise LocalProtocolError(f"{self.node} is leaving the group and cannot broadcast")
        self._last_seq = seq
        deps = self._holdback.vector(exclude=self.node)
        self._sent[seq] = _Sent(deps, payload)
        # Our own message depends only on what we delivered: it is released at once.
        effects = self._release(self._holdback.offer(self.node, seq, {}, payload))
        effects.append(Multicast(self._others, CData(seq, deps), Packet((), payload)))
        return effects

    def _receive(self, sender: NodeId, header: object, payload: bytes) -> list[Effect]:
        if self.status == "joining":
            if isinstance(header, CWelcome):
                return self._welcomed(sender, header)
            self._early.append((sender, header, payload))  # after the cut is known
            return []
        match header:
            case CData(seq, deps):
                self._welcomes.pop(sender, None)  # it speaks: it was welcomed
                if self._holdback.knows(sender, seq):
                    return []  # in a joiner's state already, or forwarded twice
                return self.on_message(sender, seq, deps, payload)
            case CMember(n, deps, join, subject):
                if self._holdback.knows(view_stream(sender), n):
                    return []
                held = self._holdback.offer(view_stream(sender), n, deps, _Change(join, subject))
                return self._release(held)
            case CJoinAsk():
                return self._on_join_ask(sender)
            case CLeaveAsk(last):
                self._leaves[sender] = max(last, self._leaves.get(sender, 0))
                return self._issue_leaves()
            case CFarewell(last):
                self._farewells[sender] = last
                return self._maybe_depart()
            case CWelcome():
                return []  # a second welcome: we asked more than once
            case _:
                raise RemoteProtocolError(f"{sender} sent unexpected header {header!r}")

    def on_message(
        self, origin: NodeId, seq: int, deps: dict[NodeId, int], payload: bytes
    ) -> list[Effect]:
        return self._release(self._holdback.offer(origin, seq, deps, payload))

    def _release(self, released: list[Held[bytes | _Change]]) -> list[Effect]:
        effects: list[Effect] = []
        for h in released:
            if isinstance(h.item, _Change):
                effects += self._change(h.origin, h.deps, h.item)
            else:
                effects.append(Deliver(h.origin, h.seq, h.item))
                self._note_acked(h.origin, h.deps)
        if released and self._leaves:
            effects += self._issue_leaves()
        if released and self._final is not None:
            effects += self._maybe_depart()
        return effects

    def _note_acked(self, member: NodeId, deps: Mapping[NodeId, int]) -> None:
        """Our messages a member had delivered when it sent a message we deliver now need
        not be kept for joiners. Judged at delivery, not receipt: a message sent after a
        JOIN waits here for it, and the joiner's cut may lack what it acknowledges."""
        got = deps.get(self.node, 0)
        if got <= self._acked.get(member, 0):
            return
        self._acked[member] = got
        stable = min((self._acked.get(m, 0) for m in self._others), default=got)
        for seq in [s for s in self._sent if s <= stable]:
            del self._sent[seq]

    # -- view changes --------------------------------------------------------------------
    def _is_leader(self) -> bool:
        return self.view is not None and self.status in ("member", "leaving") \
            and self.view.leader == self.node

    def _issue(self, join: bool, subject: NodeId) -> list[Effect]:
        """Add a change to this (leader's) view stream, apply it here, send it."""
        self._changes += 1
        key, n = view_stream(self.node), self._changes
        deps = self._holdback.vector(exclude=key)
        others = self._others
        effects = self._release(self._holdback.offer(key, n, deps, _Change(join, subject)))
        return [Multicast(others, CMember(n, deps, join, subject)), *effects]

    def _on_join_ask(self, joiner: NodeId) -> list[Effect]:
        if not self._is_leader():
            return []  # only the leader admits; the joiner asks again
        if joiner in self._admitted or self.view is None or joiner in self.view.members:
            kept = self._welcomes.get(joiner)
            return [Send(joiner, kept)] if kept is not None else []
        self._admitted.add(joiner)
        return self._issue(True, joiner)

    def _issue_leaves(self) -> list[Effect]:
        if not self._is_leader() or self.view is None:
            return []
        effects: list[Effect] = []
        for leaver, last in list(self._leaves.items()):
            if leaver not in self.view.members:
                del self._leaves[leaver]
            elif self._holdback.released(leaver) >= last:
                del self._leaves[leaver]
                effects += self._issue(False, leaver)
        return effects

    def _change(self, stream: str, deps: Mapping[NodeId, int], change: _Change) -> list[Effect]:
        view = self.view
        if view is None:
            return []
        subject = change.subject
        if change.join:
            if subject in view.members:
                return []
            new = View(view.view_id + 1, (*view.members, subject))
            effects = self._install(new)
            if stream == view_stream(self.node):  # ours: the state right after the JOIN
                self._tokens += 1
                self._drafts[self._tokens] = (subject, new, self._holdback.vector())
                return [*effects, TakeSnapshot(self._tokens)]
            return effects + self._forward(subject, deps.get(self.node, 0))
        if subject not in view.members:
            return []
        new = View(view.view_id + 1, view.others(subject))
        if subject == self.node:  # we depart once the farewells are met (`_release`
            self.status = "left"   # checks after the whole batch: some of it may be owed)
            self._final = new
            return []
        self._farewells.pop(subject, None)
        return [Send(subject, CFarewell(self._last_seq)), *self._install(new)]

    def _install(self, view: View) -> list[Effect]:
        self.view, self._others = view, view.others(self.node)
        self._acked = {m: k for m, k in self._acked.items() if m in view.members}
        return [InstallView(view)]

    def _forward(self, joiner: NodeId, cut: int) -> list[Effect]:
        """Our messages the JOIN's cut does not hold, sent before we knew the joiner."""
        return [Send(joiner, CData(seq, sent.deps), Packet((), sent.payload))
                for seq, sent in sorted(self._sent.items()) if seq > cut]

    # -- joining -------------------------------------------------------------------------
    def _join(self, contacts: tuple[NodeId, ...], now: int) -> list[Effect]:
        candidates = tuple(c for c in contacts if c != self.node)
        if not candidates:
            raise LocalProtocolError("join needs at least one contact other than this node")
        if self.view is None or len(self.view.members) != 1 or self._last_seq \
                or self.status != "member":
            raise LocalProtocolError(f"{self.node} cannot join now: it is in {self.view}")
        self.status = "joining"
        self._contacts = candidates
        return [Send(candidates[0], CJoinAsk()), SetTimer(RETRY, now + self.join_retry_us)]

    def _welcome(self, token: int, state: bytes) -> list[Effect]:
        draft = self._drafts.pop(token, None)
        if draft is None:
            raise LocalProtocolError(f"{self.node} took no snapshot with token {token}")
        joiner, view, cut = draft
        welcome = CWelcome(view.view_id, list(view.members), cut, state)
        self._welcomes[joiner] = welcome
        return [Send(joiner, welcome)]

    def _welcomed(self, sender: NodeId, welcome: CWelcome) -> list[Effect]:
        view = View(welcome.view_id, tuple(welcome.members))
        if self.node not in view.members or sender not in view.members:
            raise RemoteProtocolError(f"{sender} welcomed {self.node} into {view}")
        self.status = "member"
        self.cut = {o: k for o, k in welcome.cut.items() if not o.endswith(STREAM_SUFFIX)}
        self._holdback.seed(welcome.cut)
        effects: list[Effect] = [CancelTimer(RETRY), InstallState(welcome.state)]
        effects += self._install(view)
        early, self._early = self._early, []
        for sender_, header, payload in early:
            effects += self._receive(sender_, header, payload)
        for seq, payload in self._queued:
            effects += self._broadcast(seq, payload)
        self._queued.clear()
        if self._leave_after_join:
            effects += self._leave(self._now)
        return effects

    # -- leaving -------------------------------------------------------------------------
    def _leave(self, now: int) -> list[Effect]:
        if self.status == "joining":
            self._leave_after_join = True  # the group may already count on us: join first
            return []
        if self.status != "member" or self.view is None:
            return []
        self.status = "leaving"
        self._leaves[self.node] = self._last_seq
        if self._is_leader():
            return self._issue_leaves()
        return [Send(self.view.leader, CLeaveAsk(self._last_seq)),
                SetTimer(RETRY, now + self.join_retry_us)]

    def _retry(self, now: int) -> list[Effect]:
        again = SetTimer(RETRY, now + self.join_retry_us)
        if self.status == "joining":  # one contact at a time: it may not be the leader
            self._contacts = (*self._contacts[1:], self._contacts[0])
            return [Send(self._contacts[0], CJoinAsk()), again]
        if self.status == "leaving" and self.view is not None:
            if self._is_leader():  # the leader before us left: the change is ours now
                return self._issue_leaves()
            return [Send(self.view.leader, CLeaveAsk(self._last_seq)), again]
        return []

    def _maybe_depart(self) -> list[Effect]:
        final = self._final
        if final is None or self.status != "left":
            return []
        for member in final.members:
            last = self._farewells.get(member)
            if last is None or self._holdback.released(member) < last:
                return []
        self.status = "gone"
        self.view = final
        return [CancelTimer(RETRY), InstallView(final)]
