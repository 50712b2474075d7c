"""Shared scaffolding of the transport tests: numbered frames, an inbox that records
what arrived per sender, a node set that always closes what it started, and a runner
that checks nothing leaked (threads, mem names) once the event loop is gone.

Rules: no wall-clock assertions. Waiting is bounded (WAIT_S) and a timeout fails with a
summary of what did arrive; everything binds 127.0.0.1 with port 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import threading
from collections import defaultdict
from collections.abc import Awaitable, Callable
from typing import Final

from abcast.transport import Link, Transport, TransportOptions, transport_from_url
from abcast.transport.memory import bound_names

SCHEMES: Final = ("tcp", "mem", "zmq", "grpc", "pyro", "udp")
#: secured variants that must pass the conformance suite too (see options_for)
SECURED: Final = ("tcp-secret", "tcp-aead", "tcps", "grpc-tls", "zmq-secret",
                   "udp-secret")
WAIT_S: Final = 20.0
TEST_SECRET: Final = b"conformance-suite-secret"


def bind_url(scheme: str) -> str:
    scheme = scheme.split("-", maxsplit=1)[0]
    return "mem://" if scheme == "mem" else f"{scheme}://127.0.0.1:0"


def options_for(scheme: str, options: TransportOptions | None = None) -> TransportOptions:
    """`options` (or the defaults) plus what the variant `scheme` names: a group secret
    (tcp-secret: MAC; tcp-aead, zmq-secret and udp-secret: encrypted), or mutual TLS with a
    throwaway CA (tcps, grpc-tls)."""
    options = options or TransportOptions()
    if scheme.endswith("-secret"):
        return dataclasses.replace(options, secret=TEST_SECRET)
    if scheme.endswith("-aead"):
        return dataclasses.replace(options, secret=TEST_SECRET, aead=1)
    if scheme in ("tcps", "grpc-tls"):
        from abcast.testing.pki import shared_pki

        pki = shared_pki()
        return dataclasses.replace(options, tls_cert=pki.cert, tls_key=pki.key, tls_ca=pki.ca,
                                   tls=int(scheme == "grpc-tls"))
    return options


def numbered(seq: int, size: int = 16) -> bytes:
    """A frame that says its own number and whose body is checkable."""
    body = bytes([seq % 251]) * max(0, size - 8)
    return seq.to_bytes(8, "big") + body


def number_of(frame: bytes) -> int:
    return int.from_bytes(frame[:8], "big")


def intact(frame: bytes) -> bool:
    seq = number_of(frame)
    return frame[8:] == bytes([seq % 251]) * (len(frame) - 8)


class Inbox:
    """An on_frame handler that records arrivals per sending node."""

    def __init__(self) -> None:
        self.seqs: dict[str | None, list[int]] = defaultdict(list)
        self.sizes: dict[str | None, list[int]] = defaultdict(list)
        self.corrupt = 0
        self.closing = False
        self.calls_after_close = 0
        self.hook: Callable[[Link, bytes], None] | None = None
        self._event: asyncio.Event | None = None

    def __call__(self, link: Link, frame: bytes) -> None:
        if self.closing:
            self.calls_after_close += 1
        self.seqs[link.peer].append(number_of(frame))
        self.sizes[link.peer].append(len(frame))
        if not intact(frame):
            self.corrupt += 1
        if self._event is not None:
            self._event.set()
        if self.hook is not None:
            self.hook(link, frame)

    def got(self, peer: str) -> list[int]:
        return self.seqs.get(peer, [])

    async def wait_until(self, predicate: Callable[[], bool], what: str) -> None:
        loop = asyncio.get_running_loop()
        if self._event is None:
            self._event = asyncio.Event()
        deadline = loop.time() + WAIT_S
        while not predicate():
            remaining = deadline - loop.time()
            if remaining <= 0:
                summary = {p: (len(s), s[:3], s[-3:]) for p, s in self.seqs.items()}
                raise AssertionError(f"timed out waiting for {what}; arrived: {summary}")
            self._event.clear()
            # Conditions may also depend on the sender side: poll as well as wait.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._event.wait(), min(remaining, 0.05))


class Nodes:
    """Starts transports and closes every one of them on exit, pass or fail."""

    def __init__(self) -> None:
        self.started: list[Transport] = []

    async def start(
        self,
        scheme: str,
        node: str,
        inbox: Inbox,
        options: TransportOptions | None = None,
        url: str | None = None,
    ) -> Transport:
        transport = transport_from_url(url or bind_url(scheme), options_for(scheme, options))
        self.started.append(transport)
        await transport.start(node, inbox)
        return transport

    async def __aenter__(self) -> Nodes:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.gather(*(t.close() for t in self.started))


def strictly_increasing(seqs: list[int]) -> bool:
    return all(a < b for a, b in itertools.pairwise(seqs))


def run(main: Callable[[], Awaitable[None]]) -> None:
    """asyncio.run(main()), then check that no transport left a thread or a name behind."""

    async def wrapper() -> None:
        await main()

    asyncio.run(wrapper())
    leaked = [t.name for t in threading.enumerate() if t.name.startswith("abcast-")]
    assert not leaked, f"transport threads still running after close: {leaked}"
    assert not bound_names(), f"mem:// names still bound after close: {bound_names()}"
