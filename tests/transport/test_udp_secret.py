"""udp:// with a group secret (every datagram AES-GCM sealed): a node without the secret
or with another one gets every datagram rejected, one log line each, before it touches
any state — it cannot claim a member's id, start a session or reset one — and a
member's replayed datagram is stale; the member's frames all arrive, in order."""

from __future__ import annotations

import logging
import socket

import pytest
from transport_harness import TEST_SECRET, Inbox, Nodes, numbered, run

from abcast.transport import TransportOptions
from abcast.transport.udp import UdpTransport

pytestmark = pytest.mark.timeout(60)

LOGGER = "abcast.transport.udp"
SECRET = TransportOptions(secret=TEST_SECRET)


@pytest.mark.parametrize("stranger", ["no-secret", "wrong-secret"])
def test_a_strangers_datagrams_are_rejected_and_the_member_goes_on(
    stranger: str, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOGGER)

    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            a = await nodes.start("udp", "a", Inbox(), SECRET)
            b = await nodes.start("udp", "b", inbox, SECRET)
            assert isinstance(b, UdpTransport)
            a.add_peer("b", b.address)
            for seq in range(20):
                a.send("b", numbered(seq))
            await inbox.wait_until(lambda: len(inbox.got("a")) >= 20, "a's first frames")
            secret = None if stranger == "no-secret" else b"another-secret"
            x = await nodes.start("udp", "a", Inbox(), TransportOptions(secret=secret))
            x.add_peer("b", b.address)  # x claims to be a
            for seq in range(5):
                x.send("b", numbered(10_000 + seq))
            await inbox.wait_until(lambda: b.stats.rejected_frames >= 5, "the rejections")
            for seq in range(20, 40):
                a.send("b", numbered(seq))
            await inbox.wait_until(lambda: len(inbox.got("a")) >= 40, "a's later frames")
            assert inbox.got("a") == list(range(40))
            rejected = [r.getMessage() for r in caplog.records
                        if r.name == LOGGER and r.levelno == logging.WARNING]
            assert len(rejected) == 5 and all("fails authentication" in m for m in rejected)

    run(main)


def test_a_replayed_datagram_is_stale() -> None:
    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            a = await nodes.start("udp", "a", Inbox(), SECRET)
            b = await nodes.start("udp", "b", inbox, SECRET)
            assert isinstance(a, UdpTransport) and isinstance(b, UdpTransport)
            captured: list[bytes] = []
            real_protect = a._protect

            def capture(datagram: bytes) -> bytes:
                sealed = real_protect(datagram)
                captured.append(sealed)
                return sealed

            a._protect = capture  # type: ignore[method-assign]
            a.add_peer("b", b.address)
            for seq in range(10):
                a.send("b", numbered(seq))
            await inbox.wait_until(lambda: len(inbox.got("a")) >= 10, "a's frames")
            host, port = b.address.removeprefix("udp://").rsplit(":", 1)
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
                for datagram in captured[:5]:
                    raw.sendto(datagram, (host, int(port)))
            a.send("b", numbered(10))
            await inbox.wait_until(lambda: len(inbox.got("a")) >= 11, "the frame after")
            assert inbox.got("a") == list(range(11))  # no replay delivered twice
            assert b.udp_stats.stale_datagrams >= 5 and b.stats.rejected_frames == 0

    run(main)
