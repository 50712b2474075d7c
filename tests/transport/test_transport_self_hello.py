"""A hello naming the receiving node itself is refused, by every transport that reads a
hello: a node never opens a connection to itself, so such a connection is another node
configured with our id (or a forgery). Before, the hello was admitted and each frame on
the link reached the stack, which refused it as a frame naming this node as sender
(tests/unit/test_stack_self_sender.py) while the link stayed up and the impostor's
frames kept coming. The rule lives once, in `abcast.transport._hello` (the check every
hello goes through); here it is proved over the real transports: the connection is
refused before any frame is delivered, with one WARNING line (DEBUG for the reconnects
refused after it), counted in `refused_links` and `dropped_connections`, not in
`bad_frames`; the impostor backs off as after any refusal, and the receiver keeps
serving a genuine peer meanwhile.
"""

from __future__ import annotations

import logging
from typing import Final, cast

import pytest
from transport_harness import Inbox, Nodes, numbered, run

from abcast.transport import TransportOptions
from abcast.transport._common import QueuedTransport
from abcast.transport._hello import Hello, hello_refusal

pytestmark = pytest.mark.timeout(60)

#: every transport whose connections open with a hello (tcp://'s variants, mem://,
#: zmq://, grpc://, pyro://); udp:// has none (tests/transport/test_udp_sources.py)
HELLO_SCHEMES: Final = ("tcp", "tcp-secret", "tcps", "mem", "zmq", "zmq-secret", "grpc", "pyro")
OPTIONS: Final = TransportOptions(reconnect_initial_s=0.05, reconnect_max_s=0.5)
REFUSALS: Final = 3
DEFAULT: Final = TransportOptions().max_frame_bytes


def test_the_check_refuses_a_hello_naming_the_receiver() -> None:
    for bound in (0, DEFAULT, 1024):  # whatever the frame bound says
        for incarnation in (0, 1, 7):
            reason = hello_refusal("b", DEFAULT, Hello("b", incarnation, 1, bound))
            assert reason is not None and "two nodes have the id b" in reason
    assert hello_refusal("b", DEFAULT, Hello("a", 1, 1, DEFAULT)) is None
    assert hello_refusal("b", DEFAULT, Hello("bb", 1, 1)) is None  # not a prefix rule


def _lines(caplog: pytest.LogCaptureFixture, level: int, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level and text in r.getMessage()]


@pytest.mark.parametrize("scheme", HELLO_SCHEMES)
def test_a_hello_naming_the_receiver_is_refused(
    scheme: str, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="abcast.transport")

    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            b = cast(QueuedTransport, await nodes.start(scheme, "b", inbox, OPTIONS))
            impostor = await nodes.start(scheme, "b", Inbox(), OPTIONS)  # b's id, elsewhere
            genuine = await nodes.start(scheme, "a", Inbox(), OPTIONS)
            impostor.add_peer("b", b.address)
            genuine.add_peer("b", b.address)
            sent = [0]

            def settled() -> bool:
                # zmq:// shows a connection only when it sends: keep something queued
                if not impostor.buffered("b"):
                    impostor.send("b", numbered(sent[0]))
                    sent[0] += 1
                # a delivered impostor frame ends the wait at once (the old code's way)
                return bool(inbox.got("b")) or (b.stats.refused_links >= REFUSALS
                                                and inbox.got("a") == [0])

            genuine.send("b", numbered(0))
            await inbox.wait_until(settled, "the refusals")
            assert inbox.got("b") == [], "a frame crossed a link whose hello named b"
            refused = b.stats.refused_links
            assert b.stats.frames_in == 1 and b.stats.bad_frames == 0  # a's frame only
            assert b.stats.dropped_connections == refused
            warned = _lines(caplog, logging.WARNING, "refused the connection from b")
            assert len(warned) == 1 and "two nodes have the id b" in warned[0], warned
            quiet = _lines(caplog, logging.DEBUG, "refused the connection from b")
            assert len(quiet) == refused - 1
            assert all(link.peer != "b" for link in b.sessions.links())

    run(main)
