"""The round-robin workload both drivers run (the thesis's closed system).

Rules: pure bookkeeping, no clock and no I/O. Nodes n1…nN take turns: global message k
(0-based) is broadcast by node k mod N as its own message k // N + 1, so round r holds
messages rN … rN+N−1. In the closed system a node broadcasts its round-r message once it
has delivered every round r−1 message whose origin is still alive (its own included); in
the open system (`rate`) the driver broadcasts on a schedule instead and only asks this
class who sends what.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from abcast.errors import LocalProtocolError
from abcast.ids import NodeId


@dataclass(slots=True)
class _NodeState:
    index: int
    total: int  # messages this node broadcasts over the whole run
    sent: int = 0
    # origins delivered per round; rounds before the one being awaited are dropped
    delivered_per_round: dict[int, set[NodeId]] = field(default_factory=dict)


class RoundRobin:
    def __init__(self, nodes: tuple[NodeId, ...], messages: int) -> None:
        if not nodes:
            raise LocalProtocolError("a workload needs at least one node")
        if messages < 0:
            raise LocalProtocolError("messages must be >= 0")
        self.nodes = nodes
        self.messages = messages
        n = len(nodes)
        self._state = {
            node: _NodeState(i, len(range(i, messages, n))) for i, node in enumerate(nodes)
        }
        self._dead: set[NodeId] = set()

    def total_of(self, node: NodeId) -> int:
        return self._state[node].total

    def sent_by(self, node: NodeId) -> int:
        return self._state[node].sent

    def done_sending(self) -> bool:
        return all(s.sent >= s.total for n, s in self._state.items() if n not in self._dead)

    def initial(self) -> list[NodeId]:
        """Nodes that broadcast at time zero (every node with a round-0 message)."""
        return [n for n in self.nodes if self._state[n].total > 0]

    def note_sent(self, node: NodeId) -> int:
        """Record that `node` broadcast its next message; returns that message's round."""
        st = self._state[node]
        if st.sent >= st.total:
            raise LocalProtocolError(f"{node} has no message left to send")
        st.sent += 1
        st.delivered_per_round.pop(st.sent - 3, None)
        return st.sent - 1

    def on_deliver(self, node: NodeId, origin: NodeId, seq: int) -> bool:
        """`node` delivered (origin, seq); True when it may now broadcast its next message."""
        st = self._state.get(node)
        if st is None or origin not in self._state:
            return False
        rnd = seq - 1
        if rnd >= st.sent - 1:
            st.delivered_per_round.setdefault(rnd, set()).add(origin)
        return self.ready(node)

    def on_crash(self, node: NodeId) -> list[NodeId]:
        """`node` crashed: it is no longer awaited. Returns the nodes that may now send."""
        self._dead.add(node)
        return [n for n in self.nodes if n not in self._dead and self.ready(n)]

    def ready(self, node: NodeId) -> bool:
        st = self._state[node]
        if node in self._dead or st.sent >= st.total or st.sent == 0:
            return False
        prev = st.sent - 1  # the round whose messages must all be delivered first
        got = st.delivered_per_round.get(prev, set())
        base = prev * len(self.nodes)
        return all(
            n in got for n, s in self._state.items()
            if base + s.index < self.messages and n not in self._dead
        )
