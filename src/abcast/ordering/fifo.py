"""FIFO broadcast: each origin's messages are delivered in the order it sent them.

Rules: same traffic as `unordered` (one multicast per message, n−1 packets), but a
receiver holds a message back until every earlier message of the same origin has been
delivered. The reliable channel below hands packets up in any order, so the holdback is
what makes FIFO true. Guarantees: integrity, validity, agreement, fifo.

At a view change (abcast.membership) each member reports what it delivered in the view
and what it holds back; the outcome is, per origin, the longest run of messages without
a gap above what every survivor delivered — so it holds everything anyone delivered —
and what lies beyond a gap (a crashed origin's message whose predecessor nobody got) is
given up.

The holdback is bounded (issue #21): a message more than `max_ahead` past its origin's
delivered prefix is refused (RemoteProtocolError: the driver logs one line and drops it),
so one origin holds at most `max_ahead` here. An honest origin never runs that far ahead
over the reliable channel, whose window bounds the gap (OrderingOptions.holdback is at
least the channel's window).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from abcast.effects import Deliver, Effect
from abcast.errors import RemoteProtocolError
from abcast.events import Event, ViewInstalled
from abcast.ids import MsgId, NodeId
from abcast.membership.wire import FlushMessage, JoinCut, ViewReport
from abcast.ordering._delivered import above_base, common_base
from abcast.ordering.unordered import Unordered, _by_origin
from abcast.snapshot import HeldMessage, LayerSnapshot

#: messages one origin may have held back here (OrderingOptions.holdback)
MAX_AHEAD: Final = 65_536


class Fifo(Unordered):
    name = "fifo"

    def __init__(self, node: NodeId, max_ahead: int = MAX_AHEAD) -> None:
        super().__init__(node)
        self._held: dict[NodeId, dict[int, bytes]] = {}
        self.max_ahead = max_ahead
        self.refused_far = 0  # messages refused: beyond max_ahead

    def held(self) -> int:
        """Messages waiting for an earlier one of their origin."""
        return sum(len(h) for h in self._held.values())

    def handle(self, event: Event, now: int) -> list[Effect]:
        if type(event) is ViewInstalled:
            members = set(event.view.members)
            for origin in [o for o in self._held if o not in members]:
                del self._held[origin]  # a departed origin's gap is never filled
        return super().handle(event, now)

    def on_message(self, origin: NodeId, seq: int, payload: bytes) -> list[Effect]:
        expected = self._done.prefix(origin) + 1
        held = self._held.setdefault(origin, {})
        if seq < expected or seq in held:
            raise RemoteProtocolError(f"{origin} sent message {seq} twice")
        if seq >= expected + self.max_ahead:
            self.refused_far += 1
            raise RemoteProtocolError(
                f"{origin} sent message {seq}, {self.max_ahead} or more past its #{expected}"
                " awaited here (the holdback bound)")
        held[seq] = payload
        effects: list[Effect] = []
        while expected in held:
            body = held.pop(expected)
            self._note(origin, expected, body)
            effects.append(Deliver(origin, expected, body))
            expected += 1
        return effects

    # -- under the membership layer ------------------------------------------------------
    def report(self) -> ViewReport:
        base = super().report()
        held = [FlushMessage(o, s, body) for o, h in self._held.items() for s, body in h.items()]
        return ViewReport(base.delivered, [*base.messages, *held])

    def settle(self, reports: Sequence[ViewReport]) -> list[FlushMessage]:
        """Per origin, the gapless run above what every survivor delivered."""
        base = common_base(reports)
        union: dict[MsgId, FlushMessage] = {}
        for m in above_base(reports, base):
            union.setdefault(MsgId(m.origin, m.seq), m)
        origins = set(base) | {m.origin for m in union}
        outcome: list[FlushMessage] = []
        for origin in sorted(origins, key=lambda o: _by_origin(MsgId(o, 0))):
            k = base.get(origin, 0) + 1
            while (found := union.get(MsgId(origin, k))) is not None:
                outcome.append(found)
                k += 1
        return outcome

    def conclude(self, outcome: Sequence[FlushMessage]) -> list[Effect]:
        effects: list[Effect] = []
        for m in outcome:
            if m.seq == self._done.prefix(m.origin) + 1:
                self._held.get(m.origin, {}).pop(m.seq, None)
                self._note(m.origin, m.seq, m.body)
                effects.append(Deliver(m.origin, m.seq, m.body))
        for origin, held in self._held.items():
            done = self._done.prefix(origin)
            for seq in [s for s in held if s <= done]:
                del held[seq]
        self._log.clear()
        self._settled = self._done.prefixes()
        return effects

    def start_from(self, cut: JoinCut) -> None:
        super().start_from(cut)
        self._held.clear()

    def inspect(self) -> LayerSnapshot:
        next_expected = {o: k + 1 for o, k in self._done.prefixes().items()}
        holdback = [
            HeldMessage(origin=o, seq=s,
                        waiting_for=f"{o}'s #{self._done.prefix(o) + 1} (fifo gap)")
            for o, h in sorted(self._held.items()) for s in sorted(h)
        ]
        return LayerSnapshot(layer=self.name, phase="steady", clock={"next": next_expected},
                             holdback=holdback, counters={"logged_this_view": len(self._log),
                                                          "refused_far": self.refused_far})
