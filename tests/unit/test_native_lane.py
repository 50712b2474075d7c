"""The native lane (`abcast._lane`) does exactly what the Python path does, or nothing.

The lane is C for a runtime-shaped sequencer stack's steady steps (OpenDetector,
OpenChannel, Membership(Sequencer)). `receive(frame, peer, lanes, now)` takes the
sequencer's order at a member (`[Fd, RData, SOrder]`, no bodies) and a member's data
(`[Fd, RData, SData]`; at the sequencer with the one-id order it causes), and
`broadcast(stack, payload, now)` a steady broadcast (its data, at the sequencer its
order and delivery). Each either does what `stack.receive(decode_envelope(frame), now)`
or `stack.broadcast(payload, now)` does — the detector's stamps, the channel's steps
(in sequence, a carried ack freeing unacked packets and sampling their round trip, an
ack owed or piggybacked, packets numbered and kept), the membership layer's steady
check, `on_order`/`on_data`/`admit`/`announce`, `deliver_ready`, the frames encoded —
and returns its outputs, or answers None ("not mine") having changed nothing, and the
caller runs the Python path.

Rules: two groups of three stacks (n1 the sequencer) are driven through one seeded
history. Group A takes every frame and broadcast by the Python path; group B offers each
frame to `receive` (`{GROUP: (tag, stack)}`, the link's source as its peer) and each
broadcast to `broadcast` first, and falls back to the Python path when it declines.
After every step both groups' outputs (frames byte for byte), refusals (or the
DecodeError of bytes that are no frame) and states must be equal, compared as their
reprs (types too): every layer's snapshot, the detector's per-peer records, the
channel's links (owed acks, unacked packets, progress, RTO), tick and guest sets, the
sequencer's state (numbers, bodies, delivered, log, admission, `now`, ...) and the
membership layer's `now` and status. A failure names the seed and the step. Around each
call the reference counts of the stack's objects the lane reads, and of the tag, must
not move (a leak or an extra release in C).

Histories: broadcasts from all three nodes (so orders carry acks that free the members'
unacked packets), frames delivered in random interleavings FIFO per link, some held back
behind a later one or delivered twice (holes and duplicates: the channel's step
declines), some in another msgpack writer's encoding (non-minimal ints, lengths), a
wrong `peer`, a stranger's frames, clock jumps and timers firing, a node cut off (or
every link stalled) past the detector's timeout with the ticks on time (suspicions,
restores, view changes: a member removed, once n1 itself, so that n2 numbers), n3
leaving in some; and hostile frames (lane_frames.py: orders that clash, ack too much,
carry bodies, payloads or flags, a member's data of every sort, another group's,
damaged bytes, ...), each tried on deep copies of both groups' stack (the history goes
on unharmed) and, late in a history, on the stacks themselves. Frames the lane must
decline whatever it would do with them (a wrong peer, a stranger's, another group's,
the kinds in DECLINE) are asserted declined. Stacks of the family it is not for (relay,
safe, evs, causal-total, optimistic, one built without `for_streams`) are compared the
same way and must have none of their own frames or broadcasts taken. The lane must take
often and decline often.

`run` drives the C lane or its Python model (lane_model.StandIn) alike:
test_native_lane_planted.py shows that this comparison catches each planted bug of
either, and that the lane takes exactly what the model takes.
"""

from __future__ import annotations

import dataclasses
import random
import sys
from collections.abc import Callable, Iterator
from typing import Any, Protocol

import msgspec
import pytest
from lane_frames import DECLINE, HOSTILE, core_of, hostile
from lane_model import Lanes
from stack_harness import (
    Links,
    Timers,
    carry,
    channel_links,
    clone,
    fields_of,
    fire_due,
    repack,
)

from abcast.codec import Packet, decode_envelope, encode_frame
from abcast.effects import Deliver, Output
from abcast.errors import DecodeError, RemoteProtocolError
from abcast.group.failure_detector import FD
from abcast.ids import NodeId, View
from abcast.membership import Membership
from abcast.native_sources import source_hash
from abcast.ordering._open_channel import OpenChannel
from abcast.ordering._open_detector import OpenDetector
from abcast.ordering.registry import OrderingOptions, build_stack
from abcast.ordering.sequencer import Sequencer
from abcast.ordering.sequencer_state import OptimisticConfig
from abcast.ordering.sequencer_wire import SData, SOrder
from abcast.reliability.channel import RData
from abcast.runtime.stack_options import STREAM_CHANNEL, for_streams
from abcast.stack import Stack

