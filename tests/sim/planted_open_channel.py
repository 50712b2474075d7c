"""A planted open channel for the simulator tests: the one as it was before a removed
member, once silent for its linger, was forgotten as a silent guest is — gone for good
instead, its numbers not kept and its packets dropped for ever (so a member cut off for
longer could never rejoin, and sides apart for longer never merged)."""

from __future__ import annotations

import pytest

from abcast.effects import Effect
from abcast.ids import NodeId
from abcast.ordering._open_channel import OpenChannel


def forgotten_for_good(monkeypatch: pytest.MonkeyPatch) -> None:
    """Plant it in every OpenChannel for the rest of the test."""
    forget, admit = OpenChannel._forget, OpenChannel._admit
    gone: set[tuple[NodeId, NodeId]] = set()

    def _forget(self: OpenChannel, peer: NodeId, now: int) -> list[Effect]:
        departed = peer in self._lingering
        effects = forget(self, peer, now)
        if departed:
            gone.add((self.node, peer))
            self._resumable.pop(peer, None)
        return effects

    def _admit(self: OpenChannel, peers: tuple[NodeId, ...], now: int) -> list[Effect]:
        return admit(self, tuple(p for p in peers if (self.node, p) not in gone), now)

    monkeypatch.setattr(OpenChannel, "_forget", _forget)
    monkeypatch.setattr(OpenChannel, "_admit", _admit)
