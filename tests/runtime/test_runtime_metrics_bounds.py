"""The metrics endpoint, the probe socket and the metrics tables under hostile or
long-lived use: a client that never reads its reply is let go, and the multicast traffic
table stays bounded under churn."""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import select
import socket
import tempfile
from collections import Counter

import pytest

from abcast import Node
from abcast.runtime import probe, status
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
    monkeypatch.setattr(status, "WRITE_TIMEOUT_S", 0.3, raising=False)

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


class _BigEncoder:
    def encode(self, obj: object) -> bytes:
        return BIG_BODY


def test_a_probe_client_that_never_reads_its_reply_is_let_go(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The probe socket had the same unbounded drain: a client (the user's own, the
    directory is 0700) that sent `status` and read nothing held the handler and the
    reply until it went away. It shares the endpoint's exchange now (status.answer_once):
    after WRITE_TIMEOUT_S the connection is closed, which the client sees as a hang-up."""
    monkeypatch.setattr(probe, "_encoder", _BigEncoder())
    monkeypatch.setattr(status, "WRITE_TIMEOUT_S", 0.3, raising=False)

    async def main() -> bool:
        with tempfile.TemporaryDirectory(prefix="ops") as folder:
            path = os.path.join(folder, "n1.sock")
            node = await Node("mem://", node="n1", probe=path).start()
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            sock.setblocking(False)
            poller = select.poll()
            poller.register(sock, select.POLLHUP)
            try:
                await asyncio.get_running_loop().sock_connect(sock, path)
                await asyncio.get_running_loop().sock_sendall(sock, probe.REQUEST)
                with contextlib.suppress(TimeoutError):
                    await until(lambda: bool(poller.poll(0)), timeout_s=5.0)
                return any(events & select.POLLHUP for _, events in poller.poll(0))
            finally:
                sock.close()
                await node.close()

    assert asyncio.run(main())


def test_the_multicast_table_stays_bounded_under_churn() -> None:
    """Every distinct destination set of a multicast frame (`Node.transmit_many`, every
    ordered batch of the sequencer family) made its own entry in the node's multicast
    table, kept for as long as the node ran; under churn each view is a new set: 2,000
    views of 8 peers out of 40 left 2,000 entries (tuples of 8 ids each) on main. Now
    the table holds at most MAX_DESTINATION_SETS, and what each peer was sent still
    adds up exactly."""
    from abcast.runtime import status
    from abcast.runtime.status import peer_traffic

    bound = getattr(status, "MAX_DESTINATION_SETS", 256)  # (so main fails on the size)

    pool = [f"p{i}" for i in range(40)]
    rng = random.Random(7)
    views = [tuple(sorted(rng.sample(pool, 8))) for _ in range(2_000)]

    async def main() -> tuple[int, dict[str, tuple[int, int]]]:
        # Peers that never answer: the frames wait in the transport, nobody refuses them.
        node = await Node("mem://", node="n1", metrics_port=0).start()
        try:
            node.add_peers({peer: f"mem://ops-churn-{peer}" for peer in pool})
            for destinations in views:
                for _ in range(3):
                    node.transmit_many(destinations, b"x" * 10)
            node.transmit("p0", b"y" * 5)
            assert node.multicast_traffic is not None
            return len(node.multicast_traffic), {
                peer: (t.frames_out, t.bytes_out) for peer, t in peer_traffic(node).items()}
        finally:
            await node.close()

    entries, counted = asyncio.run(main())
    assert entries <= bound
    sent = Counter(peer for destinations in views for peer in destinations)
    expected = {peer: (3 * n, 30 * n) for peer, n in sent.items()}
    expected["p0"] = (expected["p0"][0] + 1, expected["p0"][1] + 5)
    assert counted == expected


def test_peers_the_node_let_go_do_not_keep_their_entries_and_labels_for_ever() -> None:
    """Every peer that ever had an address kept its traffic entry, and so its `peer`
    label on abcast_peer_frames_total / abcast_peer_bytes_total, for as long as the node
    ran: 2,000 peers that came and went left 2,000 entries on main
    (/tmp/opsfix2/peer_churn.py). Now the entries of peers let go are forgotten once
    MAX_PEER_ENTRIES are held; a current peer's and the OTHER_PEERS entry keep their
    counts."""
    from abcast.codec import encode_frame
    from abcast.runtime.status import MAX_PEER_ENTRIES, OTHER_PEERS, peer_traffic
    from abcast.stack import Packet
    from abcast.transport import TransportOptions, transport_from_url

    other, bound = OTHER_PEERS, MAX_PEER_ENTRIES

    async def main() -> tuple[int, dict[str, tuple[int, int, int]]]:
        node = await Node("mem://", node="n1", metrics_port=0).start()
        stranger = transport_from_url("mem://", TransportOptions())
        await stranger.start("stranger", lambda link, data: None)
        try:
            stranger.add_peer("n1", node.address)  # no address of it here: "(other)"
            stranger.send("n1", encode_frame("nosuchgroup", "stranger", Packet((), b"")))
            await until(lambda: node.stats.unknown_group_frames == 1, timeout_s=10.0)
            node.pin_peer("kept", "mem://ops-kept")
            for i in range(2_000):
                peer = f"p{i}"
                node.add_peers({peer: f"mem://ops-gone-{peer}"})
                node.transmit(peer, b"x" * 10)
                node.transmit("kept", b"y")
                node.prune_peers()  # no group holds it: let go
            assert node.traffic is not None
            return len(node.traffic), {
                peer: (t.frames_out, t.bytes_out, t.frames_in)
                for peer, t in peer_traffic(node).items() if not peer.startswith("p")}
        finally:
            await stranger.close()
            await node.close()

    entries, kept = asyncio.run(main())
    assert entries <= bound
    assert kept == {"kept": (2_000, 2_000, 0), other: (0, 0, 1)}