NOT_BUILT = ("abcast._lane is not built (in a checkout: `PYTHONPATH=$PWD/src python "
             "bench/build_native.py`); the runtime runs the Python path alone")

NODES = ("n1", "n2", "n3")
GROUP = "g"
VIEW = View(1, NODES)
SEEDS = range(12)
STEPS = 500
#: the runtime's stack, and the same with a 1 ms tick (more standalone acks, more ticks
#: between the clock's jumps: the channel's step meets more states)
RUNTIME = for_streams(OrderingOptions())
FAST_TICK = for_streams(OrderingOptions(
    channel=dataclasses.replace(STREAM_CHANNEL, ack_delay_us=2_000, tick_us=1_000)))
#: the sequencer orders what it admitted in 2 ms at once: orders of several ids
BATCHED = for_streams(OrderingOptions(order_interval_ms=2))
#: small frames (1 KiB of room: broadcasts at and past it, some in fragments), a small
#: window (full now and then: packets wait for credit) and max_unstable (the sequencer
#: holds ids for its order timer)
TIGHT = for_streams(OrderingOptions(max_unstable=4, channel=dataclasses.replace(
    STREAM_CHANNEL, ack_delay_us=2_000, tick_us=1_000, frame_bytes=2048, window=16)))
#: a seed's options
OPTIONS = (FAST_TICK, RUNTIME, BATCHED, TIGHT)
#: the clock's steps (µs): past the detector's 1 s timeout now and then
JUMPS = (300, 1_000, 1_000, 3_000, 3_000, 10_000, 10_000, 25_000, 60_000, 300_000, 1_100_000)


class Lane(Protocol):
    """`abcast._lane`'s interface (src/abcast/_lane.pyi)."""

    def receive(self, frame: bytes, peer: str | None, lanes: Lanes, now: int, /,
                ) -> tuple[Any, list[Any]] | None: ...
    def broadcast(self, stack: Any, payload: bytes, now: int, /) -> list[Any] | None: ...
    def backpressured(self, stack: Any, /) -> bool | None: ...
    def counts(self) -> dict[str, int]: ...
    def reset_counts(self) -> None: ...
    def plant(self, k: int, /) -> None: ...


LANE: Lane | None
try:
    from abcast import _lane
    LANE = _lane
except ImportError:  # the extension is optional: a machine without a compiler
    LANE = None


@pytest.fixture
def lane() -> Iterator[Lane]:
    """The C lane, no bug planted (and none left planted after the test)."""
    if LANE is None:
        pytest.skip(NOT_BUILT)
    built, expected = getattr(LANE, "SOURCE_HASH", None), source_hash()
    if expected is not None and built != expected:  # else the tests would judge old code
        pytest.fail(f"abcast._lane was built from other sources ({built}; these are "
                    f"{expected}): rebuild it (bench/build_native.py)")
    LANE.plant(0)
    try:
        yield LANE
    finally:
        LANE.plant(0)


# -- the two groups and what is compared ---------------------------------------------


def group(ordering: str = "sequencer", options: OrderingOptions | None = RUNTIME,
          ) -> dict[NodeId, Stack]:
    return {node: build_stack(node, GROUP, ordering, VIEW, options) for node in NODES}


