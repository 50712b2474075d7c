"""What each ordering core shows through `inspect()` (abcast.snapshot): its clock and its
holdback with the reason each message waits — read by `abcast probe` and the chat demo's
debug panel."""

from __future__ import annotations

from abcast.codec import Packet
from abcast.events import BroadcastRequested, Received, ViewInstalled
from abcast.ids import View
from abcast.ordering.causal import Causal, CData
from abcast.ordering.matrix import Matrix
from abcast.ordering.skeen import KData, Skeen

VIEW = View(1, ("n1", "n2", "n3"))


def test_causal_names_the_missing_causal_predecessor() -> None:
    core = Causal("n2")
    core.handle(ViewInstalled(VIEW), 0)
    core.handle(Received("n1", CData(1, {"n3": 2}), Packet((), b"x")), 0)
    snap = core.inspect()
    assert [(h.origin, h.seq, h.waiting_for) for h in snap.holdback] == [
        ("n1", 1, "n3's #2 (causal predecessor)")]
    assert snap.clock == {"vector": {}, "credit": {"sent": 0, "stable": 0, "limit": 65_536}}


def test_skeen_shows_its_pending_timestamps() -> None:
    core = Skeen("n2")
    core.handle(ViewInstalled(VIEW), 0)
    core.handle(Received("n1", KData(1, 5), Packet((), b"x")), 0)
    snap = core.inspect()
    assert snap.clock["lamport"] == 6 and snap.clock["pending"] == {"n1#1": 6}
    assert snap.holdback[0].waiting_for == "final timestamp (proposed 6)"


def test_matrix_shows_its_matrix_and_row_minimum() -> None:
    core = Matrix("n1")
    core.handle(ViewInstalled(View(1, ("n1", "n2"))), 0)
    core.handle(BroadcastRequested(1, b"x"), 0)
    snap = core.inspect()
    assert snap.clock["matrix"]["n1"]["n1"] == 1 and snap.phase == "steady"
    assert [(h.origin, h.seq) for h in snap.holdback] == [("n1", 1)]
