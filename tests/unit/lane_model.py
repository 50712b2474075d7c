"""The native lane (`abcast._lane`) modelled in Python: `StandIn` takes what the lane's
source says it takes, by `stack.receive` or `stack.broadcast`, and declines (None, nothing
changed) the rest.

It takes the sequencer's order without bodies at a member, a member's data (at the
sequencer, a new id only where it is admitted and numbered at once, alone) from a sender
its detector does not suspect, and a steady broadcast; each only where the channel's step
is the plain one: its tick set, a frame in sequence acking only what was sent, nobody
waiting for credit, room in the window, the size gate's bound known (`fits`,
`admits_alone`, `goes_down`).

With `plant(k)` the model makes, around that call, the same bug as the C lane's plant k
(1-6), and one of its own (7: a reference to the sender's link kept, a leak in C). It
proved the differential harness while the C lane was being written, still shows that
the comparison catches each kind of bug where the extension is not built, and pins what
the lane takes: test_native_lane.py's `run` drives it (or the C lane) through a history,
test_native_lane_planted.py plants its bugs and compares what it takes with the lane.
"""

from __future__ import annotations

from typing import Any

from abcast.codec import decode_envelope
from abcast.effects import Output
from abcast.errors import DecodeError
from abcast.group.failure_detector import FD
from abcast.ids import MsgId, NodeId
from abcast.membership import Membership
from abcast.ordering._open_channel import OpenChannel
from abcast.ordering._open_detector import OpenDetector
from abcast.ordering.sequencer import Sequencer
from abcast.ordering.sequencer_state import SequencerState
from abcast.ordering.sequencer_wire import SData, SOrder
from abcast.reliability.channel import RData
from abcast.stack import Stack

#: what the lane's `receive` is given: each group's key to its (tag, stack)
Lanes = dict[str, tuple[Any, Any]]
#: the size the lane allows a one-id order whose header has no fixed bound
ONE_ID_ORDER = 1024


def layers(stack: Stack) -> tuple[OpenDetector, OpenChannel, Membership, Sequencer] | None:
    """A runtime-shaped sequencer stack's layers, or None."""
    if len(stack.layers) != 3:
        return None
    detector, channel, top = stack.layers
    if (type(detector) is not OpenDetector or type(channel) is not OpenChannel
            or type(top) is not Membership or type(top.ordering) is not Sequencer):
        return None
    return detector, channel, top, top.ordering


