"""FIFO broadcast: each origin's messages are delivered in the order it sent them.

Rules: same traffic as `unordered` (one multicast per message, n−1 packets), but a
receiver holds a message back until every earlier message of the same origin has been
delivered. The reliable channel below hands packets up in any order, so the holdback is
what makes FIFO true. Guarantees: integrity, validity, agreement, fifo.
"""

from __future__ import annotations

from abcast.effects import Deliver, Effect
from abcast.errors import RemoteProtocolError
from abcast.ids import NodeId
from abcast.ordering.unordered import Unordered


class Fifo(Unordered):
    name = "fifo"

    def __init__(self, node: NodeId) -> None:
        super().__init__(node)
        self._next: dict[NodeId, int] = {}
        self._held: dict[NodeId, dict[int, bytes]] = {}

    def held(self) -> int:
        """Messages waiting for an earlier one of their origin."""
        return sum(len(h) for h in self._held.values())

    def on_message(self, origin: NodeId, seq: int, payload: bytes) -> list[Effect]:
        expected = self._next.get(origin, 1)
        held = self._held.setdefault(origin, {})
        if seq < expected or seq in held:
            raise RemoteProtocolError(f"{origin} sent message {seq} twice")
        held[seq] = payload
        effects: list[Effect] = []
        while expected in held:
            effects.append(Deliver(origin, expected, held.pop(expected)))
            expected += 1
        self._next[origin] = expected
        return effects
