"""The link handshake: mutual challenge–response over fresh nonces, proving that both
ends hold the group's secret, then a per-link key for every frame after it.

The initiator is the side that opened the connection (it will send the frames); the
responder is the side that accepted it. The connection's hello (abcast.transport) names
the initiator; both sides know the responder's id (the initiator dialled it).

    initiator                                 responder
    Challenge(nonce_i, mode)          ->
                                      <-      Response(nonce_r, mac_r)
    Confirm(mac_i)                    ->
    sealed frames (abcast.security.sealing) ->

    transcript = (initiator id, responder id, mode, nonce_i, nonce_r[, frame bound])
    mac_r = proof(secret, "responder", transcript)   mac_i = proof(secret, "initiator", …)
    link key = HKDF-SHA256(secret, salt = nonce_i | nonce_r,
                           info = "abcast link" | initiator | responder | mode)

Each side proves itself over the other's fresh nonce, so neither proof can be replayed
from an earlier handshake; the responder answers first, but its answer teaches a
stranger nothing it could use (a MAC over nonces the responder chose), and an
initiator never proves itself to a responder whose proof failed: it sends a `Refusal`
(no MAC) instead, so the responder can log the refusal rather than see a bare hang-up.
MACs are compared with `hmac.compare_digest`. Any failure raises RemoteProtocolError and
leaves the handshake FAILED: the transport logs one line with the remote address and
closes.

The frame bound is the initiator's `max_frame_bytes` as its hello states it (the
initiator passes its own, the responder the hello's; left out when the hello states
none, as a node from before the field does), so a hello whose bound was changed on the
way fails the handshake, and the bound a receiver compares with its own
(abcast.transport._hello) is authenticated. An initiator that states it cannot complete
a handshake with a responder from before the field (their transcripts differ).

Phases (one table each; any other message, or a message in another phase, fails):
"""

from __future__ import annotations

from typing import Annotated, Final, Literal

import msgspec

from abcast.codec import NOT_A_MESSAGE
from abcast.errors import DecodeError, LocalProtocolError, RemoteProtocolError
from abcast.ids import NodeId
from abcast.security.sealing import MODES, Mode, Opener, Sealer
from abcast.security.secret import hkdf, proof, same

Phase = Literal["start", "challenged", "responded", "established", "failed"]

#: (role, phase, what happens) -> next phase
TRANSITIONS: Final[dict[tuple[str, Phase, str], Phase]] = {
    ("initiator", "start", "send Challenge"): "challenged",
    ("initiator", "challenged", "recv Response, mac_r ok"): "established",
    ("responder", "start", "recv Challenge"): "responded",
    ("responder", "responded", "recv Confirm, mac_i ok"): "established",
}
# any failure in any phase -> "failed" (terminal, like "established")

MAGIC: Final = b"ABCAST-AUTH/1:"
NONCE_BYTES: Final = 32
#: the longest mode name a Challenge may carry (the known ones, MODES, are shorter): every
#: field of a handshake message is bounded, so the widest one is known (abcast.transport
#: derives from it what a connection may send before it is admitted)
MODE_MAX_CHARS: Final = 16
_Nonce = Annotated[bytes, msgspec.Meta(min_length=NONCE_BYTES, max_length=NONCE_BYTES)]
_Mac = Annotated[bytes, msgspec.Meta(min_length=32, max_length=32)]
_ModeName = Annotated[str, msgspec.Meta(max_length=MODE_MAX_CHARS)]


class Challenge(msgspec.Struct, frozen=True, array_like=True, tag=1, gc=False):
    nonce: _Nonce
    mode: _ModeName


class Response(msgspec.Struct, frozen=True, array_like=True, tag=2, gc=False):
    nonce: _Nonce
    mac: _Mac


class Confirm(msgspec.Struct, frozen=True, array_like=True, tag=3, gc=False):
    mac: _Mac


class Refusal(msgspec.Struct, frozen=True, array_like=True, tag=4, gc=False):
    """The initiator could not verify the responder's proof: it hangs up."""


AuthMessage = Challenge | Response | Confirm | Refusal
_decoder: Final = msgspec.msgpack.Decoder(AuthMessage)
_encoder: Final = msgspec.msgpack.Encoder()


def encode(message: AuthMessage) -> bytes:
    return MAGIC + _encoder.encode(message)


def decode(data: bytes) -> AuthMessage:
    """DecodeError for anything that is not a handshake message."""
    if not data.startswith(MAGIC):
        raise DecodeError(f"expected a link handshake message, got {bytes(data[:16])!r}...")
    try:
        message: AuthMessage = _decoder.decode(data[len(MAGIC) :])
        return message
    except NOT_A_MESSAGE as exc:
        raise DecodeError(f"bad link handshake message: {exc}") from None


def _check_nonce(nonce: bytes, who: str) -> None:
    if len(nonce) != NONCE_BYTES:
        raise LocalProtocolError(f"{who} nonce must be {NONCE_BYTES} bytes, got {len(nonce)}")


