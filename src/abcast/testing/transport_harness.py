"""The scaffolding of the transport conformance suite (abcast.testing.transport_conformance),
public so that tests of a transport of one's own can use it too: how to make a
transport (`TransportMaker`, and `UrlMaker` for a scheme `transport_from_url` knows),
numbered frames whose body is checkable, an `Inbox` that records what arrived per
sender, a node set that always closes what it started, and `run`, which runs a check on
a fresh event loop and then checks that nothing leaked.

Rules: no wall-clock assertions and no sleeps-and-hope. Every wait is bounded (`WAIT_S`)
and a timeout fails with an AssertionError summing up what did arrive. Nothing here
needs pytest: a failed property is an AssertionError.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import threading
from collections import defaultdict
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from typing import Final, Protocol

from abcast.transport import Link, Transport, TransportOptions, transport_from_url
from abcast.transport.memory import bound_names

#: the longest any single wait of a check lasts before it fails
WAIT_S: Final = 20.0


class TransportMaker(Protocol):
    """What the conformance checks need to know about a transport: how to make one.

    `make(url, options)` returns a new, unstarted transport. `url` None means "bind any
    free address" (port 0, an empty mem:// name); otherwise it is an address that a
    transport this maker made had bound and has since closed (a node restarting at the
    same address). `options` are the check's wishes (None: the defaults); a maker adds
    what its variant needs (a group secret, TLS files) and may wrap the transport.
    """

    def make(self, url: str | None = None, options: TransportOptions | None = None) -> Transport:
        ...


@dataclass(frozen=True, slots=True)
class UrlMaker:
    """A maker for a registered scheme: `transport_from_url(url or bind_url, options)`,
    the options passed through `adjust` first (add a secret, TLS files) and the
    transport through `wrap` after (a WrappingTransport such as the WAN emulator)."""

    bind_url: str
    adjust: Callable[[TransportOptions], TransportOptions] | None = None
    wrap: Callable[[Transport], Transport] | None = None

    def make(self, url: str | None = None, options: TransportOptions | None = None) -> Transport:
        options = options or TransportOptions()
        if self.adjust is not None:
            options = self.adjust(options)
        transport = transport_from_url(url or self.bind_url, options)
        return transport if self.wrap is None else self.wrap(transport)


def numbered(seq: int, size: int = 16) -> bytes:
    """A frame that says its own number (8 bytes) and whose body is checkable."""
    body = bytes([seq % 251]) * max(0, size - 8)
    return seq.to_bytes(8, "big") + body


def number_of(frame: bytes) -> int:
    return int.from_bytes(frame[:8], "big")


def intact(frame: bytes) -> bool:
    seq = number_of(frame)
    return frame[8:] == bytes([seq % 251]) * (len(frame) - 8)


def strictly_increasing(seqs: list[int]) -> bool:
    return all(a < b for a, b in itertools.pairwise(seqs))


class Inbox:
    """An on_frame handler that records arrivals per sending node (`link.peer`).

    `hook(link, frame)` runs after recording (a check's planted behaviour: drop the
    link, be slow); `closing` set means "no call may come now" and counts those that do.
    """

    def __init__(self) -> None:
        self.seqs: dict[str | None, list[int]] = defaultdict(list)
        self.sizes: dict[str | None, list[int]] = defaultdict(list)
        self.seen: dict[str | None, set[int]] = defaultdict(set)
        self.corrupt = 0
        self.closing = False
        self.calls_after_close = 0
        self.hook: Callable[[Link, bytes], None] | None = None
        self._event: asyncio.Event | None = None

    def __call__(self, link: Link, frame: bytes) -> None:
        if self.closing:
            self.calls_after_close += 1
        seq = number_of(frame)
        self.seqs[link.peer].append(seq)
        self.sizes[link.peer].append(len(frame))
        self.seen[link.peer].add(seq)
        if not intact(frame):
            self.corrupt += 1
        if self._event is not None:
            self._event.set()
        if self.hook is not None:
            self.hook(link, frame)

    def got(self, peer: str) -> list[int]:
        """The numbers of the frames from `peer`, in arrival order."""
        return self.seqs.get(peer, [])

    def has(self, peer: str, seq: int) -> bool:
        """Whether frame number `seq` from `peer` has arrived."""
        return seq in self.seen.get(peer, ())

    async def wait_until(self, predicate: Callable[[], bool], what: str) -> None:
        """Return once `predicate()` holds; AssertionError after WAIT_S."""
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
                async with asyncio.timeout(min(remaining, 0.05)):
                    await self._event.wait()


class Nodes:
    """Starts transports (made by `maker`) and closes every one of them on exit, pass or
    fail: `async with Nodes(maker) as nodes: a = await nodes.start("a", inbox)`."""

    def __init__(self, maker: TransportMaker | None = None) -> None:
        self.maker = maker
        self.started: list[Transport] = []

    def make(self, url: str | None = None, options: TransportOptions | None = None) -> Transport:
        """An unstarted transport from the maker, closed on exit like the started ones."""
        if self.maker is None:
            raise TypeError("this node set has no maker: pass one to Nodes()")
        transport = self.maker.make(url, options)
        self.started.append(transport)
        return transport

    async def start(
        self,
        node: str,
        inbox: Inbox,
        options: TransportOptions | None = None,
        url: str | None = None,
    ) -> Transport:
        """A transport made with `url`/`options`, started as `node` with `inbox`."""
        return await self.start_transport(self.make(url, options), node, inbox)

    async def start_transport(self, transport: Transport, node: str, inbox: Inbox) -> Transport:
        """Start `transport` as `node`; it is closed on exit."""
        if transport not in self.started:
            self.started.append(transport)
        await transport.start(node, inbox)
        return transport

    async def __aenter__(self) -> Nodes:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await asyncio.gather(*(t.close() for t in self.started))


def leaks() -> list[str]:
    """What transports left behind: threads named abcast-* still running, mem:// names
    still bound (a transport of one's own that starts threads can name them abcast-*)."""
    found = [f"thread {t.name}" for t in threading.enumerate() if t.name.startswith("abcast-")]
    return found + [f"mem://{name}" for name in bound_names()]


def run(main: Callable[[], Awaitable[None]]) -> None:
    """asyncio.run(main()), then check that no transport left a thread or a name behind."""

    async def wrapper() -> None:
        await main()

    asyncio.run(wrapper())
    left = leaks()
    assert not left, f"still there after every transport closed: {left}"


@contextlib.contextmanager
def raises(kind: type[BaseException], what: str) -> Iterator[None]:
    """Assert that the block raises `kind` (pytest.raises without pytest)."""
    try:
        yield
    except kind:
        return
    raise AssertionError(f"{what}: expected {kind.__name__}, nothing was raised")
