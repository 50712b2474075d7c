"""udp:// with an IP multicast group on loopback, and its datagram header.

Properties: a frame for every other member is one datagram write and reaches each of
them, in order, large frames (fragmented) included; garbage datagrams — random bytes, a
wrong magic or version, a truncated header, a 64 KB length on a 100-byte datagram — sent
to the group address and to a unicast port are each logged once and dropped, and every
node keeps serving; reassembly is bounded and expires; injected loss drops datagrams but
never reorders or duplicates. Tests needing multicast skip, with the kernel's reason,
where it is refused.
"""

from __future__ import annotations

import asyncio
import logging
import random
import socket

import pytest
from transport_harness import Inbox, Nodes, numbered, run, strictly_increasing
from udp_group import fresh_group, require_multicast

from abcast.errors import DecodeError
from abcast.transport.udp import UdpTransport
from abcast.transport.udp_wire import HEADER, HEADER_BYTES, MAGIC, PacketType, decode, encode

pytestmark = pytest.mark.timeout(60)
NAMES = ("a", "b", "c", "d")


def _group_url(group: str, **query: object) -> str:
    extra = "".join(f"&{k}={v}" for k, v in query.items())
    return f"udp://{group}?ttl=0{extra}"


async def _members(nodes: Nodes, group: str, inboxes: dict[str, Inbox],
                   **query: object) -> dict[str, UdpTransport]:
    out = {}
    for name in NAMES:
        transport = await nodes.start("udp", name, inboxes[name], url=_group_url(group, **query))
        assert isinstance(transport, UdpTransport)
        out[name] = transport
    for name, transport in out.items():
        for other in NAMES:
            if other != name:
                transport.add_peer(other, out[other].address)
    return out


def test_a_multicast_is_one_datagram_and_reaches_every_member_in_order() -> None:
    require_multicast()
    group = fresh_group()
    count = 300

    async def main() -> None:
        inboxes = {n: Inbox() for n in NAMES}
        async with Nodes() as nodes:
            members = await _members(nodes, group, inboxes)
            a = members["a"]
            for seq in range(count):
                a.multicast(("b", "c", "d"), numbered(seq, 100))
            big = numbered(count, 3 * 1024 * 1024)  # fragmented: ~49 datagrams
            a.multicast(("b", "c", "d"), big)
            for name in ("b", "c", "d"):
                inbox = inboxes[name]
                await inbox.wait_until(lambda i=inbox: len(i.got("a")) > count, f"all at {name}")
                assert inbox.got("a") == list(range(count + 1))
                assert inbox.sizes["a"][-1] == len(big) and inbox.corrupt == 0
                assert members[name].udp_stats.multicast_frames_in == count + 1
            assert a.udp_stats.multicast_frames_out == count + 1
            fragments = -(-len(big) // (a.udp.datagram_bytes - HEADER_BYTES - 1))
            assert a.udp_stats.datagrams_out == count + fragments  # one write per frame
            assert inboxes["a"].seqs == {}  # a's own multicasts are not handed to it

    run(main)


def _garbage(rng: random.Random) -> list[bytes]:
    good = encode(PacketType.DATA, 0, 1, 0, 1, 1, 1, 0, 4, b"x", b"abcd")
    header_64k = HEADER.pack(MAGIC, 1, PacketType.DATA, 0, 1, 1, 0, 1, 1, 1, 0, 65_536)
    return [
        rng.randbytes(200),  # random bytes
        b"ZZ" + good[2:],  # wrong magic
        good[:2] + b"\x09" + good[3:],  # wrong version
        good[:20],  # truncated header
        (header_64k + b"x" + bytes(100))[:100],  # a 64 KB length on a 100-byte datagram
        HEADER.pack(MAGIC, 1, 99, 0, 1, 1, 0, 1, 1, 1, 0, 0) + b"x",  # unknown type
        HEADER.pack(MAGIC, 1, PacketType.DATA, 0, 1, 2, 0, 1, 1, 1, 5, 10) + b"x",  # frag 5 of 2
        b"",  # empty
    ]


def test_garbage_datagrams_are_logged_and_every_node_keeps_running(
        caplog: pytest.LogCaptureFixture) -> None:
    require_multicast()
    group = fresh_group()
    ip, port = group.split(":")
    caplog.set_level(logging.WARNING, logger="abcast.transport")

    async def main() -> None:
        inboxes = {n: Inbox() for n in NAMES}
        async with Nodes() as nodes:
            members = await _members(nodes, group, inboxes)
            garbage = _garbage(random.Random(18))
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
                raw.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF,
                               socket.inet_aton("127.0.0.1"))
                raw.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 0)
                b_host, b_port = members["b"].address.removeprefix("udp://").split(":")
                for datagram in garbage:
                    raw.sendto(datagram, (ip, int(port)))  # to every member at once
                    raw.sendto(datagram, (b_host, int(b_port)))  # and to b's own port
            expected = {name: len(garbage) * (2 if name == "b" else 1) for name in NAMES}
            inbox = inboxes["c"]
            await inbox.wait_until(
                lambda: all(members[n].udp_stats.bad_datagrams == expected[n] for n in NAMES),
                "every garbage datagram refused")
            # still serving: a multicast after the garbage arrives everywhere
            members["a"].multicast(("b", "c", "d"), numbered(7))
            members["d"].send("b", numbered(8))
            for name in ("b", "c", "d"):
                await inboxes[name].wait_until(lambda n=name: inboxes[n].got("a") == [7], name)
            await inboxes["b"].wait_until(lambda: inboxes["b"].got("d") == [8], "d to b")
            for name in NAMES:
                assert members[name].udp_stats.datagrams_in >= expected[name]
                assert members[name].is_open

    run(main)
    lines = [r for r in caplog.records if "bad datagram" in r.getMessage()]
    assert len(lines) == len(_garbage(random.Random(18))) * 5  # one line each, per receiver


