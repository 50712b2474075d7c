"""zmq:// with a group secret (AEAD batches, no handshake): a node without the secret or
with another one, and a raw DEALER replaying a member's captured batch under a routing
id of its own, are each refused with one log line and never admitted (so never displace
the member's link); the member's frames all arrive, in order."""

from __future__ import annotations

import logging

import pytest
import zmq
import zmq.asyncio
from transport_harness import TEST_SECRET, Inbox, Nodes, numbered, run

from abcast.security import Sealer
from abcast.security.secret import session_key
from abcast.transport import TransportOptions
from abcast.transport._framing import encode_frames
from abcast.transport._hello import Hello, encode_hello

pytestmark = pytest.mark.timeout(60)

LOGGER = "abcast.transport.zmq_transport"
SECRET = TransportOptions(secret=TEST_SECRET)


def _refusals(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records
            if r.name == LOGGER and r.levelno == logging.WARNING
            and r.getMessage().startswith("zmq b:")]


@pytest.mark.parametrize("stranger", ["no-secret", "wrong-secret", "replay"])
def test_a_stranger_is_refused_once_and_the_member_goes_on(
    stranger: str, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, LOGGER)

    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            a = await nodes.start("zmq", "a", Inbox(), SECRET)
            b = await nodes.start("zmq", "b", inbox, SECRET)
            a.add_peer("b", b.address)
            for seq in range(30):
                a.send("b", numbered(seq))
            await inbox.wait_until(lambda: len(inbox.got("a")) >= 30, "a's first frames")
            if stranger == "replay":
                # a batch sealed for a's connection, sent under another routing id
                genuine_id = encode_hello(Hello("a", a.incarnation, 1))  # type: ignore[attr-defined]
                sealed = Sealer(session_key(TEST_SECRET, session=genuine_id, label=b"zmq"),
                                "aead").seal(encode_frames([numbered(10_000)]))
                ctx = zmq.asyncio.Context()
                dealer = ctx.socket(zmq.DEALER)
                dealer.setsockopt(zmq.ROUTING_ID, encode_hello(Hello("a", 7, 1)))
                dealer.setsockopt(zmq.LINGER, 0)
                dealer.connect(b.address.replace("zmq://", "tcp://"))
                await dealer.send(sealed)
                await inbox.wait_until(lambda: b.stats.dropped_connections >= 1, "refusal")
                dealer.close()
                ctx.term()
            else:
                secret = None if stranger == "no-secret" else b"another-secret"
                x = await nodes.start("zmq", "a", Inbox(), TransportOptions(secret=secret))
                x.add_peer("b", b.address)
                x.send("b", numbered(10_000))
                await inbox.wait_until(lambda: b.stats.dropped_connections >= 1, "refusal")
            for seq in range(30, 60):
                a.send("b", numbered(seq))
            await inbox.wait_until(lambda: len(inbox.got("a")) >= 60, "a's later frames")
            assert inbox.got("a") == list(range(60))  # never displaced, nothing injected
            refused = _refusals(caplog)
            assert len(refused) == 1 and "not a holder of the group secret" in refused[0]

    run(main)
