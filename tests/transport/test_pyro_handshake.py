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
import pytest
from transport_harness import Inbox, Nodes, numbered, run

from abcast.transport import TransportOptions
from abcast.transport.pyro_transport import PyroTransport

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