def state(stack: Stack) -> dict[str, str]:
    """Everything the lane may touch, and the rest of each layer's state the tests of
    the shortcuts compare: named parts, so that a failure says which differs, each as
    its repr (so that a `1` for a `True`, a tuple for a `MsgId`, or a dict filled in
    another order differs too)."""
    detector, channel, top = stack.layers
    assert isinstance(detector, OpenDetector) and isinstance(top, Membership)
    parts: dict[str, object] = {"snapshots": stack.inspect(), "view": stack.view,
                                "broadcasts": stack.broadcasts}
    parts["detector"] = detector._s  # per peer: last_heard, suspected, claim, ...
    if isinstance(channel, OpenChannel):
        parts["channel links"] = channel_links(channel)
        parts["channel tick"] = (channel._tick_set, channel._tick_at)
        # what channel_links leaves out: the packets kept for retransmission (as the
        # lane built them), those waiting for credit, the per-link RTO marks
        parts["channel packets"] = [
            (peer, list(link.unacked.items()), list(link.waiting), link.rto_armed_at,
             link.resumed_through, link.timer) for peer, link in sorted(channel._out.items())]
        parts["channel peers"] = (sorted(channel._steady), sorted(channel._guests),
                                  sorted(channel._lingering), sorted(channel._heard.items()),
                                  sorted(channel._spoke.items()))
    s = top.s
    parts["membership"] = (s.now, s.status, s.frozen, s.view, sorted(s.suspects),
                           len(s.buffered), s.queued, len(s.timers))
    core = top.ordering
    if isinstance(core, Sequencer):
        st = core.st
        fields = {k: v for k, v in fields_of(st).items() if k not in ("admission", "optimistic")}
        fields["admission"] = fields_of(st.admission)
        parts["sequencer"] = fields
    return {name: repr(part) for name, part in parts.items()}


def held_objects(stack: Stack, peer: str | None) -> list[object]:
    """The stack's objects the lane reads (the frame's peer's records among them): their
    reference counts must be the same after its call as before, taken or declined."""
    detector, channel, top = stack.layers
    objects: list[object] = [stack, stack.layers, detector, channel, top]
    if isinstance(detector, OpenDetector):
        objects += [detector._s, detector._s.peers, detector._s.peers.get(peer or "")]
    if isinstance(channel, OpenChannel):
        objects += [channel._in, channel._out, channel._steady,
                    channel._in.get(peer or ""), channel._out.get(peer or "")]
    if isinstance(top, Membership):
        objects += [top.s, top.s.view, top.ordering]
        if isinstance(top.ordering, Sequencer):
            st = top.ordering.st
            objects += [st, st.view, st.numbers, st.bodies, st.delivered, st.log, st.deps_of]
    return [o for o in objects if o is not None]


def refusal(error: RemoteProtocolError | None) -> object:
    if error is None:
        return None
    return type(error).__name__, str(error), getattr(error, "__notes__", [])


def group_of(frame: bytes) -> str | None:
    """The group `frame` is of, or None where it does not decode."""
    try:
        return decode_envelope(frame).group
    except DecodeError:
        return None


def claims(frame: bytes, node: NodeId) -> bool:
    """`frame` decodes and claims to come from `node`. (`Stack.receive` of a frame
    claiming the receiver's own id raises LocalProtocolError: its detector answers the
    "stranger" with a NotMember to itself. The runtime refuses such a frame first where
    the connection's peer is known, and the lane declines it for the peer it is given.)"""
    try:
        return decode_envelope(frame).sender == node
    except DecodeError:
        return False


def order_from_leader(stack: Stack, frame: bytes) -> bool:
    """`frame` decodes, for `stack`, to an order from the view's leader."""
    try:
        env = decode_envelope(frame)
        headers = stack.codec.headers(env)
    except DecodeError:
        return False
    return env.sender == stack.view.leader and type(headers[-1]) is SOrder


class MismatchError(AssertionError):
    """Where the two groups parted: the seed, the step and what differs."""


@dataclasses.dataclass
class Tally:
    calls: int = 0  # frames offered to the lane
    orders: int = 0  # of which order frames from the sequencer
    forged: int = 0  # of which hostile frames (`attack`)
    taken: int = 0
    forged_taken: int = 0
    delivered: int = 0  # deliveries among the outputs of frames the lane took
    broadcasts: int = 0  # broadcasts offered to the lane
    broadcasts_taken: int = 0
    pressed: int = 0  # checks at which the lane (and the stack) said backpressured
    unpressed: int = 0


