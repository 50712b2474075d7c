"""Fixed-sequencer atomic broadcast (the thesis's sequencer; JGroups' SEQUENCER idea).

Rules: the origin multicasts its message to every other member (n−1 data packets) and
keeps the body. The sequencer — the view's leader, the lowest member — gives each
message it has received the next global number and multicasts only the id with its
number (n−1 order packets); everyone delivers in global-number order once it holds both
the number and the body. 2(n−1) packets per broadcast, the sequencer's own messages
included (it numbers those locally). Guarantees: integrity, validity, agreement, fifo,
total.

Relay (`relay=True`; Défago's unicast-broadcast, where the thesis's is
broadcast-broadcast): the origin sends its message to the sequencer only, and the order
packet carries the bodies with the ids. n packets per broadcast (n−1 for the
sequencer's own), and a member that did not send a message handles one packet for it
instead of two: fewer wake-ups on a loaded host, a lower latency for a lone message. The
sequencer sends every byte, so at saturation it is the first to run out. The origin
keeps its body until it delivers it, as before, so a fail-over still finds every
unnumbered message at its origin; an order's bodies for messages a member holds or has
delivered are ignored.

FIFO: the reliable channel below hands packets up in any order, so the sequencer numbers
an origin's messages only in the origin's own order (a holdback before numbering;
`causal_total` swaps it for a causal one). Batching: after each event it handles, the
sequencer numbers everything that became ready and sends the ids in order packets of at
most `batch` ids (None: one packet per handled event, up to MAX_ORDER_IDS ids; relayed,
also at most RELAY_ORDER_BYTES of bodies).

State a fail-over needs (abcast.ordering.sequencer_failover collects it): every node
keeps the numbers it knows and the bodies it holds until it delivers them, and its
delivery point (`delivered_through`). Crashes, joins and leaves are the subclasses'.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Final

import msgspec

from abcast.codec import Header, NodeField, Packet, Seq
from abcast.effects import Deliver, Effect, Multicast, Send
from abcast.errors import ConfigError, LocalProtocolError, RemoteProtocolError
from abcast.events import BroadcastRequested, Event, Received, ViewInstalled
from abcast.ids import MsgId, NodeId, View
from abcast.layer import Layer
from abcast.ordering._holdback import CausalHoldback

#: most ids one order packet carries (the decoder refuses more)
MAX_ORDER_IDS: Final = 4096
#: body bytes one relayed order packet carries at most (a larger body goes alone): the
#: runtime's largest batch (abcast.batching), so that relaying never makes a packet larger
#: than the data packets broadcast-broadcast sends, however many ids became ready at once
RELAY_ORDER_BYTES: Final = 256 * 1024

_NO_DEPS: Final[Mapping[NodeId, int]] = {}


class SData(Header, frozen=True):
    """A broadcast message; its origin is the packet's sender."""

    seq: Seq


class SOrder(Header, frozen=True):
    """The sequencer's verdict: `ids[i]` gets global number `first + i`; in relay mode
    `bodies[i]` is that message (else `bodies` is empty)."""

    first: Seq
    ids: Annotated[list[tuple[NodeField, Seq]], msgspec.Meta(max_length=MAX_ORDER_IDS)]
    bodies: Annotated[list[bytes], msgspec.Meta(max_length=MAX_ORDER_IDS)] = []


def check_batch(batch: int | None) -> int | None:
    """Validate a `--batch` value for the sequencer family."""
    if batch is not None and not 1 <= batch <= MAX_ORDER_IDS:
        raise ConfigError(f"batch must be between 1 and {MAX_ORDER_IDS} ids, got {batch}")
    return batch


