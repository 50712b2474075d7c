"""The client's side of the promises the command line makes: `abcast call --oneway` says
`sent` only once the request has left the process (main slept 50 ms and hoped; a server
whose connection takes longer, a far one or a busy one, never got it while the command
said `sent`), and says `not sent` (exit 1) when no server took it within `--timeout`;
Case B's retries through the sequencer reach every member in turn, and its resend when
the contact leaves follows the request's contact policy."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import random
import socket
from pathlib import Path
from typing import Any

import pytest

from abcast import RegistryServer
from abcast.apps.rpc_commands import _call
from abcast.codec import decode_envelope
from abcast.ids import NodeId, sorted_nodes
from abcast.rpc import Client, IncomingRequest, Server, Status
from abcast.rpc import client as client_module
from abcast.rpc.services import KeyValue
from abcast.rpc.wire import ReplyFrame, encode_rpc
from abcast.runtime.node import Node
from abcast.transport.wan import WanTransport

pytestmark = pytest.mark.timeout(60)


class BusyServer:
    """A TCP relay to `upstream` in front of a busy server: its accept queue is full (one
    connection nobody has accepted), so the kernel drops a client's SYN and the client
    tries again after its retransmission timeout (1 s on Linux) — as a far server's
    answer takes a WAN round trip. `accept_after(s)` starts accepting (and relaying)
    `s` seconds from now; without it nobody ever accepts (a stopped process)."""

    def __init__(self, upstream: str) -> None:
        self.host, port = upstream.removeprefix("tcp://").rsplit(":", 1)
        self.port = int(port)
        self.listener = socket.socket()
        self.listener.bind(("127.0.0.1", 0))
        self.listener.listen(0)
        self.listener.setblocking(False)
        self.url = f"tcp://127.0.0.1:{self.listener.getsockname()[1]}"
        self.filler = socket.create_connection(self.listener.getsockname())  # queue full
        self.server: asyncio.Server | None = None
        self.tasks: set[asyncio.Task[None]] = set()

    def accept_after(self, delay_s: float) -> None:
        loop = asyncio.get_running_loop()
        loop.call_later(delay_s, lambda: self.tasks.add(loop.create_task(self._serve())))

    async def _serve(self) -> None:
        self.server = await asyncio.start_server(self._accepted, sock=self.listener)

    def _accepted(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if writer.get_extra_info("peername")[1] == self.filler.getsockname()[1]:
            writer.close()
            return
        self.tasks.add(asyncio.get_running_loop().create_task(self._relay(reader, writer)))

    async def _relay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        up_reader, up_writer = await asyncio.open_connection(self.host, self.port)
        await asyncio.gather(_pipe(reader, up_writer), _pipe(up_reader, writer))

    async def close(self) -> None:
        if self.server is not None:
            self.server.close()
        for task in self.tasks:
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        self.filler.close()
        self.listener.close()


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


@pytest.mark.parametrize("accepts", [True, False])
def test_call_oneway_says_sent_once_the_request_left(
        accepts: bool, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    async def main() -> None:
        async with RegistryServer() as registry:
            kv = KeyValue()
            server, group = await Server.create("kv", ordering="sequencer",
                                                registry=registry.url, server=Server(kv))
            busy = BusyServer(group.host.address)
            adopt = Client._adopt

            def via_busy(self: Client, view_id: int, members: dict[NodeId, str]) -> None:
                adopt(self, view_id, {m: busy.url for m in members})
                if accepts:  # busy for a moment: free by the client's second SYN
                    busy.accept_after(0.2)

            monkeypatch.setattr(Client, "_adopt", via_busy)
            try:
                code = await _call("kv", b"put x 42", registry.url, vote="first",
                                   consistency="any", timeout=5.0 if accepts else 0.5,
                                   path="via-member", contact="round-robin", to=None,
                                   oneway=True, as_json=True)
                said = json.loads(capsys.readouterr().out.splitlines()[-1])
                if not accepts:  # nobody took it: main said SENT, exit 0
                    assert (code, said["status"]) == (1, "NOT_SENT"), said
                    assert kv.executed == 0
                else:  # it left: the server runs it (main closed the client before that)
                    assert (code, said["status"]) == (0, "SENT"), said
                    async with asyncio.timeout(10):
                        while kv.items.get("x") != "42":
                            await asyncio.sleep(0.01)
            finally:
                await busy.close()
                server.close()
                await group.close()

    asyncio.run(main())


def test_case_b_via_the_sequencer_retries_through_every_member(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """`contact="sequencer"`: the first send goes to the leader, each retry to the next
    member in view order. Main's retries skipped only the last contact, so they went
    n1, n2, n1, n2…: with n1 and n2 out of this client's reach (its links to them black
    holes; both still members, ordering for the group) the request never reached n3 and
    ended TIMEOUT however long it waited; through n3 it is ordered at once."""

    async def main() -> None:
        async with RegistryServer() as registry:
            ran: list[bytes] = []

            def handle(req: IncomingRequest) -> bytes:
                ran.append(req.payload)
                return b"ok"

            servers = [await Server.create("svc", ordering="sequencer", registry=registry.url,
                                           on_request=handle)]
            for _ in range(2):
                servers.append(await Server.join("svc", registry=registry.url,
                                                 on_request=handle))
            hole = socket.socket()  # takes connections (the kernel's backlog), reads none
            hole.bind(("127.0.0.1", 0))
            hole.listen(8)
            adopt = Client._adopt

            def first_two_unreachable(self: Client, view_id: int,
                                      members: dict[NodeId, str]) -> None:
                lowest = sorted_nodes(list(members))[:2]
                hole_url = f"tcp://127.0.0.1:{hole.getsockname()[1]}"
                adopt(self, view_id, {m: hole_url if m in lowest else url
                                      for m, url in members.items()})

            monkeypatch.setattr(Client, "_adopt", first_two_unreachable)
            client = await Client.connect("svc", registry=registry.url, retry_s=0.1)
            try:
                assert len(client.members) == 3
                outcome = await client.request(b"x", vote="first", timeout=3.0,
                                               path="via-member", contact="sequencer")
                assert outcome.status is Status.OK, outcome
                assert client.stats.retries == 2  # n1, n2, then n3
            finally:
                await client.close()
                for server, group in servers:
                    server.close()
                    await group.close()
                hole.close()

    asyncio.run(main())


class _Wire:
    """A stand-in for the client's Node: it records whom each frame was sent to."""

    def __init__(self) -> None:
        self.id = "c1"
        self.address = "mem://c1"
        self.sent: list[NodeId] = []

    def transmit(self, peer: NodeId, data: bytes) -> None:
        self.sent.append(peer)

    async def close(self) -> None:
        pass


