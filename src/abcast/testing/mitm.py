"""`MitmProxy`: a man in the middle for one tcp:// link, for tests that attack links.

It listens on a port of its own, and for each connection a dialler opens to it opens
one to the target and forwards bytes both ways. On the dialler's side it cuts the
stream into frames (4-byte length prefixes): the first `handshake_frames` pass as they
are (the hello, and with a secret the Challenge and Confirm); every later frame is
recorded in `data_frames` and handed to `attack(index, frame, seen)`, whose list of
frames is what goes on instead (the frame itself to pass it, several to inject, a
changed one to alter it, none to drop it).
"""

from __future__ import annotations

import asyncio
import struct
from collections.abc import Callable

Attack = Callable[[int, bytes, list[bytes]], list[bytes]]


def prefixed(frame: bytes) -> bytes:
    return struct.pack(">I", len(frame)) + frame


class MitmProxy:
    """`port = await proxy.start()`; dial `tcp://127.0.0.1:<port>`; `await proxy.close()`."""

    def __init__(self, target_port: int, *, attack: Attack | None = None,
                 handshake_frames: int = 3, host: str = "127.0.0.1") -> None:
        self.target_port = target_port
        self.host = host
        self.attack = attack
        self.handshake_frames = handshake_frames
        self.data_frames: list[bytes] = []  # frames seen after the handshake, all links
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> int:
        self._server = await asyncio.start_server(self._serve, self.host, 0)
        return int(self._server.sockets[0].getsockname()[1])

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(self.host, self.target_port)
        except OSError:
            writer.close()
            return
        self._writers.update((writer, up_writer))

        async def backwards() -> None:
            try:
                while data := await up_reader.read(65536):
                    writer.write(data)
            except (ConnectionError, OSError):
                pass
            finally:
                writer.close()

        back = asyncio.create_task(backwards())
        self._tasks.add(back)
        back.add_done_callback(self._tasks.discard)
        index = 0
        try:
            while True:
                head = await reader.readexactly(4)
                frame = await reader.readexactly(struct.unpack(">I", head)[0])
                out = [frame]
                if index >= self.handshake_frames:
                    self.data_frames.append(frame)
                    if self.attack is not None:
                        out = self.attack(len(self.data_frames) - 1, frame, self.data_frames)
                index += 1
                up_writer.write(b"".join(prefixed(f) for f in out))
        except (asyncio.IncompleteReadError, ConnectionError, OSError):
            pass
        finally:
            back.cancel()
            up_writer.close()
            writer.close()

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self._tasks):
                task.cancel()
            for writer in self._writers:
                writer.close()
            await self._server.wait_closed()