def test_reassembly_is_bounded_and_expires() -> None:
    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            b = await nodes.start("udp", "b", inbox,
                                  url="udp://127.0.0.1:0?reassembly_timeout_s=0.2"
                                      "&max_reassemblies=4")
            assert isinstance(b, UdpTransport)
            host, port = b.address.removeprefix("udp://").split(":")
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as raw:
                def fragment(seq: int, frag: int, body: bytes = b"x" * 100) -> None:
                    raw.sendto(encode(PacketType.DATA, 0, 3, 0, 42, 1, seq, frag, 300,
                                      b"a", body), (host, int(port)))
                for seq in range(1, 11):  # ten frames, each missing its last fragment
                    fragment(seq, 0)
                    fragment(seq, 1)
                await inbox.wait_until(lambda: b.udp_stats.datagrams_in >= 20, "fragments")
                assert b.udp_stats.evicted_reassemblies == 6  # at most 4 are kept
                assert b.reassembly_bytes == 4 * 300
                await asyncio.sleep(0.3)
                fragment(11, 0)  # a new frame: the four old ones have expired
                await inbox.wait_until(lambda: b.udp_stats.expired_reassemblies == 4, "expiry")
                assert b.reassembly_bytes == 300
                whole = numbered(12, 300)
                for frag in range(3):  # a whole frame still goes through
                    fragment(12, frag, whole[frag * 100 : (frag + 1) * 100])
                await inbox.wait_until(lambda: inbox.sizes["a"] == [300], "a whole frame")
            assert inbox.got("a") == [12] and inbox.corrupt == 0

    run(main)


def test_injected_loss_drops_but_never_reorders() -> None:
    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            a = await nodes.start("udp", "a", Inbox())
            b = await nodes.start("udp", "b", inbox, url="udp://127.0.0.1:0?loss=0.3")
            assert isinstance(b, UdpTransport)
            a.add_peer("b", b.address)
            for seq in range(1000):
                a.send("b", numbered(seq))
            await inbox.wait_until(lambda: b.udp_stats.datagrams_in >= 1000, "every datagram")
            got = inbox.got("a")
            assert strictly_increasing(got) and set(got) <= set(range(1000))
            assert len(got) + b.udp_stats.injected_losses == 1000
            assert 150 < b.udp_stats.injected_losses < 450

    run(main)


@pytest.mark.parametrize(("datagram", "why"), [
    (b"", "truncated"),
    (b"ZZ" + bytes(60), "bad magic"),
    (HEADER.pack(MAGIC, 2, 1, 0, 1, 1, 0, 1, 1, 1, 0, 1) + b"xy", "unsupported version"),
    (HEADER.pack(MAGIC, 1, 1, 0, 0, 1, 0, 1, 1, 1, 0, 1) + b"y", "sender id of 0"),
    (HEADER.pack(MAGIC, 1, 1, 0, 9, 1, 0, 1, 1, 1, 0, 1) + b"x", "truncated"),
    (HEADER.pack(MAGIC, 1, 1, 0, 1, 1, 0, 1, 1, 1, 0, 65_536) + b"x" * 100, "frame size"),
    (HEADER.pack(MAGIC, 1, 1, 0, 1, 1, 0, 1, 1, 1, 0, 2**31) + b"x", "exceeds"),
    (HEADER.pack(MAGIC, 1, 1, 0, 1, 0, 0, 1, 1, 1, 0, 1) + b"xy", "fragment 0 of 0"),
    (HEADER.pack(MAGIC, 1, 1, 0, 1, 4, 0, 1, 1, 1, 0, 10) + b"x" + bytes(11), "fragment of 11"),
    (HEADER.pack(MAGIC, 1, 1, 0, 1, 1, 0, 1, 1, 1, 0, 1) + b"\xff" + b"z", "utf-8"),
])
def test_decoding_refuses_malformed_datagrams(datagram: bytes, why: str) -> None:
    with pytest.raises(DecodeError, match=why):
        decode(datagram, 16 * 1024 * 1024)


def test_a_good_datagram_decodes_to_what_was_encoded() -> None:
    data = encode(PacketType.DATA, 3, 2, 77, 5, 6, 9, 1, 12, b"n1", b"hello")
    d = decode(data, 1024)
    assert (d.kind, d.flags, d.frags, d.group, d.incarnation, d.session, d.seq, d.frag,
            d.size, d.sender, d.body) == (1, 3, 2, 77, 5, 6, 9, 1, 12, "n1", b"hello")
