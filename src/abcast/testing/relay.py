"""`Relay`: a TCP relay for tests that must see or hold what crosses a connection.

It listens on a port of its own, and for each connection a dialler opens to it opens one
to the target and copies bytes both ways, unframed (for frames, see abcast.testing.mitm).
`forwarded` counts the bytes the target took in from its diallers (each chunk counted
once written and drained: what the target read off its socket, within its own flow
control); while `holding`, what the target sends back is kept instead of delivered, and
`release()` delivers it (a registry made silent and made to speak again, say).
"""

from __future__ import annotations

import asyncio


class Relay:
    """`url = await relay.start()` (host:port); dial it; `await relay.close()`."""

    def __init__(self, target: str) -> None:
        host, port = target.removeprefix("tcp://").rsplit(":", 1)
        self._target = (host, int(port))
        self.forwarded = 0  # bytes the target took in from its diallers
        self.holding = False  # keep what the target sends back (until release)
        self._held: list[tuple[asyncio.StreamWriter, bytes]] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return f"127.0.0.1:{self._server.sockets[0].getsockname()[1]}"

    def release(self) -> None:
        """Stop holding, and deliver what was held, in order."""
        self.holding = False
        held, self._held = self._held, []
        for writer, data in held:
            writer.write(data)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            far_reader, far_writer = await asyncio.open_connection(*self._target)
        except OSError:
            writer.close()
            return
        for pipe in (self._pipe(reader, far_writer, towards_target=True),
                     self._pipe(far_reader, writer, towards_target=False)):
            task = asyncio.create_task(pipe)
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)

    async def _pipe(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter,
                    towards_target: bool) -> None:
        try:
            while data := await reader.read(65536):
                if not towards_target and self.holding:
                    self._held.append((writer, data))
                    continue
                writer.write(data)
                await writer.drain()
                if towards_target:
                    self.forwarded += len(data)
        except OSError:
            pass
        finally:
            writer.close()
