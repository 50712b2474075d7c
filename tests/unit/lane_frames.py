"""Hostile frames for the native lane's differential test (test_native_lane.py), forged
on a member's state so that the channel's step would take them where the kind allows
(its next seq from the sender, an ack of what it sent) and the lane meets each of its
rules at the edge.

The kinds (`HOSTILE`, drawn at random by the test's `attack`): a plausible order, one
from a non-leader member or at the sequencer, one numbering a number known as another id
(alone, or after numbers it may take: the Python path refuses it half done), acks of the
last packet sent and above, bodies, a payload, the control flag, empty and long orders,
repeated and strangers' ids, numbers delivered already and new, the highest numbers,
defaults left out and any envelope flags (another writer's msgpack, read alike), a
member's data (new, sent again, held already, at the sequencer, from the receiver
itself, at the highest seq, large), a frame of another group, a real frame re-encoded,
truncated, damaged or with a trailing byte. `DECLINE`: the kinds the lane must decline
whatever it would do with them.
"""

from __future__ import annotations

import random
from functools import partial

import msgspec
from stack_harness import repack

from abcast.codec import Packet, encode_frame
from abcast.group.failure_detector import FD
from abcast.ids import NodeId, View
from abcast.membership import Membership
from abcast.ordering._open_channel import OpenChannel
from abcast.ordering.sequencer import Sequencer
from abcast.ordering.sequencer_wire import SData, SOrder
from abcast.reliability.channel import RData
from abcast.stack import Stack


def order_frame(group: str, sender: NodeId, seq: int, ack: int, order: SOrder, *,
                payload: bytes = b"", control: bool = False) -> bytes:
    return encode_frame(group, sender, Packet((FD, RData(seq, ack), order), payload),
                        control=control)


def core_of(stack: Stack) -> Sequencer:
    top = stack.layers[2]
    assert isinstance(top, Membership) and isinstance(top.ordering, Sequencer)
    return top.ordering


def next_in(stack: Stack, sender: NodeId) -> int:
    """The channel seq `stack` takes next from `sender` (in sequence)."""
    channel = stack.layers[1]
    assert isinstance(channel, OpenChannel)
    link = channel._in.get(sender)
    return 1 if link is None else link.high + 1


def sent_to(stack: Stack, peer: NodeId) -> int:
    """The channel seq `stack` sends `peer` next (an ack of it is of a packet never sent)."""
    channel = stack.layers[1]
    assert isinstance(channel, OpenChannel)
    link = channel._out.get(peer)
    return 1 if link is None else link.next_seq


HOSTILE = ("order from a member", "clash", "clash", "clash after a new number",
           "clash after a new number", "ack above sent", "ack of the last sent", "bodies",
           "payload", "control flag", "another group", "truncated", "damaged",
           "trailing byte", "plausible order", "order at the sequencer", "empty order",
           "many ids", "a repeated id", "a stranger's id", "numbers delivered and new",
           "the highest numbers", "re-encoded", "data", "data", "data sent again",
           "data held", "data at the sequencer", "data from itself", "data of the highest seq",
           "data, large", "defaults left out", "flags")
#: of which the lane must decline whatever it would do with them (its kinds: the
#: sequencer's orders without bodies, a member's data at a member but the sequencer)
DECLINE = frozenset({"order from a member", "bodies", "order at the sequencer",
                     "data from itself"})


