"""Members that disagree on the frame bound: the hello says the sender's max_frame_bytes,
and a receiver whose own differs refuses the connection before any frame is delivered —
one WARNING line naming both nodes and both values (DEBUG for the reconnects refused
after it), counted in `refused_links`, not in `bad_frames` — while the sender backs off
as after any failed connection (its Backoff never resets, one INFO line per run of
failures). Equal bounds connect; a hello without the field (an older node, a hand-made
hello) decodes and is admitted unchecked. With a secret the tcp handshake binds the
bound, so a hello whose bound was changed on the way fails it.

Planted variants: a check that compares the wrong field, one that refuses a hello
without the field, one that refuses only larger bounds and one that takes its own bound
from the hello each break the rule the real check keeps (two of them also end to end);
a handshake that does not bind the bound lets a changed one pass.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Final, cast

import msgspec
import pytest
from transport_harness import Inbox, Nodes, numbered, run

from abcast.errors import RemoteProtocolError
from abcast.security import Initiator, Responder
from abcast.transport import TransportOptions
from abcast.transport import _common as common
from abcast.transport._common import Backoff, QueuedTransport
from abcast.transport._hello import (
    HELLO_MAGIC,
    Hello,
    decode_hello,
    encode_hello,
    hello_refusal,
)

pytestmark = pytest.mark.timeout(60)

MiB: Final = 1024 * 1024
SMALL: Final = 1 * MiB  # the sender's bound; the receiver keeps the default
DEFAULT: Final = TransportOptions().max_frame_bytes
INITIAL_S: Final = 0.05
#: above any refused connection's life, so a refusal never counts as a connection
#: that lasted (which would reset the backoff)
MAX_S: Final = 1.0
REFUSALS: Final = 4

# ------------------------------------------------------------------ the hello on the wire


class _OldHello(msgspec.Struct, array_like=True):
    """The hello as a node from before the field encodes and decodes it."""

    node: str
    incarnation: int
    conn_seq: int


def test_a_hello_without_the_field_decodes_as_not_said() -> None:
    old = HELLO_MAGIC + msgspec.msgpack.encode(_OldHello("a", 7, 3))
    hello = decode_hello(old)
    assert hello == Hello("a", 7, 3) and hello.max_frame_bytes == 0
    assert hello_refusal("b", DEFAULT, hello) is None  # admitted unchecked
    new = encode_hello(Hello("a", 7, 3, SMALL))
    assert decode_hello(new).max_frame_bytes == SMALL
    # and an older node reads the new hello (the trailing field ignored)
    assert msgspec.msgpack.decode(new[len(HELLO_MAGIC):], type=_OldHello) == _OldHello("a", 7, 3)


# ------------------------------------------------------------------ the rule, and planted variants

Check = Callable[[str, int, Hello], "str | None"]


def _violations(check: Check) -> list[str]:
    """Where `check` breaks the rule: refuse exactly a stated bound that differs from
    ours, saying who has what and what to do."""
    found = []
    for own in (1, 16_384, SMALL, DEFAULT, 2**31):
        for theirs in (0, 1, 16_384, SMALL, DEFAULT, 2**31):
            for conn_seq in (1, theirs or 1, own):
                hello = Hello("a", 5, conn_seq, theirs)
                reason = check("b", own, hello)
                should = theirs not in (0, own)
                if should != (reason is not None):
                    found.append(f"own {own}, theirs {theirs}, conn_seq {conn_seq}: {reason}")
                elif reason is not None and not all(
                        part in reason for part in (f"a has max_frame_bytes {theirs}",
                                                    f"b has {own}", "members must share "
                                                    "max_frame_bytes / frame_bytes")):
                    found.append(f"own {own}, theirs {theirs}: unclear reason {reason!r}")
    return found


def _wrong_field(me: str, own: int, hello: Hello) -> str | None:
    return hello_refusal(me, own, Hello(hello.node, 0, 0, hello.conn_seq))


def _refuses_absent(me: str, own: int, hello: Hello) -> str | None:
    if hello.max_frame_bytes == 0:
        return f"{hello.node} has max_frame_bytes 0, {me} has {own}: members must share"
    return hello_refusal(me, own, hello)


def _only_larger(me: str, own: int, hello: Hello) -> str | None:
    return hello_refusal(me, own, hello) if hello.max_frame_bytes > own else None


def test_the_check_refuses_exactly_another_stated_bound() -> None:
    assert _violations(hello_refusal) == []


@pytest.mark.parametrize("planted", [_wrong_field, _refuses_absent, _only_larger])
def test_planted_checks_break_the_rule(planted: Check) -> None:
    assert _violations(planted), f"{planted.__name__} passed for the real check"


# ------------------------------------------------------------------ the handshake binds it


def _handshake(initiator_bound: int, responder_bound: int) -> None:
    """A tcp link handshake where the initiator's hello said `initiator_bound` and the
    responder read `responder_bound` from it; RemoteProtocolError if it fails."""
    secret = b"frame-bound-secret"
    i = Initiator(secret, me="a", peer="b", mode="mac", nonce=os.urandom(32),
                  frame_bytes=initiator_bound)
    r = Responder(secret, me="b", peer="a", mode="mac", nonce=os.urandom(32),
                  frame_bytes=responder_bound)
    response = r.receive(i.challenge())
    assert response is not None
    assert r.receive(i.receive(response)) is None


def test_the_handshake_fails_when_the_bound_changed_on_the_way() -> None:
    _handshake(SMALL, SMALL)
    _handshake(0, 0)  # a node from before the field
    for said, read in ((SMALL, DEFAULT), (SMALL, 0), (0, SMALL)):  # changed, stripped, added
        with pytest.raises(RemoteProtocolError, match="does not hold"):
            _handshake(said, read)


def test_a_planted_handshake_that_does_not_bind_the_bound_lets_a_change_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from abcast.security import handshake

    def unbound(self: handshake._Side, nonce_i: bytes, nonce_r: bytes) -> tuple[bytes, ...]:
        return (*self._ids, self.mode.encode(), nonce_i, nonce_r)

    monkeypatch.setattr(handshake._Side, "_transcript", unbound)
    _handshake(SMALL, DEFAULT)  # passes: the check above is what catches it


# ------------------------------------------------------------------ the sender's log


def test_a_lost_connection_is_logged_at_info_once_per_run_of_failures(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture,
) -> None:
    from abcast.transport.base import parse_url
    from abcast.transport.memory import MemoryTransport

    caplog.set_level(logging.DEBUG, logger="abcast.transport")
    clock = [100.0]
    monkeypatch.setattr(common.time, "monotonic", lambda: clock[0])
    transport = MemoryTransport("mem://")
    peer = common.PeerState("b", parse_url("mem://b"), Backoff(0.1, 1.0))

    def infos() -> int:
        return len(_lines(caplog, logging.INFO, "connection to b"))

    peer.backoff.next()  # a failed connect first (the transports log that at DEBUG)
    for _ in range(3):  # then refused connections
        peer.backoff.connected()
        clock[0] += 0.01
        transport.lost(peer, "refused")
    assert infos() == 1 and peer.backoff.failures == 4
    peer.backoff.connected()
    clock[0] += 1.0  # a connection that lasted: the next loss starts a new run
    transport.lost(peer, "peer restarted")
    assert infos() == 2 and peer.backoff.failures == 1


# ------------------------------------------------------------------ end to end


class _RecordingBackoff(Backoff):
    """The Backoff, noting each delay it hands out."""

    def __init__(self, initial: float, maximum: float) -> None:
        super().__init__(initial, maximum)
        self.delays: list[float] = []

    def next(self) -> float:
        delay = super().next()
        self.delays.append(delay)
        return delay


def _attempts_within(seconds: float) -> int:
    """The most connection attempts the backoff's schedule allows in `seconds`: the
    first at once, the k-th retry after at least 0.75 × min(MAX_S, INITIAL_S × 2^k)."""
    attempts, waited = 1, 0.0
    while True:
        waited += 0.75 * min(MAX_S, INITIAL_S * 2 ** (attempts - 1))
        if waited > seconds:
            return attempts
        attempts += 1


def _options(bound: int) -> TransportOptions:
    return TransportOptions(max_frame_bytes=bound, reconnect_initial_s=INITIAL_S,
                            reconnect_max_s=MAX_S)


def _lines(caplog: pytest.LogCaptureFixture, level: int, text: str) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level and text in r.getMessage()]


HELLO_SCHEMES: Final = ("tcp", "tcp-secret", "tcps", "mem", "zmq", "zmq-secret", "grpc", "pyro")


@pytest.mark.parametrize("scheme", HELLO_SCHEMES)
def test_members_with_different_bounds_are_refused_once_and_back_off(
    scheme: str, caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG, logger="abcast.transport")

    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            a = cast(QueuedTransport, await nodes.start(scheme, "a", Inbox(), _options(SMALL)))
            b = await nodes.start(scheme, "b", inbox, _options(DEFAULT))
            loop = asyncio.get_running_loop()
            began = loop.time()
            a.add_peer("b", b.address)
            peer = a._peers["b"]
            backoff = peer.backoff = _RecordingBackoff(INITIAL_S, MAX_S)  # before any attempt

            def refused_enough() -> bool:
                if not a.buffered("b"):  # zmq:// shows a connection only when it sends
                    a.send("b", numbered(a.stats.frames_out))
                return b.stats.refused_links >= REFUSALS and backoff.failures >= REFUSALS

            await inbox.wait_until(refused_enough, "the refusals")
            refused = b.stats.refused_links
            assert refused <= _attempts_within(loop.time() - began), "a tight loop"
            assert inbox.seqs == {}, "a frame crossed a refused link"
            assert b.stats.frames_in == 0 and b.stats.bad_frames == 0
            assert b.stats.dropped_connections == refused
            warned = _lines(caplog, logging.WARNING, "refused the connection from a")
            assert len(warned) == 1, warned
            for part in (f"a has max_frame_bytes {SMALL}", f"b has {DEFAULT}",
                         "members must share max_frame_bytes / frame_bytes"):
                assert part in warned[0]
            quiet = _lines(caplog, logging.DEBUG, "refused the connection from a")
            assert len(quiet) == refused - 1
            # the sender: one INFO line for the run of failures, and a backoff that only
            # grew (never reset by a refused connection): its k-th delay is at least
            # 0.75 × min(MAX_S, INITIAL_S × 2^k), so over any time T at most the attempts
            # those delays fit in T are made
            assert len(_lines(caplog, logging.INFO, "connection to b")) <= 1
            assert backoff.failures == len(backoff.delays) >= REFUSALS
            for k, delay in enumerate(backoff.delays):
                assert delay >= 0.75 * min(MAX_S, INITIAL_S * 2**k), backoff.delays

    run(main)


@pytest.mark.parametrize("scheme", ["tcp", "tcp-secret"])
def test_equal_bounds_connect(scheme: str) -> None:
    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            a = await nodes.start(scheme, "a", Inbox(), _options(SMALL))
            b = await nodes.start(scheme, "b", inbox, _options(SMALL))
            a.add_peer("b", b.address)
            for seq in range(10):
                a.send("b", numbered(seq, SMALL // 2))
            await inbox.wait_until(lambda: len(inbox.got("a")) == 10, "the frames")
            assert inbox.got("a") == list(range(10)) and inbox.corrupt == 0
            assert b.stats.refused_links == 0 and b.stats.dropped_connections == 0

    run(main)


def _own_from_the_hello(me: str, own: int, hello: Hello) -> str | None:
    return hello_refusal(me, hello.max_frame_bytes, hello)


@pytest.mark.parametrize(("planted", "bounds"), [(_wrong_field, (SMALL, SMALL)),
                                                 (_own_from_the_hello, (SMALL, DEFAULT))])
def test_planted_admissions_are_caught_end_to_end(
    planted: Check, bounds: tuple[int, int], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Planted into the transport, a check that compares the hello's conn_seq refuses
    members with equal bounds (which `test_equal_bounds_connect` forbids), and one that
    takes "our" bound from the hello admits different ones and lets a frame through
    (which the refusal test forbids)."""
    monkeypatch.setattr(common, "hello_refusal", planted)
    assert _violations(planted)

    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            a = await nodes.start("tcp", "a", Inbox(), _options(bounds[0]))
            b = await nodes.start("tcp", "b", inbox, _options(bounds[1]))
            a.add_peer("b", b.address)
            a.send("b", numbered(0))
            if bounds[0] == bounds[1]:
                await inbox.wait_until(lambda: b.stats.refused_links >= 1, "a wrong refusal")
                assert inbox.got("a") == []
            else:
                await inbox.wait_until(lambda: inbox.got("a") == [0], "a frame let through")
                assert b.stats.refused_links == 0

    run(main)
