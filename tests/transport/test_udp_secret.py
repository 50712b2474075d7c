"""udp:// with a group secret (every datagram AES-GCM sealed): a node without the secret
or with another one gets every datagram rejected, one log line each, before it touches
any state — it cannot claim a member's id, start a session or reset one — and a
member's replayed datagram is stale; the member's frames all arrive, in order."""

from __future__ import annotations

import logging
import socket
from typing import Any

import pytest
from transport_harness import TEST_SECRET, Inbox, Nodes, numbered, run

from abcast.transport import TransportOptions
from abcast.transport.udp import UdpTransport
from abcast.transport.udp_sources import Source, Verdict

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


def _accepts_any_other_incarnation(source: Source | None, incarnation: int,
                                   session: int) -> Verdict:
    """The planted bug (the rule before): any incarnation but the source's is a restart."""
    if source is None or incarnation != source.incarnation or session > source.session:
        return Verdict.NEWER
    return Verdict.CURRENT if session == source.session else Verdict.STALE


async def _restart_and_replay() -> tuple[list[int], UdpTransport]:
    """`a` sends 0..4 and is replaced by a restarted `a` (a new transport, same id) that
    sends 5..9; then an attacker replays one datagram of the old process and all of the
    new one's, and the old process, still open, sends a late frame (99). What `b`
    handed over from `a`, and `b`."""
    inbox = Inbox()
    async with Nodes() as nodes:
        b = await nodes.start("udp", "b", inbox, SECRET)
        assert isinstance(b, UdpTransport)
        captured: dict[str, list[bytes]] = {"old": [], "new": []}
        senders = []
        for life, first in (("old", 0), ("new", 5)):
            a = await nodes.start("udp", "a", Inbox(), SECRET)
            assert isinstance(a, UdpTransport)
            real_protect, box = a._protect, captured[life]

            def capture(datagram: bytes, real: Any = real_protect, box: Any = box) -> bytes:
                sealed: bytes = real(datagram)
                box.append(sealed)
                return sealed

            a._protect = capture  # type: ignore[method-assign]
            a.add_peer("b", b.address)
            for seq in range(first, first + 5):
                a.send("b", numbered(seq))
            await inbox.wait_until(lambda n=first + 5: len(inbox.got("a")) >= n, f"{life} a")
            senders.append(a)
        old, new = senders
        assert new.incarnation > old.incarnation  # a later start, a larger incarnation
        host, port = b.address.removeprefix("udp://").rsplit(":", 1)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
            for datagram in [captured["old"][0], *captured["new"]]:
                raw.sendto(datagram, (host, int(port)))
        old.send("b", numbered(99))
        await inbox.wait_until(lambda: b.udp_stats.datagrams_in >= 17, "all 17 datagrams")
        new.send("b", numbered(10))
        await inbox.wait_until(lambda: 10 in inbox.got("a"), "the restarted a's next frame")
        return inbox.got("a"), b


def test_an_earlier_incarnation_is_stale_replayed_or_late() -> None:
    async def main() -> None:
        got, b = await _restart_and_replay()
        assert got == list(range(11))  # no replay, no late frame of the old process
        assert b.udp_stats.stale_datagrams == 7 and b.udp_stats.resets_sent == 0
        assert b.stats.rejected_frames == 0

    run(main)


def test_the_incarnation_check_catches_the_planted_any_other_incarnation_rule(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from abcast.transport import udp

    monkeypatch.setattr(udp, "judge", _accepts_any_other_incarnation)

    async def main() -> None:
        got, _ = await _restart_and_replay()
        assert got != list(range(11)) and got[:10] == list(range(10))  # replays came through

    run(main)
