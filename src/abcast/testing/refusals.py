"""Refused packets, for the tests of the stack's refusal rule (docs/design.md §5): a layer
above a channel refuses a packet the channel has already taken.

`Chaff` sits between the channel and the ordering of every node: it passes packets
through and, ahead of every `every`-th multicast, sends a junk packet that the receiving
`Chaff` refuses (RemoteProtocolError) — a peer sending what a layer above its channel
refuses. `DroppingStack` is the planted variant: it drops all of a refused frame's
outputs, as `Stack.receive` did before the rule, and a test of the rule must catch it.
"""

from __future__ import annotations

from abcast.codec import Envelope, Header, Packet
from abcast.effects import Effect, Multicast, Output, Send, Up
from abcast.errors import RemoteProtocolError
from abcast.events import Event, MulticastRequested, Received, SendRequested
from abcast.ids import NodeId
from abcast.layer import Layer
from abcast.stack import Stack


class ChaffHeader(Header, frozen=True):
    junk: bool


class Chaff(Layer):
    """Passes packets through; ahead of every `every`-th multicast sends junk, which a
    receiving `Chaff` refuses (counted in `refused`)."""

    name = "chaff"
    header_type = ChaffHeader

    def __init__(self, node: NodeId, every: int = 10) -> None:
        super().__init__(node)
        self.every = every
        self.multicasts = 0
        self.refused = 0

    def handle(self, event: Event, now: int) -> list[Effect]:
        match event:
            case SendRequested(to, packet, control):
                return [Send(to, ChaffHeader(False), packet, control)]
            case MulticastRequested(to, packet, control):
                self.multicasts += 1
                real = Multicast(to, ChaffHeader(False), packet, control)
                if self.multicasts % self.every:
                    return [real]
                return [Multicast(to, ChaffHeader(True), Packet((), b"junk")), real]
            case Received(sender, ChaffHeader(junk=True), _):
                self.refused += 1
                raise RemoteProtocolError(f"{sender} sent chaff")
            case Received(sender, ChaffHeader(), inner):
                return [Up(sender, inner)]
        return []


class DroppingStack(Stack):
    """Planted: drops all of a refused frame's outputs (what `receive` did before)."""

    def receive(
        self, env: Envelope, now: int
    ) -> tuple[list[Output], RemoteProtocolError | None]:
        outputs, refused = super().receive(env, now)
        return ([] if refused is not None else outputs), refused
