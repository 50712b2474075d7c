"""The sequencer core's snapshot, and its views under the membership layer: `inspect()`
names the numbers and what each held message waits for; the core has no phases of its
own (a flush freezes the membership layer around it, whose phase table is the family's:
a prepare freezes a member, its install thaws it, in the evs policy as in primary).
Membership's own phases: tests/unit/test_membership.py."""

from __future__ import annotations

import pytest

from abcast.codec import EMPTY, Packet
from abcast.events import JoinRequested, Received, ViewInstalled
from abcast.ids import View
from abcast.membership import Membership, MembershipConfig
from abcast.membership.wire import MInstall, MPrepare
from abcast.ordering.sequencer import Sequencer
from abcast.ordering.sequencer_wire import SData, SOrder

VIEW = View(1, ("n1", "n2", "n3"))


def _member(node: str = "n2", **options: bool) -> Sequencer:
    layer = Sequencer(node, **options)
    layer.handle(ViewInstalled(VIEW), 0)
    return layer


def _managed(node: str, partitions: str, view: View = VIEW) -> Membership:
    layer = Membership(node, Sequencer(node, evs=partitions == "evs"),
                       MembershipConfig(partitions=partitions))
    layer.handle(ViewInstalled(view), 0)
    return layer


def test_inspect_names_what_each_held_message_waits_for() -> None:
    layer = _member()
    layer.handle(Received("n3", SData(1), Packet((), b"unordered")), 10)
    layer.handle(Received("n3", SData(3), Packet((), b"third")), 10)
    layer.handle(Received("n1", SOrder(1, [("n1", 1), ("n3", 3)]), EMPTY), 20)
    snap = layer.inspect()
    assert snap.layer == "sequencer" and snap.phase == "steady"
    assert snap.clock["delivered_through"] == 0 and snap.clock["sequencer"] == "n1"
    why = {(h.origin, h.seq): h.waiting_for for h in snap.holdback}
    assert why == {
        ("n3", 1): "the order",
        ("n3", 3): "global #1 first (this is #2)",
        ("n1", 1): "its body (global #1)",
    }
    assert layer.inspect() == snap  # read-only


@pytest.mark.parametrize("partitions", ["primary", "evs"])
def test_a_flush_freezes_a_member_and_its_install_thaws_it(partitions: str) -> None:
    layer = _managed("n2", partitions)
    layer.handle(Received("n1", MPrepare(2, 1, ["n1", "n2"]), EMPTY), 10)
    assert layer.inspect().phase == "member, flushing"
    assert layer.inspect().clock["answered"] == [2, 1]
    layer.handle(Received("n1", MInstall(2, 1, ["n1", "n2"], []), EMPTY), 20)
    assert layer.inspect().phase == "member"
    assert layer.view == View(2, ("n1", "n2"))


def test_a_joiner_is_joining_until_welcomed() -> None:
    layer = _managed("n4", "evs", View(0, ("n4",)))
    layer.handle(JoinRequested(("n1",)), 0)
    assert layer.inspect().phase == "joining"
    assert layer.status == "joining"
