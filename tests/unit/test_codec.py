"""The wire codec: round trips, and DecodeError (nothing else) for bytes that are not a frame."""

from __future__ import annotations

import contextlib

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abcast.codec import FrameCodec, Packet, decode_envelope, encode_frame
from abcast.errors import DecodeError
from abcast.ordering.unordered import UData
from abcast.reliability.channel import ChannelHeader, RAck, RData

CODEC = FrameCodec({"g": [ChannelHeader, UData]})


def test_round_trip_keeps_every_field() -> None:
    packet = Packet((RData(7), UData(3)), b"payload")
    frame = CODEC.decode(encode_frame("g", "n2", packet))
    assert (frame.group, frame.sender, frame.control) == ("g", "n2", False)
    assert frame.packet == packet


def test_control_flag_and_short_packets_round_trip() -> None:
    packet = Packet((RAck(5, [7, 9]),), b"")
    frame = CODEC.decode(encode_frame("g", "n1", packet, control=True))
    assert frame.control and frame.packet == packet


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "empty"),
        (b"\x00", "not an array"),
        (msgspec.msgpack.encode([2, "g", "n1", 0, [], b""]), "wire version"),
        (msgspec.msgpack.encode([1, "zz", "n1", 0, [], b""]), "unknown group"),
        (msgspec.msgpack.encode([1, "g", "", 0, [], b""]), "empty sender"),
        (msgspec.msgpack.encode([1, "g", "n1", 0, [["RData", 0]], b""]), "seq below 1"),
        (msgspec.msgpack.encode([1, "g", "n1", 0, [["Nope", 1]], b""]), "unknown tag"),
        (msgspec.msgpack.encode([1, "g", "n1", 0, [["RData", 1]] * 3, b""]), "too many headers"),
        (encode_frame("g", "n1", Packet((RData(1), UData(1)), b"x"))[:-1], "truncated"),
    ],
)
def test_invalid_frames_raise_decode_error(data: bytes, reason: str) -> None:
    with pytest.raises(DecodeError):
        CODEC.decode(data)


@settings(max_examples=3000, deadline=None)
@given(st.binary(max_size=256))
def test_random_bytes_raise_only_decode_error(data: bytes) -> None:
    with contextlib.suppress(DecodeError):
        CODEC.decode(data)


_valid = st.builds(
    lambda seq, useq, payload: encode_frame("g", "n1", Packet((RData(seq), UData(useq)), payload)),
    st.integers(1, 2**40), st.integers(1, 2**40), st.binary(max_size=64),
)


@settings(max_examples=1500, deadline=None)
@given(_valid, st.data())
def test_mutated_frames_decode_or_raise_decode_error(frame: bytes, data: st.DataObject) -> None:
    """Flip, cut and splice bytes of real frames: the decoder either returns a frame or
    raises DecodeError — never another exception."""
    buf = bytearray(frame)
    for _ in range(data.draw(st.integers(1, 4))):
        pos = data.draw(st.integers(0, len(buf) - 1))
        action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip":
            buf[pos] = data.draw(st.integers(0, 255))
        elif action == "cut":
            del buf[pos:]
            if not buf:
                break
        else:
            buf[pos:pos] = data.draw(st.binary(min_size=1, max_size=4))
    with contextlib.suppress(DecodeError):
        CODEC.decode(bytes(buf))


def test_envelope_decoder_names_the_problem() -> None:
    with pytest.raises(DecodeError, match="not an abcast frame"):
        decode_envelope(b"\xc1garbage")
