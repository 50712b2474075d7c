"""What the stack-level differential tests share: carrying a stack call's outputs onto
in-memory links and a timer table, firing the timers due, the reliable channel's
state that its snapshot leaves out, an object's fields (slotted or not), a stack's deep
copy (to try a frame on it and throw it away) and a frame's bytes as another msgpack
writer may send them.
tests/unit/test_hotpath_stack.py, test_hotpath_channel_shortcuts.py,
test_stack_top_step.py and test_native_lane.py drive two groups through one history and
compare both."""

from __future__ import annotations

import copy
import random
import struct
from collections.abc import Callable, Container, Hashable, Mapping
from typing import Any

import msgspec

from abcast.effects import CancelTimer, Output, SetTimer, Transmit
from abcast.ids import NodeId
from abcast.reliability.channel import ReliableChannel
from abcast.stack import Stack

Links = dict[tuple[NodeId, NodeId], list[bytes]]
Timers = dict[tuple[NodeId, Hashable], int]


def carry(node: NodeId, outputs: list[Output], links: Links, timers: Timers,
          nodes: Container[NodeId]) -> None:
    """Queue `node`'s frames on its links to `nodes` (a frame to anyone else goes
    nowhere: a reply to a stranger) and note the timers it set and cancelled."""
    for out in outputs:
        if isinstance(out, Transmit):
            for dst in out.to:
                if dst in nodes:
                    links.setdefault((node, dst), []).append(out.data)
        elif isinstance(out, SetTimer):
            timers[(node, out.key)] = out.at
        elif isinstance(out, CancelTimer):
            timers.pop((node, out.key), None)


def fire_due(stacks: Mapping[NodeId, Stack], timers: Timers, now: int,
             step: Callable[[str, NodeId, list[Output]], None]) -> None:
    """Fire every timer due by `now`, the earliest first (ties by key), each only if a
    timer fired before it did not move or cancel it; `step` records each call."""
    for (node, key), at in sorted(timers.items(), key=lambda item: (item[1], repr(item[0]))):
        if at <= now and timers.get((node, key)) == at:
            del timers[(node, key)]
            step(f"fire {key!r}", node, stacks[node].fire(key, now))


def channel_links(channel: ReliableChannel) -> list[object]:
    """The channel's links: in (high mark, holes, owed acks) and out (next number,
    unacked packets with their deadlines and tries, credit queue, progress, RTO)."""
    inbound = sorted((peer, link.high, sorted(link.above), link.ack_armed, link.ack_aged)
                     for peer, link in channel._in.items())
    outbound = sorted((peer, link.next_seq, [(seq, p.sent, p.deadline, p.tries)
                                             for seq, p in link.unacked.items()],
                       len(link.waiting), link.progress_at, link.timer.rto)
                      for peer, link in channel._out.items())
    return [inbound, outbound]


def fields_of(obj: object) -> dict[str, Any]:
    """An object's instance fields by name, wherever it keeps them: its `__dict__` and
    the slots of every class of its MRO (a slot not set is left out)."""
    fields = dict(getattr(obj, "__dict__", {}))
    for klass in type(obj).__mro__:
        slots = vars(klass).get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name not in ("__dict__", "__weakref__") and hasattr(obj, name):
                fields[name] = getattr(obj, name)
    return fields


def clone(stack: Stack) -> Stack:
    """A deep copy of `stack`, sharing its (stateless) header decoders, which msgspec
    cannot copy."""
    shared = [stack.codec, *(getattr(layer, "_inner", None) for layer in stack.layers)]
    memo: dict[int, Any] = {id(obj): obj for obj in shared if obj is not None}
    return copy.deepcopy(stack, memo)


def repack(obj: Any, rng: random.Random) -> bytes:
    """msgpack for `obj` (lists, small dicts, ints, str, bytes), each value in a random one of the
    encodings that hold it: what another msgpack writer could send, read alike."""
    if isinstance(obj, bool) or obj is None:
        return msgspec.msgpack.encode(obj)
    if isinstance(obj, int):
        options = [msgspec.msgpack.encode(obj)]
        for code, fmt, lo, hi in ((0xcc, ">B", 0, 2**8), (0xcd, ">H", 0, 2**16),
                                  (0xce, ">I", 0, 2**32), (0xcf, ">Q", 0, 2**64),
                                  (0xd3, ">q", -(2**63), 2**63)):
            if lo <= obj < hi:
                options.append(bytes([code]) + struct.pack(fmt, obj))
        return rng.choice(options)
    if isinstance(obj, str):
        raw = obj.encode()
        width = rng.choice([w for w, limit in ((0, 32), (1, 2**8), (2, 2**16)) if len(raw) < limit])
        head = bytes([0xa0 | len(raw)]) if width == 0 else (
            bytes([{1: 0xd9, 2: 0xda}[width]]) + len(raw).to_bytes(width, "big"))
        return head + raw
    if isinstance(obj, bytes):
        width = rng.choice([w for w, limit in ((1, 2**8), (2, 2**16), (4, 2**32))
                            if len(obj) < limit])
        return bytes([{1: 0xc4, 2: 0xc5, 4: 0xc6}[width]]) + len(obj).to_bytes(width, "big") + obj
    if isinstance(obj, dict):
        return bytes([0x80 | len(obj)]) + b"".join(
            repack(k, rng) + repack(v, rng) for k, v in obj.items())
    assert isinstance(obj, list), obj
    width = rng.choice([w for w, limit in ((0, 16), (2, 2**16), (4, 2**32)) if len(obj) < limit])
    head = bytes([0x90 | len(obj)]) if width == 0 else (
        bytes([{2: 0xdc, 4: 0xdd}[width]]) + len(obj).to_bytes(width, "big"))
    return head + b"".join(repack(item, rng) for item in obj)