class Pair:
    """Group A (the Python path) and group B (the lane first), driven in lock-step;
    `check` compares them after each step."""

    def __init__(self, seed: int, lane: Lane, ordering: str = "sequencer",
                 options: OrderingOptions | None = RUNTIME) -> None:
        self.seed = seed
        self.lane = lane
        self.a, self.b = group(ordering, options), group(ordering, options)
        self.links: Links = {}  # group A's; B's frames are equal, or `check` failed
        self.timers_a: Timers = {}
        self.timers_b: Timers = {}
        self.now = 0
        self.step_no = 0
        self.label = "start"
        self.tally = Tally()
        self.forging = False  # the frames offered are `attack`'s

    # -- what both groups do ----------------------------------------------------------
    def fail(self, what: str) -> MismatchError:
        return MismatchError(f"seed {self.seed}, step {self.step_no} ({self.label}): {what}")

    def check(self, outputs_a: object, outputs_b: object, nodes: tuple[NodeId, ...] = (),
              a: dict[NodeId, Stack] | None = None, b: dict[NodeId, Stack] | None = None,
              ) -> None:
        """Equal outputs, and equal states of `nodes` (all: ())."""
        nodes = nodes or tuple(self.a)
        if outputs_a != outputs_b or repr(outputs_a) != repr(outputs_b):
            raise self.fail(f"outputs differ:\n python {outputs_a!r}\n lane   {outputs_b!r}")
        for node in nodes:
            stack_b = (b or self.b)[node]
            pressure = self.lane.backpressured(stack_b)  # the driver's question, in C
            if pressure is None or pressure != stack_b.backpressured():
                raise self.fail(f"{node}: the lane says backpressured {pressure}, the "
                                f"stack {stack_b.backpressured()}")
            if pressure:
                self.tally.pressed += 1
            else:
                self.tally.unpressed += 1
            state_a, state_b = state((a or self.a)[node]), state(stack_b)
            if state_a != state_b:
                parts = [k for k in state_a if state_a[k] != state_b[k]]
                first = parts[0]
                raise self.fail(f"{node}'s {', '.join(parts)} differ:\n python "
                                f"{state_a[first]!r}\n lane   {state_b[first]!r}")

    def both(self, label: str, node: NodeId, call: Callable[[Stack], list[Output]]) -> None:
        """The same call on both groups' `node` (not a frame: no lane)."""
        self.label = label
        out_a, out_b = call(self.a[node]), call(self.b[node])
        carry(node, out_a, self.links, self.timers_a, self.a)
        carry(node, out_b, {}, self.timers_b, self.b)
        self.check(out_a, out_b)

    def broadcast(self, node: NodeId, payload: bytes) -> None:
        """`node` broadcasts: A's by `Stack.broadcast`, B's by the lane's `broadcast` or,
        when it declines, `Stack.broadcast`."""
        self.label = f"broadcast at {node}"
        stack_b = self.b[node]
        self.tally.broadcasts += 1
        objects = held_objects(stack_b, None)
        refs = [sys.getrefcount(o) for o in objects]
        taken = self.lane.broadcast(stack_b, payload, self.now)
        if [sys.getrefcount(o) for o in objects] != refs:
            raise self.fail("the lane's broadcast left the references to the stack's "
                            "objects changed")
        self.tally.broadcasts_taken += taken is not None
        out_b = taken if taken is not None else stack_b.broadcast(payload, self.now)[1]
        out_a = self.a[node].broadcast(payload, self.now)[1]
        carry(node, out_a, self.links, self.timers_a, self.a)
        carry(node, out_b, {}, self.timers_b, self.b)
        self.check(out_a, out_b)

    def offer(self, frame: bytes, peer: NodeId | None, dst: NodeId,
              a: dict[NodeId, Stack] | None = None, b: dict[NodeId, Stack] | None = None,
              *, carried: bool = True, declines: bool = False, routed: bool = True,
              ) -> None:
        """`frame` arrives at `dst` over `peer`'s connection: A's by the Python path, B's
        by the lane or, when it declines, the Python path. `a`/`b`: other stacks (copies)
        than the groups'; `carried`: its outputs go onto the links and timer tables;
        `declines`: the lane must decline it (where taking it would give the Python
        path's outputs all the same, the comparison could not tell); `routed`: a runtime
        would hand it to this stack (not: a frame of another group, which the lane must
        decline and nothing else sees)."""
        a, b = a or self.a, b or self.b
        self.tally.calls += 1
        if routed and group_of(frame) not in (None, GROUP):  # the harness's slip, not the lane's
            raise AssertionError(f"seed {self.seed}, step {self.step_no} ({self.label}): a "
                                 f"frame of group {group_of(frame)!r} routed to {GROUP!r}")
        if claims(frame, dst):  # a runtime refuses it: the connection is not from itself
            routed = False  # (and the Python path raises LocalProtocolError: see `claims`)
        if order_from_leader(b[dst], frame):
            self.tally.orders += 1
        self.tally.forged += self.forging
        tag = object()
        objects = held_objects(b[dst], peer)
        refs = [sys.getrefcount(o) for o in objects]
        taken = self.lane.receive(frame, peer, {GROUP: (tag, b[dst])}, self.now)
        if [sys.getrefcount(o) for o in objects] != refs:
            raise self.fail("the lane's call left the references to the stack's objects "
                            "changed (a reference leaked or one too many released)")
        if taken is not None:
            if type(taken) is not tuple or len(taken) != 2 or taken[0] is not tag:
                raise self.fail(f"the lane answered {taken!r}, not (tag, outputs)")
            if declines or not routed:
                raise self.fail(f"the lane took a frame it must decline: {taken!r}")
            self.tally.taken += 1
            self.tally.forged_taken += self.forging
            self.tally.delivered += sum(type(o) is Deliver for o in taken[1])
            got_b: object = (taken[1], None)
            taken = None
        else:
            got_b = self.python(b[dst], frame) if routed else None
        if sys.getrefcount(tag) != 2:  # `tag`'s and getrefcount's
            raise self.fail("the lane keeps a reference to the tag")
        got_a = self.python(a[dst], frame) if routed else None
        if carried:
            for got, stacks, links, timers in ((got_a, self.a, self.links, self.timers_a),
                                               (got_b, self.b, {}, self.timers_b)):
                if isinstance(got, tuple) and isinstance(got[0], list):
                    carry(dst, got[0], links, timers, stacks)
        self.check(got_a, got_b, (dst,), a, b)

    def python(self, stack: Stack, frame: bytes) -> object:
        try:
            env = decode_envelope(frame)
        except DecodeError as exc:
            return "not a frame", str(exc)
        outputs, refused = stack.receive(env, self.now)
        return outputs, refusal(refused)

    def fire(self) -> None:
        """Both groups' due timers (equal tables, or a step before failed)."""
        self.label = "timers"
        if self.timers_a != self.timers_b:
            raise self.fail(f"timers differ: {self.timers_a} != {self.timers_b}")
        fired_a: list[tuple[str, NodeId, list[Output]]] = []
        fired_b: list[tuple[str, NodeId, list[Output]]] = []

        def step_a(label: str, node: NodeId, outputs: list[Output]) -> None:
            fired_a.append((label, node, outputs))
            carry(node, outputs, self.links, self.timers_a, self.a)

        def step_b(label: str, node: NodeId, outputs: list[Output]) -> None:
            fired_b.append((label, node, outputs))
            carry(node, outputs, {}, self.timers_b, self.b)

        fire_due(self.a, self.timers_a, self.now, step_a)
        fire_due(self.b, self.timers_b, self.now, step_b)
        self.check(fired_a, fired_b)

    def copies(self, dst: NodeId) -> tuple[dict[NodeId, Stack], dict[NodeId, Stack]]:
        """Deep copies of both groups' `dst`, for hostile frames that must not harm the
        history."""
        return {dst: clone(self.a[dst])}, {dst: clone(self.b[dst])}


