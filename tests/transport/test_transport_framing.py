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


@settings(max_examples=200, deadline=None)
@given(small=frames_st, large=frames_st, cuts=st.lists(st.integers(0, 20_000), max_size=40),
       raise_at=st.integers(0, 40))
def test_a_raised_limit_resumes_where_the_old_one_refused(
    small: list[bytes], large: list[bytes], cuts: list[int], raise_at: int,
) -> None:
    """Frames under a small limit, then (a hello admitted) the limit raised: wherever
    the reads are cut and whenever the limit is raised after the small frames, the
    reader returns exactly the encoded frames; a refused prefix is read again."""
    small = [frame[:20] for frame in small]
    stream = encode_frames(small + large)
    boundary = len(encode_frames(small))
    points = sorted({c % (len(stream) + 1) for c in cuts} | {0, boundary, len(stream)})
    reader = FrameReader(max_frame_bytes=20, limit_name="the hello bound")
    got: list[bytes] = []
    raised = False
    for step, (lo, hi) in enumerate(itertools.pairwise(points)):
        out, error = reader.feed(stream[lo:hi])
        got.extend(out)
        if error is not None:
            assert "exceeds the hello bound 20" in error
            assert len(got) >= len(small)  # only a large frame is refused
        if not raised and lo >= boundary and (error is not None or step >= raise_at):
            out, error = reader.raise_limit(1000)
            raised = True
            got.extend(out)
        assert error is None
    if not raised:
        out, error = reader.raise_limit(1000)
        got.extend(out)
        assert error is None
    assert got == small + large
    assert reader.pending == 0


def test_a_refused_prefix_leaves_the_reader_at_the_old_limit() -> None:
    reader = FrameReader(max_frame_bytes=8, limit_name="the hello bound")
    out, error = reader.feed(encode_frames([b"hello"]) + struct.pack(">I", 2**24) + b"xy")
    assert out == [b"hello"]
    assert error == "frame length prefix 16777216 exceeds the hello bound 8"
    assert reader.limit == 8 and reader.pending == 6