class _Side:
    role: str

    def __init__(self, secret: bytes, initiator: NodeId, responder: NodeId, mode: Mode,
                 nonce: bytes, frame_bytes: int) -> None:
        if mode not in MODES:
            raise LocalProtocolError(f"unknown link protection mode {mode!r}; known: {MODES}")
        _check_nonce(nonce, self.role)
        self._nonce = nonce  # this side's fresh nonce
        #: what to send before hanging up after a failure (an initiator's Refusal)
        self.parting: bytes | None = None
        self._secret = secret
        self._ids = (initiator.encode(), responder.encode())
        self.mode: Mode = mode
        #: the initiator's frame bound as its hello states it, in the transcript (0: none)
        self._bound = (frame_bytes.to_bytes(4, "big"),) if frame_bytes else ()
        self.phase: Phase = "start"
        self._key: bytes | None = None

    def _go(self, event: str) -> None:
        """Local steps only (a remote message's phase is checked before it gets here)."""
        after = TRANSITIONS.get((self.role, self.phase, event))
        if after is None:
            raise LocalProtocolError(f"the {self.role} cannot {event} in phase {self.phase}")
        self.phase = after

    def _fail(self, why: str) -> RemoteProtocolError:
        self.phase = "failed"
        return RemoteProtocolError(f"link handshake failed: {why}")

    def _transcript(self, nonce_i: bytes, nonce_r: bytes) -> tuple[bytes, ...]:
        return (*self._ids, self.mode.encode(), nonce_i, nonce_r, *self._bound)

    def _derive(self, nonce_i: bytes, nonce_r: bytes) -> None:
        info = b"abcast link\x00" + b"\x00".join((*self._ids, self.mode.encode()))
        self._key = hkdf(self._secret, salt=nonce_i + nonce_r, info=info)

    def _expect(self, data: bytes, kind: type[AuthMessage]) -> AuthMessage:
        try:
            message = decode(data)
        except DecodeError as exc:
            raise self._fail(str(exc)) from None
        if not isinstance(message, kind):
            raise self._fail(f"expected {kind.__name__}, got {type(message).__name__}")
        return message

    @property
    def key(self) -> bytes:
        if self.phase != "established" or self._key is None:
            raise LocalProtocolError(f"no link key in phase {self.phase}")
        return self._key


class Initiator(_Side):
    """The connecting side. `challenge()`, then `receive(response)` -> the Confirm to
    send; then `sealer()` protects the frames it sends."""

    role = "initiator"

    def __init__(self, secret: bytes, *, me: NodeId, peer: NodeId, mode: Mode,
                 nonce: bytes, frame_bytes: int = 0) -> None:
        super().__init__(secret, me, peer, mode, nonce, frame_bytes)

    def challenge(self) -> bytes:
        self._go("send Challenge")
        return encode(Challenge(self._nonce, self.mode))

    def receive(self, data: bytes) -> bytes:
        if self.phase != "challenged":
            raise self._fail(f"unexpected handshake message in phase {self.phase}")
        message = self._expect(data, Response)
        assert isinstance(message, Response)
        if len(message.nonce) != NONCE_BYTES or message.nonce == self._nonce:
            raise self._fail("the responder's nonce is malformed or ours echoed back")
        transcript = self._transcript(self._nonce, message.nonce)
        if not same(proof(self._secret, b"responder", *transcript), message.mac):
            self.parting = encode(Refusal())
            raise self._fail("the responder does not hold the group secret")
        self._go("recv Response, mac_r ok")
        self._derive(self._nonce, message.nonce)
        return encode(Confirm(proof(self._secret, b"initiator", *transcript)))

    def sealer(self) -> Sealer:
        return Sealer(self.key, self.mode)


class Responder(_Side):
    """The accepting side, once the hello named the initiator: `receive(challenge)` ->
    the Response to send, `receive(confirm)` -> None (established); then `opener()`."""

    role = "responder"

    def __init__(self, secret: bytes, *, me: NodeId, peer: NodeId, mode: Mode,
                 nonce: bytes, frame_bytes: int = 0) -> None:
        super().__init__(secret, peer, me, mode, nonce, frame_bytes)
        self._nonce_i = b""

    def receive(self, data: bytes) -> bytes | None:
        if self.phase == "start":
            message = self._expect(data, Challenge)
            assert isinstance(message, Challenge)
            if message.mode != self.mode:
                raise self._fail(f"peer protects frames by {message.mode!r}, we by {self.mode!r}")
            if len(message.nonce) != NONCE_BYTES or message.nonce == self._nonce:
                raise self._fail("the initiator's nonce is malformed")
            self._nonce_i = message.nonce
            self._go("recv Challenge")
            transcript = self._transcript(self._nonce_i, self._nonce)
            return encode(Response(self._nonce, proof(self._secret, b"responder", *transcript)))
        if self.phase == "responded":
            message = self._expect(data, Confirm | Refusal)  # type: ignore[arg-type]
            if isinstance(message, Refusal):
                raise self._fail("the peer refused our proof: it holds no or another secret")
            assert isinstance(message, Confirm)
            transcript = self._transcript(self._nonce_i, self._nonce)
            if not same(proof(self._secret, b"initiator", *transcript), message.mac):
                raise self._fail("the initiator does not hold the group secret")
            self._go("recv Confirm, mac_i ok")
            self._derive(self._nonce_i, self._nonce)
            return None
        raise self._fail(f"unexpected handshake message in phase {self.phase}")

    def opener(self) -> Opener:
        return Opener(self.key, self.mode)