# -- the histories -------------------------------------------------------------------


def run(seed: int, lane: Lane, ordering: str = "sequencer",
        options: OrderingOptions | None = RUNTIME, steps: int = STEPS) -> Tally:
    """One seeded history through both groups; raises MismatchError at the first step where
    they part. The lane's counts must agree with what it answered."""
    rng = random.Random(seed)
    pair = Pair(seed, lane, ordering, options)
    lane.reset_counts()
    leaves = ordering == "sequencer" and seed % 4 == 3  # NODES[2] leaves, mid-history
    for node in NODES:
        pair.both("start", node, lambda stack: stack.start(0))
    for i in range(steps):
        pair.step_no = i
        roll = rng.random()
        if leaves and i == steps // 2:
            pair.both(f"{NODES[2]} leaves", NODES[2], lambda stack: stack.leave(pair.now))
        elif roll < 0.12:
            node = rng.choice([n for n in NODES if status(pair.a[n]) in ("member", "leaving")])
            room = pair.a[node].layers[1]._room  # type: ignore[attr-defined]
            size = (rng.randint(room - 40, room + 10) if room < 10_000 and rng.random() < 0.2
                    else rng.randint(0, 40))  # (a small room: TIGHT's)
            pair.broadcast(node, rng.randbytes(size))
        elif roll < 0.82:
            deliver(pair, rng)
        elif roll < 0.84:  # a stranger's data or order: the lane is not its
            dst = rng.choice(NODES)
            header = rng.choice((SData(1), SOrder(1, [("x9", 1)])))
            pair.label = f"stranger at {dst}"
            frame = encode_frame(GROUP, "x9", Packet((FD, RData(1), header), b"?"))
            pair.offer(frame, "x9", dst, declines=True)
        elif roll < 0.887:
            pair.forging = True
            attack(pair, rng, inline=i > steps * 0.8 and rng.random() < 0.3)
            pair.forging = False
        elif roll < 0.89:
            cut_off(pair, rng, rng.choice((None, *NODES)))
        elif roll < 0.9:
            settle(pair)
        else:
            pair.now += rng.choice(JUMPS)
            pair.fire()
    pair.label = "the end"
    pair.check(None, None)
    counts, tally = lane.counts(), pair.tally
    want = {"taken": tally.taken + tally.broadcasts_taken, "frames": tally.taken,
            "broadcasts": tally.broadcasts_taken,
            "declined": tally.calls - tally.taken + tally.broadcasts - tally.broadcasts_taken}
    if {k: counts.get(k) for k in want} != want:
        raise pair.fail(f"the lane counted {counts}, it answered {want}")
    return pair.tally