class Sequencer(Layer):
    name = "sequencer"
    header_type = SData | SOrder

    def __init__(self, node: NodeId, batch: int | None = None, *, relay: bool = False) -> None:
        super().__init__(node)
        self.batch = check_batch(batch)
        self.relay = relay
        self.view: View | None = None
        self._others: tuple[NodeId, ...] = ()
        # every node: what it knows and has not delivered yet
        self._bodies: dict[MsgId, bytes] = {}
        self._numbers: dict[int, MsgId] = {}
        self._next_delivery = 1
        self._delivered: dict[NodeId, int] = {}  # per origin; FIFO makes it a prefix
        # the sequencer's role: admission in origin (or causal) order, then numbering
        self._admission: CausalHoldback[None] = CausalHoldback()
        self._next_number = 1
        self.order_packets = 0

    # -- introspection -------------------------------------------------------------------
    @property
    def is_sequencer(self) -> bool:
        return self.view is not None and self.view.leader == self.node

    def waiting(self) -> int:
        """Messages (bodies) held here, not yet delivered."""
        return len(self._bodies)

    def delivered_through(self) -> int:
        """The highest global number delivered here."""
        return self._next_delivery - 1

    # -- hooks for causal_total ----------------------------------------------------------
    def data_header(self, seq: int) -> Header:
        """The header our own message `seq` goes out with."""
        return SData(seq)

    def parse_data(self, header: Any) -> tuple[int, Mapping[NodeId, int]] | None:
        """(seq, deps) if `header` is this ordering's data header, else None."""
        if type(header) is SData:
            return header.seq, _NO_DEPS
        return None

    def delivered_vector(self) -> dict[NodeId, int]:
        """How many of each other origin's messages this node has delivered."""
        return {o: k for o, k in self._delivered.items() if o != self.node}

    # -- hooks for fail-over (abcast.ordering.sequencer_failover) -------------------------
    def may_deliver(self, number: int) -> bool:
        """Whether global number `number` may be delivered now (its id and body are here)."""
        return True

    def on_delivered(self, number: int, mid: MsgId, body: bytes) -> None:
        """`mid` was just delivered as `number`."""

    def may_number(self) -> bool:
        """Whether the sequencer may number messages now."""
        return True

    def remember_deps(self, mid: MsgId, deps: Mapping[NodeId, int]) -> None:
        """The dependencies `mid` arrived with (kept by fail-over for a new sequencer)."""

    def take_over(
        self, last_number: int, deps: Mapping[MsgId, Mapping[NodeId, int]]
    ) -> list[Effect]:
        """Become the sequencer after a view change in which numbers up to `last_number`
        were fixed: number on from there, starting with the held messages nobody
        numbered (in origin, or causal, order)."""
        self._next_number = last_number + 1
        numbered = dict(self._delivered)
        for mid in self._numbers.values():
            numbered[mid.origin] = max(numbered.get(mid.origin, 0), mid.seq)
        self._admission = CausalHoldback()
        self._admission.seed(numbered)
        known = set(self._numbers.values())
        pending = sorted((m for m in self._bodies if m not in known),
                         key=lambda m: (m.seq, m.origin))
        effects: list[Effect] = []
        for mid in pending:
            if not self._admission.knows(mid.origin, mid.seq):
                effects.extend(self._admit(mid.origin, mid.seq, deps.get(mid, _NO_DEPS)))
        return effects

    # -- the core ------------------------------------------------------------------------
    def handle(self, event: Event, now: int) -> list[Effect]:
        match event:
            case BroadcastRequested(seq, payload):
                return self._broadcast(seq, payload)
            case Received(sender, SOrder(first, ids, bodies), _):
                return self._on_order(sender, first, ids, bodies)
            case Received(sender, header, inner):
                data = self.parse_data(header)
                if data is None:
                    raise RemoteProtocolError(f"{sender} sent unexpected header {header!r}")
                if sender == self.node:
                    raise RemoteProtocolError(f"{self.node} received its own message")
                return self._on_data(sender, data[0], data[1], inner.payload)
            case ViewInstalled(view):
                self.view = view
                self._others = view.others(self.node)
                return []
            case _:
                return []

    def _require_view(self) -> View:
        if self.view is None:
            raise LocalProtocolError(f"{self.name} on {self.node} has no view yet")
        return self.view

    def _broadcast(self, seq: int, payload: bytes) -> list[Effect]:
        view = self._require_view()
        header = self.data_header(seq)
        self._bodies[MsgId(self.node, seq)] = payload
        leader = view.leader
        effects: list[Effect]
        if not self.relay:
            effects = [Multicast(self._others, header, Packet((), payload))]
        elif leader != self.node:
            effects = [Send(leader, header, Packet((), payload))]
        else:
            effects = []  # our order packet carries it
        if leader == self.node and self.may_number():
            # What we delivered, we numbered: our own message's dependencies are met.
            effects.extend(self._admit(self.node, seq, _NO_DEPS))
        return effects

    def _on_data(
        self, origin: NodeId, seq: int, deps: Mapping[NodeId, int], payload: bytes
    ) -> list[Effect]:
        mid = MsgId(origin, seq)
        if seq <= self._delivered.get(origin, 0) or mid in self._bodies:
            return []  # sent again (a fail-over resend): idempotent
        self._bodies[mid] = payload
        self.remember_deps(mid, deps)
        view = self._require_view()
        if view.leader == self.node and self.may_number():
            return self._admit(origin, seq, deps)
        return self._deliver_ready()

    def _admit(self, origin: NodeId, seq: int, deps: Mapping[NodeId, int]) -> list[Effect]:
        """Sequencer only: admit the message in origin (or causal) order; number and
        announce whatever that makes ready."""
        released = self._admission.offer(origin, seq, deps, None)
        if not released:
            return []
        return self._number([(h.origin, h.seq) for h in released])

    def _number(self, ids: list[tuple[NodeId, int]]) -> list[Effect]:
        """Sequencer only: give `ids` the next numbers, announce them, deliver."""
        effects: list[Effect] = []
        size = self.batch or MAX_ORDER_IDS
        if not self.relay:
            for start in range(0, len(ids), size):
                effects += self._announce(ids[start:start + size], [])
            effects.extend(self._deliver_ready())
            return effects
        bodies = self._bodies
        chunk: list[tuple[NodeId, int]] = []
        carried: list[bytes] = []
        carried_bytes = 0
        for origin, seq in ids:
            body = bodies[MsgId(origin, seq)]
            if chunk and (len(chunk) >= size
                          or carried_bytes + len(body) > RELAY_ORDER_BYTES):
                effects += self._announce(chunk, carried)
                chunk, carried, carried_bytes = [], [], 0
            chunk.append((origin, seq))
            carried.append(body)
            carried_bytes += len(body)
        if chunk:
            effects += self._announce(chunk, carried)
        effects.extend(self._deliver_ready())
        return effects

    def _announce(self, chunk: list[tuple[NodeId, int]], carried: list[bytes]) -> list[Effect]:
        """Number `chunk` from the next free number on; one order packet to the others."""
        first = self._next_number
        numbers = self._numbers
        for offset, (origin, seq) in enumerate(chunk):
            numbers[first + offset] = MsgId(origin, seq)
        self._next_number = first + len(chunk)
        if not self._others:
            return []
        self.order_packets += 1
        return [Multicast(self._others, SOrder(first, chunk, carried))]

    def _on_order(
        self, sender: NodeId, first: int, ids: list[tuple[str, int]], bodies: list[bytes]
    ) -> list[Effect]:
        view = self._require_view()
        if sender != view.leader or sender == self.node:
            raise RemoteProtocolError(f"{sender} sent an order but the sequencer is {view.leader}")
        if bodies and len(bodies) != len(ids):
            raise RemoteProtocolError(
                f"{sender} sent an order of {len(ids)} ids with {len(bodies)} bodies")
        numbers, held, delivered = self._numbers, self._bodies, self._delivered
        for offset, (origin, seq) in enumerate(ids):
            number = first + offset
            if number < self._next_delivery:
                continue  # sent again: already delivered
            mid = MsgId(origin, seq)
            known = numbers.get(number)
            if known is not None and known != mid:
                raise RemoteProtocolError(
                    f"{sender} numbered {number} as {origin}#{seq}, earlier as "
                    f"{known.origin}#{known.seq}"
                )
            numbers[number] = mid
            if bodies and mid not in held and seq > delivered.get(origin, 0):
                held[mid] = bodies[offset]
        return self._deliver_ready()

    def _deliver_ready(self) -> list[Effect]:
        effects: list[Effect] = []
        numbers, bodies, delivered = self._numbers, self._bodies, self._delivered
        number = self._next_delivery
        while True:
            mid = numbers.get(number)
            if mid is None or mid not in bodies or not self.may_deliver(number):
                break
            del numbers[number]
            delivered[mid.origin] = mid.seq
            body = bodies.pop(mid)
            effects.append(Deliver(mid.origin, mid.seq, body))
            self.on_delivered(number, mid, body)
            number += 1
        self._next_delivery = number
        return effects
