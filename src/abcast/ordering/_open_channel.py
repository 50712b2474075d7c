"""The reliable channel for an open group: links to nodes outside the view stay usable.

Rules: this is `ReliableChannel` (exactly-once per link, any order, acks and
retransmissions as control traffic) with a wider idea of whom it may talk to. The plain
channel drops packets to and from nodes outside the current view, which makes a join
impossible: the joiner's stack starts with a view that holds only itself, and the
contact's view does not hold the joiner until the group has ordered its JOIN. Here the
channel admits as a *guest* any node the layer above sends to or that sends it data,
until a view holds it; a node that a view change removes *lingers* until it has been
silent (nothing from it, data or acks) for `removed_linger_us` ("removed_linger" below;
`linger_us` unless told), so what was sent to it just before (a leaver's farewell) is
still retransmitted until acknowledged, and a node another side of a partition removed
keeps its link while it talks to us (an evs merge may conclude long after the view that
removed it: abcast.membership.merge); after that it is forgotten as a silent guest is
(below): its links are freed, their numbers kept, and should it speak again — a member
cut off by a partition, rejoining (chandra-toueg) or merging (evs) after the heal — it
is a guest on its old numbers. Under evs the registry sets `removed_linger_us` to the
merge's probing time plus `linger_us`, so a side silent behind a partition for all of
that time (a minute by default) is merged with on heal with its links whole; one silent
for longer, by the slow probes that follow for ever (abcast.membership.discovery), over
links forgotten and resumed. What we send a lingering node does not keep it: a crashed one
is probed by the merge, unanswered, and freed after that (and again `linger_us` after
each slow probe, which admits it as a guest: one probe held at a time).

    peer        event                                       next       effects
    stranger    it sends data, or the layer above to it     guest      linger timer
    guest       a view holds it                             member     -
    guest       linger timer, heard within linger_us        guest      timer moved on
    guest       linger timer, silent for linger_us          forgotten  links, timers freed
    member      a view without it                           lingering  linger timer
    lingering   linger timer, heard within removed_linger   lingering  timer moved on
    lingering   linger timer, silent for removed_linger     forgotten  links, timers freed
    any         Forgotten (it withdrew: stopped for good)   stranger   links freed, no marks
                                                                       (a member: once a view
                                                                       leaves it out)
    forgotten   as a stranger, its link numbers resumed     guest      linger timer

A guest is *heard* when it sends anything (data, fragment, ack) or the layer above sends
to it; one silent for `linger_us` (a joiner that crashed before it was admitted, a
client that went away, a stranger) is forgotten by the same `_forget` as a lingering
node: its links, retransmissions, timers and partial reassemblies are freed, and its
place among the MAX_GUESTS and its share of the guests' reassembly budget with them.
Either may speak again (a ticket server's members are its guests for ever, a joiner asks
its contacts in turn, a member cut off comes back), so its link numbers are kept
(`_LinkMarks`, the last MAX_GONE forgotten) and resumed when it is admitted again: with
nothing in flight, as when both sides went quiet, neither side sees a difference. What
was unacked to it is dropped and its numbers reused (a reused number it had already
received is taken for a duplicate): the layers above resend what they still need, a
joiner asks again; a member's own traffic never waits on it. One forgotten mid-packet
gets fresh links (its numbers are half taken); if it was only cut off and speaks
again, its numbers and ours disagree, as for one forgotten past MAX_GONE (lifting that
needs a link incarnation number in the header). Members take the per-packet fast
path and the stack's shortcuts (the plain channel's, declared here, for the peers in
`_steady`); only a guest's and a lingering node's packets are timed, on the general
path.

It drives the plain channel through its public `handle`, by installing the widened view
(members ∪ guests ∪ lingering) whenever that set changes, and recreates a resumed
guest's links at their kept numbers. What it does not know: who is right to talk to
whom — the ordering above ignores what it must not act on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, TypeVar

import msgspec

from abcast.effects import Effect, SetTimer
from abcast.errors import ConfigError
from abcast.events import (
    Event,
    Forgotten,
    MulticastRequested,
    Received,
    SendRequested,
    TimerFired,
    ViewInstalled,
)
from abcast.ids import NodeId, View
from abcast.reliability.channel import (
    LINGER_US,
    ChannelConfig,
    RAck,
    RData,
    ReliableChannel,
    _InLink,
)
from abcast.reliability.fragments import RFrag
from abcast.snapshot import LayerSnapshot

#: guests admitted at once; beyond it unknown senders are dropped (a bound, not a policy)
MAX_GUESTS: Final = 1_024
#: forgotten nodes' link numbers remembered (oldest first)
MAX_GONE: Final = 1_024

_T = TypeVar("_T")


@dataclass(frozen=True, slots=True)
class _LinkMarks:
    """A forgotten node's link numbers, resumed if it speaks again: what arrived from it
    (so a late retransmission is still a duplicate), the next number to send it, and the
    highest number ever sent it (its acks up to there are not refused: see `_resume`)."""

    high: int
    above: frozenset[int]
    next_seq: int
    sent_through: int = 0


class OpenChannel(ReliableChannel):
    __slots__ = (
        "_guests", "_heard", "_installed", "_lingering", "_resumable", "_spoke", "_view",
        "_withdrawn", "guests_forgotten", "linger_us", "removed_forgotten", "removed_linger_us",
    )

    name = "open-channel"

    def __init__(
        self, node: NodeId, config: ChannelConfig | None = None, linger_us: int = LINGER_US,
        removed_linger_us: int | None = None,
    ) -> None:
        super().__init__(node, config)
        #: a guest silent this long is forgotten
        self.linger_us = linger_us
        #: a node a view removed, silent this long, is forgotten (see the rules)
        self.removed_linger_us = linger_us if removed_linger_us is None else removed_linger_us
        if min(self.linger_us, self.removed_linger_us) <= 0:
            raise ConfigError(f"linger times must be positive: {linger_us}, "
                              f"{removed_linger_us}")
        self._view: View | None = None
        self._guests: set[NodeId] = set()
        self._lingering: set[NodeId] = set()
        #: when each guest was last heard (sent anything, or was sent to from above)
        self._heard: dict[NodeId, int] = {}
        #: when each lingering node last sent anything (what we send it does not count)
        self._spoke: dict[NodeId, int] = {}
        #: forgotten guests' link numbers (insertion order: the oldest first)
        self._resumable: dict[NodeId, _LinkMarks] = {}
        #: members the layer above said stopped for good (`Forgotten`): a view without
        #: them makes them strangers at once, not lingering nodes
        self._withdrawn: set[NodeId] = set()
        self.guests_forgotten = 0
        self.removed_forgotten = 0  # lingering nodes forgotten (see the rules)
        #: the widened view last installed in the plain channel; between calls it always
        #: equals `_allowed()` (every change of the sets reinstalls), except before the
        #: first view, when it is empty — so "in it" means "needs no admission"
        self._installed: frozenset[NodeId] = frozenset()
        # (`_steady`, the plain channel's: here the installed peers that are neither
        # guests nor lingering; their packets take the fast path and the shortcuts)

    # -- introspection -------------------------------------------------------------------
    def guests(self) -> frozenset[NodeId]:
        return frozenset(self._guests)

    def lingering(self) -> frozenset[NodeId]:
        return frozenset(self._lingering)

    def kept_peers(self) -> frozenset[NodeId]:
        """The nodes outside the view whose links are kept: guests and lingering nodes
        (`Stack.peers`: a runtime keeps their addresses while they are)."""
        return frozenset(self._guests | self._lingering)

    def inspect(self) -> LayerSnapshot:
        snapshot = super().inspect()
        return msgspec.structs.replace(snapshot, counters={
            **snapshot.counters, "guests": len(self._guests),
            "guests_forgotten": self.guests_forgotten,
            "removed_forgotten": self.removed_forgotten})

    # -- the core ------------------------------------------------------------------------
    #: the stack's shortcuts are the plain channel's: `handle`'s fast path below is its
    #: handlers, for the same peers (`_steady`, set by `_reinstall`)
    pass_up = ReliableChannel.pass_up
    pass_down_each = ReliableChannel.pass_down_each

    def handle(self, event: Event, now: int) -> list[Effect]:
        # The per-packet events first, by exact type: a member needs no admission and is
        # not timed, and the plain channel's handlers are called directly. Anything else
        # — a guest, a lingering node, a stranger, a view, a timer, subclasses — takes
        # the general path below.
        installed = self._steady
        kind = type(event)
        if kind is Received:
            received: Received = event  # type: ignore[assignment]  # the type test above
            header = received.header
            if received.sender in installed:
                if type(header) is RData:
                    return self._on_data(
                        received.sender, header.seq, received.inner, now, header.ack)
                if type(header) is RAck:
                    return self._on_ack(received.sender, header.high, header.sacks, now)
        elif kind is SendRequested:
            request: SendRequested = event  # type: ignore[assignment]
            if request.to in installed:
                return self._send(request.to, request.packet, now, request.control)
        elif kind is MulticastRequested:
            multicast: MulticastRequested = event  # type: ignore[assignment]
            for peer in multicast.to:  # a loop, not all(<generator>): once per multicast
                if peer not in installed:
                    break
            else:
                return self._multicast(multicast.to, multicast.packet, now,
                                       multicast.control)
        elif kind is TimerFired:
            key = event.key  # type: ignore[union-attr]
            if type(key) is tuple and key and key[0] != "linger":
                return super().handle(event, now)  # an ack or rto timer of the plain channel
        return self._handle_general(event, now)

    def _handle_general(self, event: Event, now: int) -> list[Effect]:
        match event:
            case ViewInstalled(view):
                return self._on_view(view, now)
            case SendRequested(to, _, _):
                return self._admit((to,), now) + super().handle(event, now)
            case MulticastRequested(to, _):
                return self._admit(to, now) + super().handle(event, now)
            case Received(sender, RData() | RFrag(), _):
                if sender in self._spoke:
                    self._spoke[sender] = now  # a lingering node: it is still there
                return self._admit((sender,), now) + super().handle(event, now)
            case Received(sender, _, _):
                if sender in self._heard:
                    self._heard[sender] = now  # a guest's ack: it is still there
                elif sender in self._spoke:
                    self._spoke[sender] = now
                return super().handle(event, now)
            case TimerFired(("linger", str(peer))):
                return self._expire(peer, now)
            case Forgotten(peer):
                return self._withdraw(peer, now)
            case _:
                return super().handle(event, now)

    def _reassembly_members(self) -> frozenset[NodeId]:
        """Only the view's members: guests and lingering nodes share a guest's
        reassembly budget (MAX_GUESTS of them must not each reserve a member's)."""
        return frozenset(self._view.members) if self._view is not None else frozenset()

    def _allowed(self) -> set[NodeId]:
        members = set(self._view.members) if self._view is not None else {self.node}
        return members | self._guests | self._lingering

    def _reinstall(self, now: int) -> list[Effect]:
        wanted = frozenset(self._allowed())
        steady = (wanted - self._guests - self._lingering if self._view is not None
                  else frozenset())
        effects: list[Effect] = []
        if wanted != self._installed:
            added = wanted - self._installed
            self._installed = wanted
            view_id = self._view.view_id if self._view is not None else 0
            effects = super().handle(ViewInstalled(View(view_id, tuple(wanted))), now)
            for peer in self._resumable.keys() & added:  # a set (keys view & frozenset)
                self._resume(peer, self._resumable.pop(peer))
        self._steady = steady  # after the plain channel's install, which set all of it
        return effects

    def _admit(self, peers: tuple[NodeId, ...], now: int) -> list[Effect]:
        heard, installed = self._heard, self._installed
        fresh = []
        for peer in peers:  # O(1) a peer: a guest's packets come this way
            if peer in heard:
                heard[peer] = now  # a guest
            elif peer not in installed and peer != self.node:
                fresh.append(peer)  # (installed: every member and lingering node)
        room = MAX_GUESTS - len(self._guests)
        if not fresh or room <= 0:
            return []
        effects: list[Effect] = []
        for peer in fresh[:room]:
            self._guests.add(peer)
            heard[peer] = now
            effects.append(SetTimer(("linger", peer), now + self.linger_us))
        return effects + self._reinstall(now)

    def _on_view(self, view: View, now: int) -> list[Effect]:
        before = set(self._view.members) if self._view is not None else set()
        self._view = view
        members = set(view.members)
        self._guests -= members
        self._lingering -= members
        for peer in members:
            self._heard.pop(peer, None)  # its linger timer, when it fires, finds a member
            self._spoke.pop(peer, None)
        effects: list[Effect] = []
        withdrawn, self._withdrawn = self._withdrawn - members, self._withdrawn & members
        for peer in sorted(before - members):
            if peer == self.node:
                continue
            if peer in withdrawn:
                continue  # stopped for good: a stranger (`_withdraw`), no linger
            self._lingering.add(peer)
            self._spoke[peer] = now
            effects.append(SetTimer(("linger", peer), now + self.removed_linger_us))
        effects += self._reinstall(now)
        self._reassembly.members = self._reassembly_members()  # if the widened set held
        return effects

    def _withdraw(self, peer: NodeId, now: int) -> list[Effect]:
        """`peer` stopped for good (a joiner that gave its join up): its links go with no
        marks kept, so a new stack of the same node, joining again, starts on fresh
        links. A member of the view goes so once a view leaves it out."""
        if self._view is not None and peer in self._view.members:
            self._withdrawn.add(peer)
            return []
        self._guests.discard(peer)
        self._lingering.discard(peer)
        self._heard.pop(peer, None)
        self._spoke.pop(peer, None)
        self._resumable.pop(peer, None)
        return self._reinstall(now)

    def _expire(self, peer: NodeId, now: int) -> list[Effect]:
        """A linger timer: a guest is forgotten once silent for `linger_us`, a lingering
        node once silent for `removed_linger_us`; else its timer moves on to that time
        from when it was last heard."""
        heard = self._heard.get(peer)
        linger = self.linger_us
        if heard is None:
            heard, linger = self._spoke.get(peer), self.removed_linger_us
        if heard is not None and now < heard + linger:
            return [SetTimer(("linger", peer), heard + linger)]
        return self._forget(peer, now)

    def _forget(self, peer: NodeId, now: int) -> list[Effect]:
        """Free a silent guest or lingering node, its link numbers kept: reinstalling
        the widened view without it drops its links, their timers and its partial
        reassemblies in the plain channel."""
        if peer in self._guests:
            self._guests.discard(peer)
            del self._heard[peer]
            self.guests_forgotten += 1
        elif peer in self._lingering:
            self._lingering.discard(peer)
            del self._spoke[peer]
            self.removed_forgotten += 1
        else:
            return []
        marks = self._link_marks(peer)
        if marks is not None:
            _remember(self._resumable, peer, marks)
        return self._reinstall(now)

    def _link_marks(self, peer: NodeId) -> _LinkMarks | None:
        """Its links' numbers, or None for fresh links: none yet, or a packet of its under
        way (fragments its link recorded but reassembly drops would never come again)."""
        inbound, outbound = self._in.get(peer), self._out.get(peer)
        if (inbound is None and outbound is None) or self._reassembly.partial(peer):
            return None
        high, above = (0, frozenset[int]()) if inbound is None else (
            inbound.high, frozenset(inbound.above))
        # what was unacked is dropped and its numbers reused, so the peer sees no hole
        next_seq = 1 if outbound is None else next(iter(outbound.unacked), outbound.next_seq)
        # (a link resumed before and forgotten again keeps its first life's mark too)
        sent_through = 0 if outbound is None else max(outbound.next_seq - 1,
                                                      outbound.resumed_through)
        return _LinkMarks(high, above, next_seq, sent_through)

    def _resume(self, peer: NodeId, marks: _LinkMarks) -> None:
        """Recreate a forgotten node's links at the numbers they had. The peer may hold
        some of the reused numbers (sent, its acks lost): an ack up to the highest number
        ever sent it moves the link on past them (`_OutLink.resumed_through`), where it
        would otherwise be refused as acking packets never sent."""
        if marks.high or marks.above:
            self._in[peer] = _InLink(marks.high, set(marks.above))
        if marks.next_seq > 1 or marks.sent_through:
            link = self._out[peer] = self._new_out_link()
            link.next_seq = marks.next_seq
            link.resumed_through = marks.sent_through


def _remember(memory: dict[NodeId, _T], peer: NodeId, value: _T) -> None:
    """Record `peer` in a memory of at most MAX_GONE, the oldest forgotten first."""
    memory[peer] = value
    if len(memory) > MAX_GONE:
        del memory[next(iter(memory))]
