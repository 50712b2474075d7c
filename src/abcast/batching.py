"""Message batching: the application's broadcasts of one moment travel as one ordered message.

Rules: sans-IO and clock-free — a driver decides *when* a batch closes (the runtime: at the
end of the event-loop turn in which the broadcasts were made; nothing waits for a batch to
fill, so batching adds no delay), this module only packs and unpacks. Every ordering
orders whole batches, so whatever an ordering guarantees for its messages holds for the
messages inside them:

- total order, FIFO, causal order and virtual synchrony carry over because a batch holds
  one origin's consecutive broadcasts, in broadcast order, and every member unpacks it
  into the same run of deliveries at the same place in its sequence;
- a broadcast's causal past can only grow between its `broadcast()` call and its batch's
  departure (deliveries may happen in between), and a larger past is still a correct one.

Application sequence numbers (what `Deliver.seq`, trace rows and the checkers see) are
counted here, one per broadcast; the ordering numbers batches with its own counter. A
batch carries the number of its first message, so a receiver renumbers without state.
The wire form is a msgpack array `[first, [payload, ...]]` inside the ordering's payload.
A batch that does not decode is a peer's fault: `RemoteProtocolError`/`DecodeError`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import msgspec

from abcast.codec import NOT_A_MESSAGE
from abcast.effects import Deliver, Stage
from abcast.errors import ConfigError, DecodeError, RemoteProtocolError
from abcast.ids import NodeId

#: a batch closes at this many messages even within one loop turn, so one burst of
#: broadcasts cannot make a frame (and a delivery run) of unbounded size
DEFAULT_MAX_MESSAGES: Final = 512
#: … or once its payloads reach this many bytes (a single larger payload goes alone)
DEFAULT_MAX_BYTES: Final = 256 * 1024


class Batch(msgspec.Struct, array_like=True, frozen=True, gc=False):
    """The payload of one ordered message: messages first, first + 1, … of its origin."""

    first: int
    payloads: list[bytes]


_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder(Batch).decode


@dataclass(frozen=True, slots=True)
class Packed:
    """A batch leaving: messages `first`, `first + 1`, … with these payloads, and the
    bytes the ordering carries for them."""

    first: int
    payloads: list[bytes]
    data: bytes


@dataclass(frozen=True, slots=True)
class BatchLimits:
    max_messages: int = DEFAULT_MAX_MESSAGES
    max_bytes: int = DEFAULT_MAX_BYTES

    def __post_init__(self) -> None:
        if self.max_messages < 1:
            raise ConfigError(f"a batch holds at least one message, not {self.max_messages}")
        if self.max_bytes < 1:
            raise ConfigError(f"max_bytes must be positive, not {self.max_bytes}")


class Batcher:
    """Numbers one origin's broadcasts and packs the pending ones into batches."""

    __slots__ = ("_first", "_max_bytes", "_max_messages", "_pending", "_pending_bytes",
                 "full", "limits")

    def __init__(self, limits: BatchLimits | None = None) -> None:
        self.limits = limits = limits or BatchLimits()
        self._max_messages = limits.max_messages
        self._max_bytes = limits.max_bytes
        self._pending: list[bytes] = []
        self._pending_bytes = 0
        self._first = 1  # application seq of the first pending message
        #: the pending messages already make a batch at the limits: close it now (kept by
        #: `add` and `take`, read once per broadcast)
        self.full = False

    @property
    def broadcasts(self) -> int:
        """Messages broadcast so far (pending ones included)."""
        return self._first - 1 + len(self._pending)

    @property
    def pending(self) -> int:
        return len(self._pending)

    def add(self, payload: bytes) -> int:
        """Queue one broadcast; returns its application sequence number."""
        pending = self._pending
        pending.append(payload)
        self._pending_bytes = size = self._pending_bytes + len(payload)
        count = len(pending)
        if count >= self._max_messages or size >= self._max_bytes:
            self.full = True
        return self._first - 1 + count

    def take(self) -> Packed | None:
        """The next batch to broadcast, or None when nothing is pending. Call until None
        to send everything; each batch respects the limits."""
        pending = self._pending
        if not pending:
            return None
        limits = self.limits
        if len(pending) <= limits.max_messages and self._pending_bytes <= limits.max_bytes:
            chosen = pending
            self._pending = []
            self._pending_bytes = 0
        else:
            count = size = 0
            for payload in pending:
                if count and (count == limits.max_messages
                              or size + len(payload) > limits.max_bytes):
                    break
                count += 1
                size += len(payload)
            chosen = pending[:count]
            del pending[:count]
            self._pending_bytes -= size
        first = self._first
        self._first += len(chosen)
        self.full = (len(self._pending) >= self._max_messages
                     or self._pending_bytes >= self._max_bytes)
        return Packed(first, chosen, pack(first, chosen))


def pack(first: int, payloads: list[bytes]) -> bytes:
    """Messages first, first + 1, … of one origin as one ordered message's payload."""
    return _encode(Batch(first, payloads))


def unpack(deliver: Deliver) -> list[Deliver]:
    """The application deliveries one delivered batch stands for, in broadcast order."""
    return batch_deliveries(unpack_batch(deliver), deliver.origin, deliver.stage)


def batch_deliveries(batch: Batch, origin: NodeId, stage: Stage) -> list[Deliver]:
    """The deliveries of an already checked batch (`unpack_batch`) from `origin`."""
    return [Deliver(origin, seq, payload, stage)
            for seq, payload in enumerate(batch.payloads, batch.first)]


def unpack_batch(deliver: Deliver) -> Batch:
    """The batch one delivered message carries, checked: its messages are `unpack`'s
    deliveries (a driver that hands them out one at a time makes each as it goes)."""
    try:
        batch = _decode(deliver.payload)
    except NOT_A_MESSAGE as exc:
        raise DecodeError(f"batch from {deliver.origin} does not decode: {exc}") from None
    if batch.first < 1 or not batch.payloads:
        raise RemoteProtocolError(
            f"batch from {deliver.origin} is malformed (first={batch.first}, "
            f"{len(batch.payloads)} messages)"
        )
    return batch
