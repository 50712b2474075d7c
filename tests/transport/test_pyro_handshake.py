"""pyro://'s receiver and Pyro's connection handshake (our hello travels in it): a
connection that is refused there leaves nothing behind, and one gets io_timeout_s to
complete it. Pyro runs each connection's handshake on one of its worker threads
(at most THREADPOOL_SIZE), and once none is free the daemon's own accept loop answers
the next connection, reading its handshake too: without a bound, a few connections that
say nothing held every worker and then the accept loop, and no member got in again.
"""

from __future__ import annotations

import socket

import Pyro5
import Pyro5.client
import pytest
from transport_harness import Inbox, Nodes, numbered, run

from abcast.transport import TransportOptions
from abcast.transport.pyro_transport import OBJECT_ID, SERIALIZER, PyroTransport

pytestmark = pytest.mark.timeout(60)

WORKERS = 4  # Pyro's pool, made small so that a few silent connections exhaust it


def test_silent_connections_do_not_lock_members_out(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(Pyro5.config, "THREADPOOL_SIZE", WORKERS)
    monkeypatch.setattr(Pyro5.config, "THREADPOOL_SIZE_MIN", WORKERS)

    async def main() -> None:
        inbox = Inbox()
        silent: list[socket.socket] = []
        try:
            async with Nodes() as nodes:
                b = await nodes.start("pyro", "b", inbox, TransportOptions(io_timeout_s=0.3))
                host, port = b.address.removeprefix("pyro://").rsplit(":", 1)
                for _ in range(WORKERS + 1):  # every worker, then the accept loop
                    silent.append(socket.create_connection((host, int(port))))
                a = await nodes.start("pyro", "a", Inbox())
                a.add_peer("b", b.address)
                a.send("b", numbered(0))
                await inbox.wait_until(lambda: inbox.got("a") == [0], "a member's frame")
        finally:
            for sock in silent:
                sock.close()

    run(main)


def test_a_refused_connection_leaves_nothing_behind() -> None:
    """A connection whose hello is refused (another frame bound) fails Pyro's handshake,
    after which Pyro never reports its disconnection: the receiver must not keep it in
    its table of connections (one entry per refused attempt, for ever)."""

    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            b = await nodes.start("pyro", "b", inbox)
            assert isinstance(b, PyroTransport)
            a = await nodes.start("pyro", "a", Inbox(), TransportOptions(
                max_frame_bytes=1 << 20, reconnect_initial_s=0.01, reconnect_max_s=0.01))
            a.add_peer("b", b.address)
            a.send("b", numbered(0))
            await inbox.wait_until(lambda: b.stats.refused_links >= 3, "three refusals")
            with b._lock:
                held = len(b._conn_links)
            assert held == 0, f"{held} refused connections still in the table"

    run(main)


def _stranger(address: str, name: str) -> Pyro5.client.Proxy:
    """A Pyro connection that completes the handshake with a valid hello, then idles."""
    host, port = address.removeprefix("pyro://").rsplit(":", 1)
    proxy = Pyro5.client.Proxy(f"PYRO:{OBJECT_ID}@{host}:{port}")
    proxy._pyroSerializer = SERIALIZER
    proxy._pyroHandshake = [name, 1, 1, TransportOptions().max_frame_bytes]
    proxy._pyroBind()
    return proxy


def _closed_by_peer(proxy: Pyro5.client.Proxy) -> bool:
    """The receiver closed this stranger's connection (its socket reads an end)."""
    try:
        return proxy._pyroConnection.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
    except BlockingIOError:
        return False  # open, nothing to read
    except OSError:
        return True  # reset


def test_idle_connections_are_closed_and_do_not_lock_members_out(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A connection that carries nothing for idle_timeout_s after its handshake is
    closed (INFO, idle_closed), as tcp:// closes one: idle ones no longer hold Pyro's
    workers, and so the door, for ever."""
    monkeypatch.setattr(Pyro5.config, "THREADPOOL_SIZE", WORKERS)
    monkeypatch.setattr(Pyro5.config, "THREADPOOL_SIZE_MIN", WORKERS)

    async def main() -> None:
        inbox = Inbox()
        strangers: list[Pyro5.client.Proxy] = []
        try:
            async with Nodes() as nodes:
                b = await nodes.start("pyro", "b", inbox, TransportOptions(idle_timeout_s=0.3))
                strangers += [_stranger(b.address, f"s{i}") for i in range(WORKERS)]
                a = await nodes.start("pyro", "a", Inbox())
                a.add_peer("b", b.address)
                a.send("b", numbered(0))
                await inbox.wait_until(lambda: inbox.got("a") == [0], "a member's frame")
                # The first stranger closed frees a worker, and a may get in before the
                # others' timeouts (their handshakes were a loaded machine's moments
                # apart): every one of them is closed, and counted, soon after.
                await inbox.wait_until(
                    lambda: all(map(_closed_by_peer, strangers))
                    and b.stats.idle_closed >= WORKERS, "every idle stranger closed")
        finally:
            for proxy in strangers:
                proxy._pyroRelease()

    run(main)


def test_an_idle_sender_reconnects_before_its_connection_is_closed_as_idle() -> None:
    """A sender that was idle for half of idle_timeout_s opens a fresh connection for its
    next batch: the receiver may have closed the old one as idle, and a call on it would
    lose that batch."""
    options = TransportOptions(idle_timeout_s=0.3)

    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            b = await nodes.start("pyro", "b", inbox, options)
            a = await nodes.start("pyro", "a", Inbox(), options)
            a.add_peer("b", b.address)
            a.send("b", numbered(0))
            await inbox.wait_until(lambda: inbox.got("a") == [0], "a's first frame")
            await inbox.wait_until(lambda: b.stats.idle_closed == 1, "the idle connection closed")
            a.send("b", numbered(1))
            await inbox.wait_until(lambda: inbox.got("a") == [0, 1], "a's frame after it")
            assert a.stats.lost_connections == 0

    run(main)
