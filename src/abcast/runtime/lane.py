"""The native lane in the runtime: which groups' frames the C extension may step.

Rules. `abcast._lane` (src/abcast/_native/lane_module.c; docs/performance.md §5) does a
steady frame's whole stack step in one C call, on the layers' own state, and declines —
changing nothing — whatever it does not handle. Today: a sequencer group's steady
frames (an order at a member, a member's data at a member or at the sequencer) and its
own broadcasts. A node offers a frame to it first, and its driver a broadcast, when

- the extension is built (`pip install -e .` builds it where a C compiler is found; a
  checkout run with PYTHONPATH=src needs `bench/build_native.py`) and from the sources in
  the checkout (a stale build is refused here, not run),
- the lane is not switched off (`ABCAST_NATIVE_LANE=0` in the environment: the bench's
  A/B and anyone who wants the pure-Python path),
- the group's stack is the runtime's sequencer shape (`eligible`), and metrics are off.

Otherwise, and for every frame it declines, the Python path runs as before. A tcp://
connection admitted without a handshake offers each read to `PUMP` first, which takes a
read of whole frames to `RECEIVE` without the Python path's framing and dispatch (and
hands the first frame `RECEIVE` declines, with the rest of the read, to that path), and
a lane step's packets are written by `CARRY_OUT` where tcp:// would write them at once.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, NamedTuple

from abcast.membership.layer import Membership
from abcast.native_sources import source_hash
from abcast.ordering._open_channel import OpenChannel
from abcast.ordering._open_detector import OpenDetector
from abcast.ordering.sequencer import Sequencer
from abcast.stack import Stack

if TYPE_CHECKING:
    from abcast.runtime.driver import GroupDriver

#: receive(frame, peer, lanes, now) -> (driver, outputs) | None
Receive = Callable[[bytes, "str | None", "dict[str, tuple[GroupDriver, Stack]]", int],
                   "tuple[GroupDriver, list[Any]] | None"]

#: broadcast(stack, payload, now) -> outputs | None
Broadcast = Callable[[Stack, bytes, int], "list[Any] | None"]

#: pump(connection, data, node) -> bool: a tcp:// read's frames to `receive` (lane_pump.c)
Pump = Callable[[Any, bytes, Any], bool]

#: carry_out(driver, outputs, now): a step's outputs to its driver, its packets written
#: by C where tcp:// would write them at once (lane_write.c)
CarryOut = Callable[[Any, "list[Any]", int], None]

#: backpressured(stack) -> bool | None: `stack.backpressured()` for the lane's stack shape
Backpressured = Callable[[Stack], "bool | None"]


class Lane(NamedTuple):
    """The extension's entry points the runtime uses (each None when the lane is off)."""

    receive: Receive | None
    broadcast: Broadcast | None
    pump: Pump | None
    carry_out: CarryOut | None
    backpressured: Backpressured | None
    status: str

SWITCH = "ABCAST_NATIVE_LANE"


def _load() -> Lane:
    """The extension's entry points, or None for each and why not."""
    if os.environ.get(SWITCH, "1") == "0":
        return Lane(None, None, None, None, None, f"switched off ({SWITCH}=0)")
    try:
        from abcast import _lane
    except ImportError as exc:
        return Lane(None, None, None, None, None, f"abcast._lane is not built ({exc})")
    stale = _stale(_lane.SOURCE_HASH)
    if stale:
        return Lane(None, None, None, None, None, stale)
    return Lane(_lane.receive, _lane.broadcast, _lane.pump, _lane.carry_out,
                _lane.backpressured, "on")


def _stale(built: str) -> str:
    """Why the build is not from this checkout's sources ('' if it is, or if the sources
    are not here to compare: an installed wheel)."""
    expected = source_hash()
    if expected is None or expected == built:
        return ""
    return (f"abcast._lane was built from other sources ({built}; these are {expected}): "
            f"rebuild it (pip install -e . or bench/build_native.py)")


#: the lane's steps, None when it is not on; STATUS says which and why. PUMP takes a
#: tcp:// read's frames to RECEIVE without the Python path's glue (the node installs it
#: as its transport's `frame_pump`); CARRY_OUT hands a lane step's outputs to its driver
#: and writes its packets itself where tcp:// would write them at once (the pump's
#: frames, the driver's lane broadcasts); BACKPRESSURED answers the driver's question
#: before a broadcast
RECEIVE, BROADCAST, PUMP, CARRY_OUT, BACKPRESSURED, STATUS = _load()


def eligible(stack: Stack) -> bool:
    """Is `stack` the shape the lane steps: the runtime's sequencer stack, built without
    the options the lane declines every frame of (optimistic, safe or evs, causal,
    relay; they are fixed when the stack is built)?"""
    layers = stack.layers
    if not (len(layers) == 3 and type(layers[0]) is OpenDetector
            and type(layers[1]) is OpenChannel and type(layers[2]) is Membership):
        return False
    ordering = layers[2].ordering
    if type(ordering) is not Sequencer:
        return False
    st = ordering.st
    return st.optimistic is None and not (st.safe or st.causal or st.relay)