def status(stack: Stack) -> str:
    top = stack.layers[2]
    assert isinstance(top, Membership)
    return top.s.status


def settle(pair: Pair) -> None:
    """Every frame delivered in order and the timers run for 80 ms: the channels' acks
    go out and their ticks stop (the lone message's case: a broadcast then finds its
    channel's tick unset and must take the Python path, which sets it)."""
    for _ in range(8):
        for (src, dst), frames in sorted(pair.links.items()):
            while frames:
                pair.label = f"settling: frame {src}->{dst}"
                pair.offer(frames.pop(0), src, dst)
        pair.now += 10_000
        pair.fire()


def cut_off(pair: Pair, rng: random.Random, node: NodeId | None) -> None:
    """`node` cut off (None: every link stalled) for a little over the detector's
    timeout, every node's ticks on time: it is suspected (and a view change without it
    may begin, or end); its frames, let through again, take the suspicion back, or meet
    the new view."""
    for _ in range(rng.randint(20, 28)):
        pair.now += 45_000  # under the detector's period: no tick is late, no stall
        pair.fire()
        for _ in range(3 if node is not None else 0):
            deliver(pair, rng, node)


def deliver(pair: Pair, rng: random.Random, cut: NodeId | None = None) -> None:
    """A frame off a link (none of `cut`'s), FIFO; now and then the one behind it first
    (a hole), the same one again later (a duplicate), or offered with the wrong peer."""
    ready = sorted(link for link, frames in pair.links.items() if frames and cut not in link)
    if not ready:
        return
    src, dst = rng.choice(ready)
    frames = pair.links[(src, dst)]
    index = 1 if len(frames) > 1 and rng.random() < 0.08 else 0
    frame = frames.pop(index)
    if rng.random() < 0.05:
        frames.insert(rng.randint(0, len(frames)), frame)
    if rng.random() < 0.05:  # another msgpack writer's bytes for the same frame
        frame = repack(msgspec.msgpack.decode(frame), rng)
    peer: NodeId | None = src
    if rng.random() < 0.04:
        peer = rng.choice((None, *(n for n in NODES if n != src)))
    pair.label = f"frame {src}->{dst}" + (" held back" if index else "") + (
        f" over {peer}'s connection" if peer != src else "")
    pair.offer(frame, peer, dst, declines=peer != src)


