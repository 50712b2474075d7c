"""udp:// keeps a bounded table of the senders it hears (udp_sources' rules).

Properties: however many node ids send to it, at most `max_sources` sources are live (a
forger without the secret can make a new id per datagram); a sender silent for
`source_idle_s` and a peer removed are forgotten, counted and logged; a forgotten
sender's replayed datagram is still stale, and its next one is handed over (it resumes
where it was); the tombstones are bounded too. A planted table that never forgets is
caught. Datagrams are made with udp_wire's encoder and handed to the transport's receive
path with the loop time set by the test (no waiting on the clock).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest

from abcast.transport.base import Link
from abcast.transport.udp import UdpTransport
from abcast.transport.udp_wire import PacketType, encode

pytestmark = pytest.mark.timeout(30)
ADDR = ("127.0.0.1", 9)  # where the crafted datagrams claim to come from


def _datagram(sender: str, seq: int, incarnation: int = 7) -> bytes:
    body = b"%s-%d" % (sender.encode(), seq)
    return encode(PacketType.DATA, 0, 1, 0, incarnation, 1, seq, 0, len(body),
                  sender.encode(), body)


def _with_receiver(query: str,
                   body: Callable[[UdpTransport, list[bytes]], Awaitable[None]]) -> None:
    async def main() -> None:
        got: list[bytes] = []

        def on_frame(link: Link, frame: bytes) -> None:
            got.append(frame)

        rx = UdpTransport(f"udp://127.0.0.1:0?{query}")
        await rx.start("rx", on_frame)
        try:
            await body(rx, got)
        finally:
            await rx.close()

    asyncio.run(main())


def _hear(rx: UdpTransport, now: float, datagram: bytes) -> None:
    rx._now = now
    rx._on_datagram(datagram, ADDR, 0)


async def _twenty_senders(rx: UdpTransport, got: list[bytes]) -> None:
    for k in range(20):
        _hear(rx, k * 0.01, _datagram(f"s{k}", 1))
    assert len(got) == 20


def test_the_table_stays_bounded_and_a_forgotten_sender_resumes_where_it_was() -> None:
    async def body(rx: UdpTransport, got: list[bytes]) -> None:
        await _twenty_senders(rx, got)
        assert len(rx._sources) == 4 and rx.udp_stats.forgotten_sources == 16
        assert set(rx._sources) == {"s16", "s17", "s18", "s19"}  # the most recently heard
        assert len(rx._table.forgotten) == 16  # tombstones: within 4 x max_sources
        _hear(rx, 1.0, _datagram("s0", 1))  # a replay of a forgotten sender: still stale
        assert len(got) == 20 and rx.udp_stats.stale_datagrams == 1
        _hear(rx, 1.0, _datagram("s0", 2))  # its next frame: handed over
        assert got[-1] == b"s0-2" and len(rx._sources) == 4

    _with_receiver("max_sources=4", body)


def test_the_tombstones_are_bounded_too() -> None:
    async def body(rx: UdpTransport, got: list[bytes]) -> None:
        await _twenty_senders(rx, got)
        assert len(rx._sources) == 2 and len(rx._table.forgotten) == 8
        assert rx.udp_stats.forgotten_sources == 18

    _with_receiver("max_sources=2", body)


def test_the_bound_check_catches_a_planted_table_that_never_forgets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(UdpTransport, "_make_room", lambda self: None)

    async def body(rx: UdpTransport, got: list[bytes]) -> None:
        await _twenty_senders(rx, got)
        assert len(rx._sources) == 20 and rx.udp_stats.forgotten_sources == 0

    _with_receiver("max_sources=4", body)


def test_a_silent_sender_is_forgotten_counted_and_logged(
    caplog: pytest.LogCaptureFixture,
) -> None:
    async def body(rx: UdpTransport, got: list[bytes]) -> None:
        _hear(rx, 100.0, _datagram("a", 1))
        _hear(rx, 100.0, _datagram("b", 1))
        _hear(rx, 130.0, _datagram("a", 2))
        _hear(rx, 150.0, _datagram("c", 1))  # nobody silent for 60 s yet
        assert set(rx._sources) == {"a", "b", "c"}
        _hear(rx, 161.0, _datagram("d", 1))  # b: silent since 100
        assert set(rx._sources) == {"a", "c", "d"} and rx.udp_stats.forgotten_sources == 1
        _hear(rx, 162.0, _datagram("b", 1))  # its replay: stale
        assert len(got) == 5

    with caplog.at_level(logging.INFO, logger="abcast.transport.udp"):
        _with_receiver("source_idle_s=60", body)
    lines = [r.getMessage() for r in caplog.records if "forgot" in r.getMessage()]
    assert len(lines) == 1 and "forgot 1 senders (silent; 2 kept)" in lines[0]


def test_a_removed_peer_is_forgotten_and_its_replay_stays_stale() -> None:
    async def body(rx: UdpTransport, got: list[bytes]) -> None:
        rx.add_peer("a", "udp://127.0.0.1:9")
        _hear(rx, 1.0, _datagram("a", 1))
        link = rx._sources["a"].link
        rx.remove_peer("a")
        assert "a" not in rx._sources and not link.alive
        assert rx.udp_stats.forgotten_sources == 1
        _hear(rx, 2.0, _datagram("a", 1))
        assert got == [b"a-1"] and rx.udp_stats.stale_datagrams == 1
        _hear(rx, 2.0, _datagram("a", 2, incarnation=8))  # a restart: accepted
        assert got == [b"a-1", b"a-2"]

    _with_receiver("", body)
