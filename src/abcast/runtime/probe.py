"""Asking a live node what it is doing (`abcast probe`, after JGroups' probe): a local
control socket per node.

Rules: a node started with `probe=True` listens on a Unix socket named after it,
`<dir>/<node>.<pid>.sock`, in a directory only its user can enter (mode 0700; the file
system's permissions are the authentication). The dir is $ABCAST_PROBE_DIR, else
`<tmp>/abcast-probe-<uid>`. A client connects, writes one request line (`status`) and
reads one JSON line: the node's `NodeStatus` (abcast.runtime.status), built on the
node's loop. A local socket works the same whatever transport carries the groups (tcp,
zmq, grpc, pyro, mem), which a control frame on the transport's port would not; across
hosts, run the probe on each host (ssh). The socket file goes when the node closes; one
left by a killed node refuses connections and the client skips it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import socket
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Final

import msgspec

from abcast.codec import NOT_A_MESSAGE
from abcast.runtime.status import NodeStatus, ObservedNode, answer_once, node_status

log: Final = logging.getLogger(__name__)

PROBE_DIR_ENV: Final = "ABCAST_PROBE_DIR"
REQUEST: Final = b"status\n"
#: a status of a node with many groups is a few hundred kB at most
MAX_REPLY: Final = 64 * 1024 * 1024
_UNSAFE: Final = re.compile(r"[^A-Za-z0-9_.-]")
_encoder: Final = msgspec.json.Encoder()
_decoder: Final = msgspec.json.Decoder(NodeStatus)


def probe_dir() -> Path:
    """Where nodes put their control sockets (created, mode 0700, when a node needs it)."""
    given = os.environ.get(PROBE_DIR_ENV)
    return Path(given) if given else Path(tempfile.gettempdir()) / f"abcast-probe-{os.getuid()}"


def socket_name(node: str, pid: int) -> str:
    return f"{_UNSAFE.sub('_', node)}.{pid}.sock"


class ProbeServer:
    """The node's end: answers `status` with its NodeStatus as one JSON line."""

    def __init__(self, node: ObservedNode, path: str | None = None) -> None:
        self._node = node
        self._path = Path(path) if path is not None else None
        self._server: asyncio.AbstractServer | None = None

    @property
    def path(self) -> Path | None:
        return self._path

    async def start(self) -> Path:
        if self._path is None:
            folder = probe_dir()
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            self._path = folder / socket_name(self._node.id, os.getpid())
        with contextlib.suppress(FileNotFoundError):
            self._path.unlink()  # a socket left by an earlier process of the same pid
        self._server = await asyncio.start_unix_server(self._serve, path=str(self._path))
        log.info("probe socket at %s", self._path)
        return self._path

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
            if self._path is not None:
                with contextlib.suppress(FileNotFoundError):
                    self._path.unlink()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await answer_once(writer, _request_line(reader), self._reply)

    def _reply(self, request: bytes) -> bytes:
        if request.strip() == REQUEST.strip() and self._node.running:
            return _encoder.encode(node_status(self._node)) + b"\n"
        return b'{"error": "unknown request"}\n'


async def _request_line(reader: asyncio.StreamReader) -> bytes:
    try:
        return await reader.readline()
    except ValueError:  # a line past the reader's limit (64 KiB): no request
        return b""


# ------------------------------------------------------------------------ the client


@dataclass(frozen=True, slots=True)
class ProbeAnswer:
    """One socket's answer: a status, or why there is none."""

    path: Path
    status: NodeStatus | None
    error: str = ""


def ask(path: Path, timeout_s: float = 5.0) -> ProbeAnswer:
    """Ask the node behind one socket for its status (blocking; never raises)."""
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
            sock.settimeout(timeout_s)
            sock.connect(str(path))
            sock.sendall(REQUEST)
            chunks: list[bytes] = []
            size = 0
            while size < MAX_REPLY:
                chunk = sock.recv(1 << 16)
                if not chunk:
                    break
                chunks.append(chunk)
                size += len(chunk)
    except OSError as exc:  # refused (a node that is gone), timed out, no such file
        return ProbeAnswer(path, None, f"{type(exc).__name__}: {exc.strerror or exc}")
    try:
        return ProbeAnswer(path, _decoder.decode(b"".join(chunks).strip()))
    except NOT_A_MESSAGE as exc:
        return ProbeAnswer(path, None, f"not a status: {exc}")


def sockets(folder: Path | None = None) -> list[Path]:
    """Every control socket in the probe dir, in name order."""
    folder = folder or probe_dir()
    return sorted(folder.glob("*.sock")) if folder.is_dir() else []


def probe(nodes: tuple[str, ...] = (), folder: Path | None = None,
          paths: tuple[Path, ...] = ()) -> list[ProbeAnswer]:
    """Ask every node with a socket in `folder` (or at `paths`), keeping those named in
    `nodes` (all when empty). Sockets that do not answer come back with their error."""
    answers = [ask(p) for p in (paths or tuple(sockets(folder)))]
    if nodes:
        answers = [a for a in answers if a.status is not None and a.status.node in nodes]
    return answers
