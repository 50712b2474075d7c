"""The sequencer core's phases and its snapshot: `inspect()` names the phase, the numbers
and what each held message waits for; the phase tables refuse a transition they do not
list; a flush freezes a member and its install thaws it (evs, where the core keeps its
own views; the rest of the family's views are the membership layer's, tests/unit/
test_membership.py)."""

from __future__ import annotations

import pytest

from abcast.codec import EMPTY, Packet
from abcast.errors import LocalProtocolError
from abcast.events import JoinRequested, Received, ViewInstalled
from abcast.ids import View
from abcast.ordering.sequencer import Sequencer
from abcast.ordering.sequencer_state import FLOW_TRANSITIONS, ROLE_TRANSITIONS, Flow, Role
from abcast.ordering.sequencer_wire import SData, SOrder, VcInstall, VcPrepare

VIEW = View(1, ("n1", "n2", "n3"))


def _member(node: str = "n2", **options: bool) -> Sequencer:
    layer = Sequencer(node, **options)
    layer.handle(ViewInstalled(VIEW), 0)
    return layer


def test_every_phase_has_a_row() -> None:
    assert set(ROLE_TRANSITIONS) == set(Role)
    assert set(FLOW_TRANSITIONS) == set(Flow)


def test_a_transition_the_table_does_not_list_is_refused() -> None:
    layer = _member()
    layer.st.go_role(Role.STOPPED)
    with pytest.raises(LocalProtocolError, match="stopped → member"):
        layer.st.go_role(Role.MEMBER)
    with pytest.raises(LocalProtocolError, match="merging → flushing"):
        layer.st.go_flow(Flow.MERGING)
        layer.st.go_flow(Flow.FLUSHING)


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


def test_a_flush_freezes_a_member_and_its_install_thaws_it() -> None:
    layer = _member(evs=True)
    layer.handle(Received("n1", VcPrepare(2, 1, ["n1", "n2"]), EMPTY), 10)
    snap = layer.inspect()
    assert snap.phase == "flushing"
    assert snap.clock["answered"] == {"target": 2, "attempt": 1, "coordinator": "n1"}
    install = VcInstall(2, 1, ["n1", "n2"], 1, [], [], 0)
    layer.handle(Received("n1", install, EMPTY), 20)
    assert layer.inspect().phase == "steady"
    assert layer.view == View(2, ("n1", "n2"))


def test_a_joiner_is_joining_until_welcomed() -> None:
    layer = Sequencer("n4", evs=True)
    layer.handle(ViewInstalled(View(0, ("n4",))), 0)
    layer.handle(JoinRequested(("n1",)), 0)
    assert layer.inspect().phase == "joining"
    assert layer.status == "joining"