class StandIn:
    """The lane in Python: what its source says it takes (the sequencer's order at a
    member; a member's data, at the sequencer with the one-id order it causes), taken by
    `stack.receive`; with `plant(k)` the same bug as the C lane's plant k, made around
    that call, and plant 7: a reference to the sender's link kept (a leak in C)."""

    def __init__(self) -> None:
        self.planted = 0
        self.taken = self.broadcasts = self.declined = 0
        self.kept: list[object] = []  # plant 7 (the model's own): a reference leaked

    def counts(self) -> dict[str, int]:
        return {"taken": self.taken + self.broadcasts, "frames": self.taken,
                "broadcasts": self.broadcasts, "declined": self.declined}

    def reset_counts(self) -> None:
        self.taken = self.broadcasts = self.declined = 0

    def backpressured(self, stack: Stack) -> bool | None:
        """The stack's own answer: the model of `_lane.backpressured`."""
        return stack.backpressured()

    def broadcast(self, stack: Stack, payload: bytes, now: int) -> list[Output] | None:
        """`stack.broadcast(payload, now)[1]` where the lane is to take it: a steady
        broadcast whose data (and at the sequencer its order) goes down every link by
        the channel's step, its tick set."""
        parts = layers(stack)
        if parts is None:
            self.declined += 1
            return None
        _, channel, top, core = parts
        st, me = core.st, stack.node
        seq = stack._next_seq
        at_leader = st.view is not None and st.view.leader == me
        if (top.s.status not in ("member", "leaving") or top.s.frozen or st.view is None
                or st.optimistic is not None or st.safe or st.causal or st.relay
                or not fits(channel, SData, len(payload))
                or (at_leader and not admits_alone(channel, st, me, seq))
                or not goes_down(channel, st.others, 2 if at_leader else 1)
                or me in st.others):
            self.declined += 1
            return None
        self.broadcasts += 1
        return stack.broadcast(payload, now)[1]

    def plant(self, k: int) -> None:
        self.planted = k

    def receive(self, frame: bytes, peer: str | None, lanes: Lanes, now: int,
                ) -> tuple[object, list[Output]] | None:
        got = self._receive(frame, peer, lanes, now)
        if got is None:
            self.declined += 1
        else:
            self.taken += 1
        return got

    def _receive(self, frame: bytes, peer: str | None, lanes: Lanes, now: int,
                 ) -> tuple[object, list[Output]] | None:
        try:
            env = decode_envelope(frame)
        except DecodeError:
            return None
        if env.group not in lanes or peer is None or peer != env.sender:
            return None
        tag, stack = lanes[env.group]
        parts = layers(stack)
        if parts is None:
            return None
        detector, channel, top, core = parts
        st = core.st
        if st.optimistic is not None or st.safe or st.causal:
            return None  # (relay: its orders carry bodies, declined below)
        try:
            headers = stack.codec.headers(env)
        except DecodeError:
            return None
        if len(headers) != 3 or type(headers[0]) is not type(FD):
            return None
        rdata, top_header = headers[1], headers[2]
        if type(rdata) is not RData or type(top_header) not in (SOrder, SData):
            return None
        if type(top_header) is SOrder and top_header.bodies:
            return None
        sender = env.sender
        fd_peer = detector._s.peers.get(sender)
        if fd_peer is None or fd_peer.suspected or fd_peer.claim is not None:
            return None
        # the channel's pass_up, read only
        link = channel._in.get(sender)
        if (not channel._tick_set or sender not in channel._steady or link is None
                or link.above or rdata.seq != link.high + 1):
            return None
        if not link.ack_armed and channel._tick_at > now + channel._tick_period:
            return None
        out = channel._out.get(sender)
        if rdata.ack and out is not None and (rdata.ack >= out.next_seq or out.waiting):
            return None
        view = top.s.view
        if (top.s.status not in ("member", "leaving") or top.s.frozen or view is None
                or sender not in view.members):
            return None
        if st.view is None or sender == stack.node:
            return None
        if type(top_header) is SData:  # a member's data (at the sequencer: its order too)
            if sender not in st.view.members:
                return None
            new = (top_header.seq > st.delivered.get(sender, 0)
                   and MsgId(sender, top_header.seq) not in st.bodies)
            if st.view.leader == stack.node and new and not (
                    admits_alone(channel, st, sender, top_header.seq)
                    and goes_down(channel, st.others, 1)):
                return None
            return tag, self._take(stack, env, now, detector, channel, core, False)
        if sender != st.view.leader:
            return None
        clash = False
        for offset, (origin, seq) in enumerate(top_header.ids):
            at = top_header.first + offset
            known = st.numbers.get(at)
            if at >= st.next_delivery and known is not None and known != MsgId(origin, seq):
                clash = True
        if clash and self.planted != 5:
            return None
        return tag, self._take(stack, env, now, detector, channel, core, clash)

    def _take(self, stack: Stack, env: Any, now: int, detector: OpenDetector,
              channel: OpenChannel, core: Sequencer, clash: bool) -> list[Output]:
        sender, st, planted = env.sender, core.st, self.planted
        data = stack.codec.headers(env)[2]
        seen = st.delivered.get(sender)
        if planted == 6 and type(data) is SData:  # the body dropped: as if sent again
            st.delivered[sender] = max(seen or 0, data.seq)
        heard = detector._s.peers[sender].last_heard
        link = channel._in[sender]
        armed = link.ack_armed
        out = channel._out.get(sender)
        progress = out.progress_at if out is not None else None
        if clash:  # plant 5: the clashing numbers are overwritten, not refused
            order = stack.codec.headers(env)[2]
            for at in range(max(order.first, st.next_delivery), order.first + len(order.ids)):
                st.numbers.pop(at, None)
        log_before = set(st.log)
        outputs, refused = stack.receive(env, now)
        assert refused is None, refused
        if planted == 6 and type(data) is SData:
            if seen is None:
                del st.delivered[sender]
            else:
                st.delivered[sender] = seen
        if planted == 1:
            detector._s.peers[sender].last_heard = heard
        elif planted == 2 and not armed:
            link.ack_armed = False
        elif planted == 3:
            for at in set(st.log) - log_before:
                st.numbers[at] = st.log[at][0]
        elif planted == 4 and out is not None and progress is not None:
            out.progress_at = progress
        elif planted == 7:
            self.kept.append(link)
        return outputs


def fits(channel: OpenChannel, header_type: type, payload: int) -> bool:
    """A packet of `payload` bytes under one header of `header_type` passes the channel's
    size gate without being measured (its bound known; an order's of one id at most
    ONE_ID_ORDER)."""
    bounds = channel._bounds
    if header_type not in bounds:  # (no __missing__: a type not seen yet)
        return False
    bound = bounds[header_type]
    if not bound and header_type is not SOrder:
        return False
    return payload + (bound or ONE_ID_ORDER) <= channel._room


def admits_alone(channel: OpenChannel, st: SequencerState, origin: NodeId, seq: int) -> bool:
    """At the sequencer: `origin`'s `seq` is admitted and numbered at once, alone (no
    order interval, within max_unstable, nothing held for admission, the next of its
    origin), and its one-id order fits."""
    admission = st.admission
    return (not st.relay and not st.order_interval_us and not st.interval_ids
            and st.next_number - st.stable <= st.max_unstable
            and not admission._waiting and not admission._held
            and admission._released.get(origin, 0) + 1 == seq
            and fits(channel, SOrder, 0))


def goes_down(channel: OpenChannel, to: tuple[NodeId, ...], packets: int) -> bool:
    """`packets` packets in a row go to each of `to` by the channel's `pass_down_each`:
    its tick set, each a steady member with a link, nobody waiting, room in the window."""
    if not channel._tick_set or not to or len(to) > 16:
        return False
    window = channel.config.window
    for dest in to:
        link = channel._out.get(dest)
        if link is None or dest not in channel._steady or link.waiting:
            return False
        oldest = next(iter(link.unacked), None)
        for k in range(packets):
            first = oldest if oldest is not None else link.next_seq if k else None
            if first is not None and link.next_seq + k - first >= window:
                return False
    return True
