"""Length-prefixed framing: whatever way a byte stream is cut into reads, the reader
returns exactly the frames that were encoded, in order; an oversize length prefix is
refused before its body is buffered; a batch that does not end on a frame boundary
is a DecodeError.
"""

from __future__ import annotations

import itertools
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from abcast.errors import DecodeError
from abcast.transport._framing import FrameReader, encode_frames, split_frames

frames_st = st.lists(st.binary(min_size=0, max_size=300), min_size=0, max_size=30)


@settings(max_examples=200, deadline=None)
@given(frames=frames_st, cuts=st.lists(st.integers(min_value=0, max_value=10_000), max_size=40))
def test_any_chunking_yields_the_encoded_frames(frames: list[bytes], cuts: list[int]) -> None:
    stream = encode_frames(frames)
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, len(stream)})
    reader = FrameReader(max_frame_bytes=1000)
    got: list[bytes] = []
    for lo, hi in itertools.pairwise(points):
        out, error = reader.feed(stream[lo:hi])
        assert error is None
        got.extend(out)
    assert got == frames
    assert reader.pending == 0
    assert split_frames(stream, 1000) == frames


def test_oversize_prefix_is_refused_before_the_body_arrives() -> None:
    reader = FrameReader(max_frame_bytes=100)
    good = encode_frames([b"ok"])
    out, error = reader.feed(good + struct.pack(">I", 101))
    assert out == [b"ok"]
    assert error is not None and "101 exceeds max_frame_bytes 100" in error


def test_a_frame_of_exactly_the_limit_is_fine() -> None:
    reader = FrameReader(max_frame_bytes=100)
    out, error = reader.feed(encode_frames([bytes(100)]))
    assert out == [bytes(100)] and error is None


def test_pending_reports_a_truncated_frame() -> None:
    reader = FrameReader(max_frame_bytes=1000)
    out, error = reader.feed(struct.pack(">I", 50) + bytes(20))
    assert out == [] and error is None
    assert reader.pending == 24 and reader.expected() == 54


@pytest.mark.parametrize(
    "data",
    [struct.pack(">I", 10) + bytes(5), encode_frames([b"abc"]) + b"\x00", struct.pack(">I", 2**31)],
)
def test_split_refuses_a_batch_that_is_not_whole_frames(data: bytes) -> None:
    with pytest.raises(DecodeError):
        split_frames(data, 1000)
