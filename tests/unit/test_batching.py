"""Batching (abcast.batching): what goes in as broadcasts comes out as the same
deliveries, numbered 1, 2, 3 … per origin, in batches that respect their limits."""

from __future__ import annotations

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from abcast.batching import Batch, Batcher, BatchLimits, pack, unpack
from abcast.effects import Deliver, Stage
from abcast.errors import ConfigError, DecodeError, RemoteProtocolError

payloads = st.lists(st.binary(max_size=40), max_size=60)
# a run of broadcasts split into loop turns: after each turn the driver takes everything
turns = st.lists(payloads, min_size=1, max_size=6)
limits = st.builds(BatchLimits, st.integers(1, 9), st.integers(1, 120))


@given(turns, limits)
def test_batches_unpack_to_every_broadcast_once_in_order_within_the_limits(
    rounds: list[list[bytes]], lim: BatchLimits,
) -> None:
    batcher = Batcher(lim)
    sent: list[tuple[int, bytes]] = []
    got: list[Deliver] = []
    core_seq = 0
    for turn in rounds:
        for payload in turn:
            sent.append((batcher.add(payload), payload))
        while (packed := batcher.take()) is not None:
            core_seq += 1
            batch = unpack(Deliver("n1", core_seq, packed.data))
            assert [d.payload for d in batch] == packed.payloads
            assert batch[0].seq == packed.first
            sizes = [len(d.payload) for d in batch]
            assert 1 <= len(batch) <= lim.max_messages
            # over the byte limit only when one payload alone exceeds it
            assert sum(sizes) <= lim.max_bytes or len(batch) == 1
            got.extend(batch)
        assert batcher.pending == 0
    assert [(d.seq, d.payload) for d in got] == sent
    assert [seq for seq, _ in sent] == list(range(1, len(sent) + 1))
    assert batcher.broadcasts == len(sent)
    assert all(d.origin == "n1" and d.stage is Stage.FINAL for d in got)


def test_full_says_when_the_pending_messages_reach_a_limit() -> None:
    batcher = Batcher(BatchLimits(max_messages=3, max_bytes=10))
    batcher.add(b"ab")
    batcher.add(b"cd")
    assert not batcher.full
    batcher.add(b"")
    assert batcher.full  # three messages
    assert batcher.take() is not None and batcher.take() is None
    batcher.add(b"0123456789")
    assert batcher.full  # ten bytes


def test_unpacking_keeps_the_stage_of_the_ordered_message() -> None:
    [d] = unpack(Deliver("n2", 9, pack(4, [b"x"]), Stage.OPTIMISTIC))
    assert (d.origin, d.seq, d.payload, d.stage) == ("n2", 4, b"x", Stage.OPTIMISTIC)


@pytest.mark.parametrize(
    ("payload", "error", "message"),
    [
        (b"\xc1 not msgpack", DecodeError, "does not decode"),
        (msgspec.msgpack.encode(["one", [b"x"]]), DecodeError, "does not decode"),
        (msgspec.msgpack.encode(Batch(0, [b"x"])), RemoteProtocolError, "malformed"),
        (msgspec.msgpack.encode(Batch(3, [])), RemoteProtocolError, "malformed"),
    ],
)
def test_a_batch_a_peer_malformed_is_a_remote_error(
    payload: bytes, error: type[Exception], message: str,
) -> None:
    with pytest.raises(error, match=message):
        unpack(Deliver("n3", 1, payload))


def test_limits_below_one_are_refused() -> None:
    with pytest.raises(ConfigError, match="at least one message"):
        BatchLimits(max_messages=0)
    with pytest.raises(ConfigError, match="positive"):
        BatchLimits(max_bytes=0)