def hostile(kind: str, stack: Stack, rng: random.Random, real: bytes | None,
            nodes: tuple[NodeId, ...]) -> list[tuple[bytes, NodeId]]:
    """Frames of `kind` for member `stack` of a group of `nodes` (each frame with the peer
    it comes over): forged on its state, so that the channel's step would take them
    where the kind allows. (An order from a member needs a member besides the sequencer:
    see test_native_lane.attack.)"""
    me, st, group = stack.node, core_of(stack).st, stack.group
    forge = partial(order_frame, group)  # an order frame of `stack`'s group
    view = st.view or View(1, nodes)
    leader = view.leader  # the sequencer (after a view change without n1: n2)
    seq, ack = next_in(stack, leader), rng.choice((0, sent_to(stack, leader) - 1))
    ack = max(ack, 0)
    first = st.next_delivery
    fresh = (rng.choice(nodes), 10_000 + rng.randrange(100))
    known = sorted(at for at in st.numbers if at >= first)
    if kind in ("order at the sequencer", "order from a member"):
        other = next(n for n in view.members if n not in (me, leader))
        return [(forge(other, next_in(stack, other), 0, SOrder(first, [fresh])), other)]
    if kind == "clash":
        if known:  # a number known here (its body missing), numbered as another id
            at = rng.choice(known)
            start = max(first, at - rng.randint(0, 2))  # numbers before it taken, then refused
            ids = [(f"n{rng.randint(1, 3)}", 20_000 + i) for i in range(start, at + 1)]
            return [(forge(leader, seq, ack, SOrder(start, ids)), leader)]
        kind = "clash after a new number"
    if kind == "clash after a new number":  # the second numbers new ones, then clashes
        at = first + rng.randint(0, 3)
        start = rng.randint(first, at)
        ids = [("n1", 40_000 + i) for i in range(start, at)] + [("n3", 30_000)]
        return [(forge(leader, seq, ack, SOrder(at, [("n2", 30_000)])), leader),
                (forge(leader, seq + 1, 0, SOrder(start, ids)), leader)]
    if kind in ("ack above sent", "ack of the last sent"):
        above = sent_to(stack, leader) + (rng.randint(0, 3) if kind == "ack above sent" else -1)
        return [(forge(leader, seq, max(above, 0), SOrder(first, [fresh])), leader)]
    if kind == "bodies":
        return [(forge(leader, seq, ack, SOrder(first, [fresh], [b"body"])), leader)]
    if kind == "payload":
        return [(forge(leader, seq, ack, SOrder(first, [fresh]), payload=b"xyz"), leader)]
    if kind == "control flag":
        return [(forge(leader, seq, ack, SOrder(first, [fresh]), control=True), leader)]
    if kind == "another group":
        return [(order_frame("h", leader, seq, ack, SOrder(first, [fresh])), leader)]
    if kind == "plausible order":
        return [(forge(leader, seq, ack, SOrder(first, [fresh])), leader)]
    if kind == "empty order":
        return [(forge(leader, seq, ack, SOrder(first, [])), leader)]
    if kind == "many ids":
        ids = [(rng.choice(nodes), 50_000 + i) for i in range(rng.randint(5, 80))]
        return [(forge(leader, seq, ack, SOrder(first, ids)), leader)]
    if kind == "a repeated id":
        return [(forge(leader, seq, ack, SOrder(first, [fresh, fresh])), leader)]
    if kind == "a stranger's id":
        return [(forge(leader, seq, ack, SOrder(first, [("x9", 1), fresh])), leader)]
    if kind == "numbers delivered and new":  # the delivered ones are skipped
        back = rng.randint(1, 3)
        ids = [(rng.choice(nodes), 60_000 + i) for i in range(back + rng.randint(0, 2))]
        return [(forge(leader, seq, ack, SOrder(max(1, first - back), ids)), leader)]
    if kind == "the highest numbers":
        top = 2**62 - rng.randint(0, 2)
        return [(forge(leader, seq, ack, SOrder(top, [fresh, ("n2", 2**62)])), leader)]
    if kind.startswith("data"):
        return data_frames(kind, stack, rng, view)
    if kind in ("defaults left out", "flags"):  # RData's ack, SOrder's bodies unwritten;
        # the envelope's flags anything to 255: msgspec reads them alike
        rdata: list[object] = ["RData", seq] if kind == "defaults left out" else ["RData", seq, ack]
        order = ["SOrder", first, [list(fresh)]]
        flags = rng.randint(0, 255) if kind == "flags" else 0
        return [(msgspec.msgpack.encode([1, group, leader, flags, [["Fd"], rdata, order], b""]),
                 leader)]
    if kind == "re-encoded":  # the same frame, another msgpack writer's encoding
        frame = real or forge(leader, seq, ack, SOrder(first, [fresh]))
        return [(repack(msgspec.msgpack.decode(frame), rng), leader)]
    frame = real or forge(leader, seq, ack, SOrder(first, [fresh]))
    if kind == "truncated":
        return [(frame[:rng.randrange(len(frame))], leader)]
    if kind == "trailing byte":
        return [(frame + b"\x00", leader)]
    assert kind == "damaged"
    damaged = bytearray(frame)
    damaged[rng.randrange(len(damaged))] ^= 1 << rng.randrange(8)
    return [(bytes(damaged), leader)]


def data_frames(kind: str, stack: Stack, rng: random.Random, view: View,
                ) -> list[tuple[bytes, NodeId]]:
    """A member's data at `stack`: new, its body held or delivered already, from `stack`
    itself, at the highest seq, large."""
    me, st = stack.node, core_of(stack).st
    origin = me if kind == "data from itself" else rng.choice(
        [n for n in view.members if n != me] or [me])
    done = st.delivered.get(origin, 0)
    held = sorted(mid.seq for mid in st.bodies if mid.origin == origin)
    seq = done + rng.randint(1, 3)
    if kind == "data sent again" and done:
        seq = rng.randint(1, done)
    elif kind == "data held" and held:
        seq = rng.choice(held)
    elif kind == "data of the highest seq":
        seq = 2**62
    payload = rng.randbytes(3_000 if kind == "data, large" else rng.randint(0, 20))
    ack = rng.choice((0, sent_to(stack, origin) - 1))
    frame = encode_frame(stack.group, origin, Packet(
        (FD, RData(next_in(stack, origin), max(ack, 0)), SData(seq)), payload))
    return [(frame, origin)]