class _Last(random.Random):
    """`contact="any"` made predictable: it picks the last candidate."""

    def choice(self, seq: Any) -> Any:
        return seq[-1]


@pytest.mark.parametrize(("contact", "first", "resent"), [
    ("sequencer", "n1", "n2"),  # the new view's leader (main: n3, round robin's next)
    ("any", "n4", "n3"),        # a live member picked at random (main: n2)
])
def test_the_resend_after_the_contact_left_follows_the_contact_policy(
        contact: str, first: str, resent: str) -> None:
    """A view without a Case B request's contact resends it at once, through the member
    the request's `contact` policy picks; main resent it round robin whatever the policy
    (through the sequencer, a member other than the new leader: one hop more, and not
    the contact the caller asked for)."""

    async def main() -> None:
        wire = _Wire()
        client = Client("svc", wire, retry_s=30.0)  # type: ignore[arg-type]
        client._rng = _Last()
        client._install(1, ("n1", "n2", "n3", "n4"))
        call = asyncio.ensure_future(client.request(
            b"x", vote="first", timeout=30.0, path="via-member", contact=contact))
        while not wire.sent:  # the request's first send, on its first loop turn
            await asyncio.sleep(0)
        assert wire.sent == [first]
        client._install(2, tuple(m for m in ("n1", "n2", "n3", "n4") if m != first))
        assert wire.sent == [first, resent]
        assert client.stats.retries == 1
        (rid,) = client._pending
        reply = ReplyFrame(rid, resent, True, b"ok", 2, ())
        client._on_frame(None, decode_envelope(  # type: ignore[arg-type]
            encode_rpc(client.endpoint, resent, reply)))
        outcome = await asyncio.wait_for(call, 5)
        assert (outcome.status, outcome.value) == (Status.OK, b"ok")

    asyncio.run(main())


def test_flush_waits_for_the_frames_the_wan_emulator_holds(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A client behind the WAN emulator (`Node(wan=...)`, 150 ms one way): `flush` returns
    True only once its cast has left the delay line, so the `close()` after it discards
    nothing and the server runs the request. The wrapper's `buffered()` counted only its
    inner transport: flush returned at once and close() discarded the held frame."""
    matrix = tmp_path / "far.json"
    matrix.write_text('{"sites": ["far"], "rtt_ms": [[300]]}')  # every link: 150 ms
    monkeypatch.setattr(client_module, "Node", functools.partial(Node, wan=matrix))

    async def main() -> None:
        async with RegistryServer() as registry:
            kv = KeyValue()
            server, group = await Server.create("kv", ordering="sequencer",
                                                registry=registry.url, server=Server(kv))
            try:
                client = await Client.connect("kv", registry=registry.url)
                transport = client.node.transport
                assert isinstance(transport, WanTransport)
                client.cast(b"put x 42")
                assert transport.held() == 1 and transport.buffered() > 0
                assert await client.flush(timeout=10.0)
                assert transport.held() == 0 and transport.buffered() == 0
                await client.close()
                assert transport.stats.discarded_frames == 0
                async with asyncio.timeout(10):
                    while kv.items.get("x") != "42":
                        await asyncio.sleep(0.01)
            finally:
                server.close()
                await group.close()

    asyncio.run(main())
