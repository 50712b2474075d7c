"""tcp:// before a connection is admitted: a stranger who knows only the address (no
secret, no certificate) cannot make the node hold more than a hello's bound
(HELLO_MAX_BYTES) for its connection. A length prefix above it, before the hello (and,
with a secret, the link handshake) is accepted, is one log line, `bad_frames` and a
dropped connection; a member's hello followed, in the same read, by a frame up to
max_frame_bytes is read whole all the same.

The proof is deterministic: the stranger trickles a claimed multi-MiB first frame a
chunk at a time and, after each chunk, waits until the receiver has either read it
(its FrameReader holds it: recorded by a FrameReader that notes what it holds after
each read) or dropped the connection.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import re
import ssl
import struct

import msgspec
import pytest
from transport_harness import TEST_SECRET, WAIT_S, Inbox, Nodes, numbered, run

from abcast.testing.pki import shared_pki
from abcast.transport import TransportOptions, _tcp_inbound, tcp
from abcast.transport._framing import FrameReader, encode_frames
from abcast.transport._hello import HELLO_MAX_BYTES, Hello, encode_hello

pytestmark = pytest.mark.timeout(60)

CLAIMED = 8 * 1024 * 1024  # the first frame's length prefix: 8 MiB, under the default 16
FIRST = 64
CHUNK = 4096
TRICKLED = 64 * 1024  # per connection, if the receiver keeps reading
STRANGERS = 8


class HoldingReader(FrameReader):
    """A FrameReader that notes the most it held between reads, over all readers."""

    __slots__ = ()
    held: dict[int, int] = {}  # id(reader) -> the most it held; one test at a time

    def feed(self, data: bytes) -> tuple[list[bytes], str | None]:
        result = super().feed(data)
        self.held[id(self)] = max(self.held.get(id(self), 0), self.pending)
        return result


def _options(mode: str) -> TransportOptions:
    # a long io_timeout_s: nothing here may be decided by a timer
    options = TransportOptions(io_timeout_s=60.0)
    if mode == "tcp-secret":
        return dataclasses.replace(options, secret=TEST_SECRET)
    if mode == "tcps":  # TLS without a client CA: a stranger gets through TLS
        pki = shared_pki()
        return dataclasses.replace(options, tls_cert=pki.cert, tls_key=pki.key)
    return options


def _stranger_tls(mode: str) -> ssl.SSLContext | None:
    if mode != "tcps":
        return None
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


async def _trickle(receiver: tcp.TcpTransport, port: int, mode: str, dropped_before: int,
                   connections: int) -> int:
    """Open `connections` stranger connections, each announcing a CLAIMED first frame,
    and trickle its body a CHUNK at a time to each while the receiver keeps them; the
    total bytes sent."""
    streams = [await asyncio.open_connection("127.0.0.1", port, ssl=_stranger_tls(mode))
               for _ in range(connections)]
    sent = [0] * connections
    try:
        for index, (_, writer) in enumerate(streams):
            # a first write that fits the hello bound: what the receiver holds after it
            # refused the prefix is this read's rest (freed with the connection, in the
            # same call), not what the stranger sends
            writer.write(struct.pack(">I", CLAIMED) + bytes(FIRST - 4))
            sent[index] = FIRST
        while True:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + WAIT_S
            # until the receiver holds what was sent, or dropped every connection
            while (sum(HoldingReader.held.values()) < sum(sent)
                   and receiver.stats.dropped_connections < dropped_before + connections):
                assert loop.time() < deadline, (HoldingReader.held, sent)
                await asyncio.sleep(0.005)
            if (receiver.stats.dropped_connections >= dropped_before + connections
                    or min(sent) >= TRICKLED):
                return sum(sent)
            for index, (_, writer) in enumerate(streams):
                writer.write(bytes(CHUNK))
                sent[index] += CHUNK
    finally:
        for _, writer in streams:
            writer.close()
            with contextlib.suppress(OSError, ssl.SSLError):
                await writer.wait_closed()


@pytest.mark.parametrize("mode", ["tcp", "tcp-secret", "tcps"])
def test_a_stranger_makes_the_node_hold_no_more_than_a_hello(
    mode: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="abcast.transport")
    monkeypatch.setattr(_tcp_inbound, "FrameReader", HoldingReader)
    HoldingReader.held = {}

    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            options = _options(mode)
            scheme = "tcps" if mode == "tcps" else "tcp"
            receiver = await nodes.start("as-given", "r", inbox, options,
                                         url=f"{scheme}://127.0.0.1:0")
            assert isinstance(receiver, tcp.TcpTransport)
            port = int(receiver.address.rsplit(":", 1)[1])
            sent = await _trickle(receiver, port, mode, 0, STRANGERS)
            assert max(HoldingReader.held.values()) <= HELLO_MAX_BYTES, (
                f"{STRANGERS} strangers sent {sent} bytes; the receiver held "
                f"{sum(HoldingReader.held.values())}")
            assert receiver.stats.dropped_connections == STRANGERS
            assert receiver.stats.bad_frames == STRANGERS

            # a member still gets in, and its frames (larger than a hello) arrive
            if mode == "tcps":  # the member verifies the listener
                options = dataclasses.replace(options, tls_ca=shared_pki().ca)
            member = await nodes.start("as-given", "m", Inbox(), options,
                                       url=f"{scheme}://127.0.0.1:0")
            member.add_peer("r", receiver.address)
            for seq in range(5):
                member.send("r", numbered(seq, size=64 * 1024))
            await inbox.wait_until(lambda: len(inbox.got(member.node)) == 5, "the member")
            assert inbox.got(member.node) == list(range(5))

    run(main)
    drops = [r.getMessage() for r in caplog.records if "dropped connection" in r.getMessage()]
    assert len(drops) == STRANGERS, drops
    assert all(f"{CLAIMED} exceeds the hello bound" in line for line in drops), drops


@pytest.mark.parametrize("after", [1, 60_000])
def test_a_hello_and_a_large_frame_in_one_read_both_count(after: int) -> None:
    """The hello is read under the hello bound, the frame behind it (in the same write,
    as a dialler's first flush may be) under max_frame_bytes."""

    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            receiver = await nodes.start("tcp", "r", inbox)
            port = int(receiver.address.rsplit(":", 1)[1])
            _, writer = await asyncio.open_connection("127.0.0.1", port)
            hello = encode_hello(Hello("raw", 1, 1, receiver.options.max_frame_bytes))
            frames = [numbered(seq, size=max(16, after * (seq + 1))) for seq in range(3)]
            writer.write(encode_frames([hello, *frames]))
            await inbox.wait_until(lambda: len(inbox.got("raw")) == 3, "the frames")
            assert inbox.got("raw") == [0, 1, 2]
            assert receiver.stats.bad_frames == 0
            writer.close()

    run(main)


def test_the_hello_bound_holds_every_valid_hello_and_the_handshake() -> None:
    from abcast.security import Initiator, Responder
    from abcast.security.handshake import NONCE_BYTES

    widest = encode_hello(Hello("\U0001f600" * 64, 2**62, 2**62, 2**31))
    assert len(widest) <= HELLO_MAX_BYTES < 512
    hello = Hello("n" * 64, 2**62, 2**62, 2**31)
    initiator = Initiator(TEST_SECRET, me=hello.node, peer="r", mode="aead",
                          nonce=b"i" * NONCE_BYTES, frame_bytes=2**31)
    responder = Responder(TEST_SECRET, me="r", peer=hello.node, mode="aead",
                          nonce=b"r" * NONCE_BYTES, frame_bytes=2**31)
    challenge = initiator.challenge()
    response = responder.receive(challenge)
    assert response is not None
    confirm = initiator.receive(response)
    # what an inbound connection reads before it is admitted
    assert max(len(challenge), len(confirm)) <= HELLO_MAX_BYTES


@pytest.mark.parametrize(("fields", "bound"), [
    ([1, b"n" * 32, "m" * 17], "`str` of length <= 16"),  # the mode: main took any
    ([1, b"n" * 32, "m" * 200], "`str` of length <= 16"),
    ([1, b"n" * 33, "aead"], "`bytes` of length <= 32"),  # the nonce
    ([2, b"n" * 32, b"m" * 31], "`bytes` of length >= 32"),  # the MAC
    ([2, b"n" * 1000, b"m" * 32], "`bytes` of length <= 32"),
    ([3, b"m" * 64], "`bytes` of length <= 32"),
])
def test_the_handshake_decoder_refuses_a_field_beyond_its_bound(fields: list[object],
                                                                 bound: str) -> None:
    """Challenge.mode was an unbounded str, and the nonces and MACs unbounded bytes: the
    decoder took them (a stranger's mode then went into a log line whole); each field
    has a bound now, so the widest message is known (next test)."""
    from abcast.errors import DecodeError
    from abcast.security import handshake

    with pytest.raises(DecodeError, match=re.escape(bound)):
        handshake.decode(handshake.MAGIC + msgspec.msgpack.encode(fields))


class Unbounded(msgspec.Struct, array_like=True):
    mode: str


def test_the_widest_handshake_message_fits_before_admission() -> None:
    """What an inbound connection may send before it is admitted is derived from the
    Hello's and the handshake messages' field bounds, as HELLO_MAX_BYTES is from the
    Hello's: the widest message the handshake decoder takes fits it."""
    from abcast.security import handshake
    from abcast.transport._hello import max_msgpack_bytes
    from abcast.transport._tcp_inbound import AUTH_MAX_BYTES, BEFORE_ADMISSION_BYTES

    widest = handshake.encode(
        handshake.Challenge(b"n" * handshake.NONCE_BYTES, "\U0001f600" * handshake.MODE_MAX_CHARS))
    assert handshake.decode(widest) is not None
    assert len(widest) <= AUTH_MAX_BYTES
    assert max(HELLO_MAX_BYTES, AUTH_MAX_BYTES) <= BEFORE_ADMISSION_BYTES
    # a field without a bound has no widest encoding: the derivation refuses it
    with pytest.raises(TypeError, match="no byte bound"):
        max_msgpack_bytes(Unbounded)


def test_a_confirm_and_a_large_sealed_record_in_one_read_both_count() -> None:
    """With a secret, the connection is admitted at the Confirm: a sealed record
    (larger than a hello) in the same write is read under the raised limit."""
    from abcast.security import Initiator
    from abcast.security.handshake import NONCE_BYTES

    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            options = _options("tcp-secret")
            receiver = await nodes.start("as-given", "r", inbox, options,
                                         url="tcp://127.0.0.1:0")
            port = int(receiver.address.rsplit(":", 1)[1])
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            hello = Hello("raw", 1, 1, options.max_frame_bytes)
            auth = Initiator(TEST_SECRET, me="raw", peer="r", mode=options.link_mode,
                             nonce=b"n" * NONCE_BYTES, frame_bytes=options.max_frame_bytes)
            writer.write(encode_frames([encode_hello(hello), auth.challenge()]))
            responses = FrameReader(512)
            got: list[bytes] = []
            while not got:
                data = await asyncio.wait_for(reader.read(512), WAIT_S)
                assert data, "the listener hung up"
                got, error = responses.feed(data)
                assert error is None
            confirm = auth.receive(got[0])
            frames = [numbered(seq, size=40_000) for seq in range(3)]
            record = auth.sealer().seal(encode_frames(frames))
            assert len(record) > HELLO_MAX_BYTES
            writer.write(encode_frames([confirm, record]))
            await inbox.wait_until(lambda: len(inbox.got("raw")) == 3, "the sealed frames")
            assert inbox.got("raw") == [0, 1, 2]
            assert receiver.stats.bad_frames == 0
            writer.close()

    run(main)
