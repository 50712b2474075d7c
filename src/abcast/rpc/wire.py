"""The wire of requests and replies: what a client and the servers say to each other.

Rules: frames between a client and a server are ordinary abcast frames
(abcast.codec.encode_frame) addressed to the group's *request endpoint*, named
`endpoint_name(group)` = "rpc:" + group, with no layer headers and one of the tagged
Structs below, msgpack-encoded, as the payload. A request enters the group's total order
as a broadcast whose payload is `REQUEST_MAGIC` + the encoded `Request`: 0xc1 is a byte
msgpack never produces, so no batch or replicated operation starts with it, and a
server tells requests from the group's other broadcasts by their first four bytes.
Anything that does not decode is the peer's fault (`DecodeError`).
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

from abcast.codec import NOT_A_MESSAGE, NodeField, Packet, decode_envelope, encode_frame
from abcast.errors import ConfigError, DecodeError

REQUEST_MAGIC: Final = b"\xc1rpc"
ENDPOINT_PREFIX: Final = "rpc:"
#: a request id: a client's own counter, from a random start (abcast.rpc.client.first_rid)
Rid = Annotated[int, msgspec.Meta(ge=1, le=2**62)]


class _Frame(msgspec.Struct, frozen=True, array_like=True, tag=True, gc=False):
    pass


class Request(_Frame, frozen=True):
    """Client → server, and (prefixed) a broadcast in the group's order.

    `to`: the servers that execute it (empty: every member); `oneway`: nobody replies;
    `path`: "direct" (Case A: sent to every server, the view's leader proposes it) or
    "via-member" (Case B: sent to one contact, which proposes it)."""

    client: NodeField
    rid: Rid
    payload: bytes
    reply_to: str
    to: tuple[NodeField, ...] = ()
    oneway: bool = False
    path: str = "via-member"


class ReplyFrame(_Frame, frozen=True):
    """Server → client: the reply to request `rid`, with the server's current view."""

    rid: Rid
    server: NodeField
    ok: bool
    value: bytes
    view_id: int
    members: tuple[NodeField, ...]


class ViewNotice(_Frame, frozen=True):
    """Server → client: the group installed a view (so a waiting vote can re-count)."""

    view_id: int
    members: tuple[NodeField, ...]


RpcFrame = Request | ReplyFrame | ViewNotice

_encode = msgspec.msgpack.Encoder().encode
_frame_decoder = msgspec.msgpack.Decoder(RpcFrame)
_request_decoder = msgspec.msgpack.Decoder(Request)


def endpoint_name(group: str) -> str:
    name = ENDPOINT_PREFIX + group
    if len(name) > 128:
        raise ConfigError(f"group name {group!r} is too long for a request endpoint "
                          f"(at most {128 - len(ENDPOINT_PREFIX)} characters)")
    return name


def encode_rpc(endpoint: str, sender: str, frame: RpcFrame) -> bytes:
    """One abcast frame for the endpoint, carrying `frame`."""
    return encode_frame(endpoint, sender, Packet((), _encode(frame)))


def decode_rpc(payload: bytes) -> RpcFrame:
    try:
        frame: RpcFrame = _frame_decoder.decode(payload)
        return frame
    except NOT_A_MESSAGE as exc:
        raise DecodeError(f"not a request-endpoint frame: {exc}") from None


def decode_rpc_frame(data: bytes) -> tuple[str, str, RpcFrame]:
    """(endpoint, sender, frame) from a whole frame's bytes (tests, tools)."""
    env = decode_envelope(data)
    return env.group, env.sender, decode_rpc(env.payload)


def ordered_request(request: Request) -> bytes:
    """The broadcast payload that puts `request` in the group's order."""
    return REQUEST_MAGIC + _encode(request)


def is_request(payload: bytes) -> bool:
    return payload[:4] == REQUEST_MAGIC


def read_ordered_request(payload: bytes) -> Request:
    try:
        return _request_decoder.decode(payload[4:])
    except NOT_A_MESSAGE as exc:
        raise DecodeError(f"ordered request does not decode: {exc}") from None