def attack(pair: Pair, rng: random.Random, inline: bool) -> None:
    """Hostile frames at a member, on copies of it (the history goes on unharmed), or,
    late in a history, on the member itself."""
    kind = rng.choice(HOSTILE)
    view = max((core_of(stack).st.view or VIEW for stack in pair.a.values()),
               key=lambda v: v.view_id)  # the latest
    dst = view.leader if kind in ("order at the sequencer", "data at the sequencer") else (
        rng.choice([n for n in NODES if n != view.leader]))
    dst_view = core_of(pair.a[dst]).st.view or VIEW
    if kind in ("order from a member", "order at the sequencer") and len(dst_view.members) < 3:
        kind = "plausible order"  # no member besides it and the sequencer
    waiting = pair.links.get((dst_view.leader, dst))
    real = waiting[0] if waiting else None
    frames = hostile(kind, pair.a[dst], rng, real, NODES)
    if inline:
        pair.label = f"{kind} at {dst}"
        for frame, peer in frames:
            pair.offer(frame, peer, dst, declines=kind in DECLINE,
                       routed=kind != "another group")
        return
    a, b = pair.copies(dst)
    for n, (frame, peer) in enumerate(frames):
        pair.label = f"{kind} at a copy of {dst} ({n + 1}/{len(frames)})"
        pair.offer(frame, peer, dst, a, b, carried=False, declines=kind in DECLINE,
                   routed=kind != "another group")


# -- the claims ----------------------------------------------------------------------


def taken_over(lane: Lane, seeds: range) -> Tally:
    total = Tally()
    for seed in seeds:
        got = run(seed, lane, options=OPTIONS[seed % len(OPTIONS)])
        for field in dataclasses.fields(Tally):
            setattr(total, field.name, getattr(total, field.name) + getattr(got, field.name))
    return total


@pytest.mark.parametrize("seed", SEEDS)
def test_the_lane_gives_the_python_paths_outputs_and_states(lane: Lane, seed: int) -> None:
    run(seed, lane, options=OPTIONS[seed % len(OPTIONS)])


def test_the_lane_is_taken_and_declines(lane: Lane) -> None:
    """The histories reach both answers often: orders it takes (delivering, and with
    acks that free unacked packets) and frames it leaves to the Python path."""
    tally = taken_over(lane, SEEDS)
    assert tally.taken - tally.forged_taken > 300, tally
    assert tally.calls - tally.taken > 1000, tally
    assert tally.delivered > 300, tally
    assert tally.pressed > 20 and tally.unpressed > 1000, tally  # `backpressured`, both ways


#: stacks whose order frames the lane must leave to the Python path
DECLINED = {
    "relay": ("sequencer", for_streams(OrderingOptions(relay=True))),
    "safe": ("sequencer", for_streams(OrderingOptions(safe=True))),
    "evs": ("sequencer", for_streams(OrderingOptions(partitions="evs"))),
    "causal-total": ("causal-total", for_streams(OrderingOptions())),
    "optimistic": ("optimistic", for_streams(OrderingOptions(optimistic=OptimisticConfig()))),
    "not the runtime's": ("sequencer", None),  # no tick: the channel's step never passes
}


@pytest.mark.parametrize("name", sorted(DECLINED))
def test_the_lane_declines_the_stacks_it_is_not_for(lane: Lane, name: str) -> None:
    """Compared as above, and none of the group's own frames or broadcasts taken. A
    relay group's orders carry their bodies, which the lane leaves alone; one forged
    without them is an order as in a plain group (`on_order` is the same), which the
    lane may take: the comparison judges it."""
    ordering, options = DECLINED[name]
    for seed in SEEDS[:2]:
        tally = run(seed, lane, ordering, options, steps=250)
        assert tally.taken == tally.forged_taken and not tally.broadcasts_taken, (name, tally)
        if name != "relay":
            assert tally.taken == 0, (name, tally)
        assert tally.orders > 20, (name, tally)


@pytest.mark.parametrize(("group_name", "nodes"), [
    ("gr\u00fcppe\U0001f600", ("\u00f11", "\u00f12", "\u00f13")),
    ("g" * 128, tuple("\u00e9" * 63 + str(i) for i in (1, 2, 3))),  # the longest names
])
def test_the_lane_reads_names_as_python_does(
    lane: Lane, monkeypatch: pytest.MonkeyPatch, group_name: str, nodes: tuple[str, ...],
) -> None:
    """Group and node names beyond ASCII and at their longest: the lane matches the
    frame's UTF-8 against Python's strings (the group's key, the peer, the view)."""
    module = sys.modules[__name__]
    monkeypatch.setattr(module, "GROUP", group_name)
    monkeypatch.setattr(module, "NODES", nodes)
    monkeypatch.setattr(module, "VIEW", View(1, nodes))
    assert run(1, lane, options=OPTIONS[1]).taken > 20
