"""The metrics endpoint and tables under hostile or long-lived use: a scraper that never
reads its reply is let go, and the multicast traffic table stays bounded under churn."""

from __future__ import annotations

import asyncio
import contextlib
import socket

import pytest

from abcast import Node
from abcast.runtime import metrics
from abcast.testing.polling import until

pytestmark = pytest.mark.timeout(60)

#: a reply this large cannot sit in the kernel's buffers of a client that reads nothing
BIG_BODY = b"# padding\n" * 400_000  # 4 MB
_TCP_CLOSE = 7  # tcpi_state of a connection the other side reset


def _tcp_state(sock: socket.socket) -> int:
    info = sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 8)
    state: int = info[0]
    return state


def test_a_scraper_that_never_reads_its_reply_is_let_go(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The endpoint wrote its reply and waited for it to drain with no bound: a client
    that sent `GET /metrics` and read nothing held the connection, its handler and the
    whole reply in memory for as long as it liked. Now the reply has WRITE_TIMEOUT_S to
    go out, and the connection is aborted after it."""
    import prometheus_client

    monkeypatch.setattr(prometheus_client, "generate_latest", lambda registry: BIG_BODY)
    monkeypatch.setattr(metrics, "WRITE_TIMEOUT_S", 0.3, raising=False)

    async def main() -> int:
        node = await Node("mem://", node="n1", metrics_port=0).start()
        assert node.metrics_url is not None
        host, port = node.metrics_url.split("/")[2].rsplit(":", 1)
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
        sock.setblocking(False)
        try:
            await asyncio.get_running_loop().sock_connect(sock, (host, int(port)))
            await asyncio.get_running_loop().sock_sendall(sock, b"GET /metrics HTTP/1.1\r\n\r\n")
            with contextlib.suppress(TimeoutError):
                await until(lambda: _tcp_state(sock) == _TCP_CLOSE, timeout_s=5.0)
            return _tcp_state(sock)
        finally:
            sock.close()
            await node.close()

    assert asyncio.run(main()) == _TCP_CLOSE
