"""Length-prefixed framing: each frame is a 4-byte big-endian length, then that many bytes.

Rules: used on byte streams (tcp) and inside batch messages (grpc). The reader is
incremental and refuses, with a reason string, any length above `max_frame_bytes`
*before* buffering the body, so a hostile length prefix cannot make us allocate. The
limit can be raised once the connection is trusted with more (`raise_limit`: tcp reads
no more than a hello before it admits the connection). It knows nothing about hellos,
links or sockets.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from typing import Final

from abcast.errors import DecodeError

PREFIX: Final = struct.Struct(">I")
PREFIX_BYTES: Final = PREFIX.size


def encode_frames(frames: Iterable[bytes]) -> bytes:
    """The frames, each with its length prefix, as one buffer (one write)."""
    pack = PREFIX.pack
    parts: list[bytes] = []
    for frame in frames:
        parts.append(pack(len(frame)))
        parts.append(frame)
    return b"".join(parts)


def split_frames(data: bytes, max_frame_bytes: int) -> list[bytes]:
    """The frames of one complete buffer made by encode_frames; DecodeError otherwise."""
    reader = FrameReader(max_frame_bytes)
    frames, error = reader.feed(data)
    if error is not None:
        raise DecodeError(error)
    if reader.pending:
        raise DecodeError(f"batch ends inside a frame ({reader.pending} bytes left over)")
    return frames


class FrameReader:
    """Incremental decoder: feed bytes as they come, get whole frames back."""

    __slots__ = ("_buf", "_limit_name", "_max", "_need")

    def __init__(self, max_frame_bytes: int, limit_name: str = "max_frame_bytes") -> None:
        self._buf = bytearray()
        self._max = max_frame_bytes
        self._limit_name = limit_name  # what the limit is, for the error
        self._need = PREFIX_BYTES  # bytes the buffer must hold before parsing is worth it

    @property
    def limit(self) -> int:
        return self._max

    def raise_limit(self, max_frame_bytes: int, limit_name: str = "max_frame_bytes",
                    ) -> tuple[list[bytes], str | None]:
        """Accept frames up to `max_frame_bytes` from now on, and parse again what is
        held: also the bytes from a length prefix the old limit refused (a feed that
        returned an error may be resumed this way), as `feed` would."""
        self._max = max_frame_bytes
        self._limit_name = limit_name
        held = bytes(self._buf)
        self._buf.clear()
        return self.feed(held) if held else ([], None)

    @property
    def pending(self) -> int:
        """Bytes of an incomplete frame held back (non-zero at EOF = truncated frame)."""
        return len(self._buf)

    def expected(self) -> int:
        """Total bytes of the frame being assembled (prefix included), if known."""
        return self._need

    def feed(self, data: bytes) -> tuple[list[bytes], str | None]:
        """(complete frames, error). On an error the frames before it are still valid;
        the reader must not be fed again."""
        buf = self._buf
        if buf:
            buf += data
            if len(buf) < self._need:
                return [], None  # still inside a frame: do not re-parse what we hold
            src = bytes(buf)
            buf.clear()
        elif len(data) < self._need:
            buf += data
            return [], None
        else:
            # The common case of a read that starts on a frame boundary: slice the frames
            # straight out of it (one copy each), buffering only an incomplete tail.
            src = data if type(data) is bytes else bytes(data)
        frames: list[bytes] = []
        unpack = PREFIX.unpack_from
        end_of_data = len(src)
        limit = self._max
        pos = 0
        need = PREFIX_BYTES
        while end_of_data - pos >= PREFIX_BYTES:
            (size,) = unpack(src, pos)
            if size > limit:
                buf += memoryview(src)[pos:]  # from the prefix on: see raise_limit
                self._need = PREFIX_BYTES
                return frames, (f"frame length prefix {size} exceeds {self._limit_name} "
                                f"{limit}")
            end = pos + PREFIX_BYTES + size
            if end > end_of_data:
                need = end - pos
                break
            frames.append(src[pos + PREFIX_BYTES : end])
            pos = end
        if pos < end_of_data:
            buf += memoryview(src)[pos:]
        self._need = need
        return frames, None
