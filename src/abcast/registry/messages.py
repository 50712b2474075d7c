"""The registry's wire protocol: msgspec Structs, each message a 4-byte big-endian length
and a msgpack body.

Rules: this module is the only place registry bytes become objects. Every request carries
a request id (`rid`) that its reply repeats, so one connection can have several requests
open at once (a `WaitMembers` may be held for minutes while a `Lookup` is answered).
Decoding enforces bounds (name lengths, list sizes, the frame limit) so the server never
sees absurd values from a client; anything else raises `DecodeError`. It knows nothing
about sockets or what the server keeps.
"""

from __future__ import annotations

import asyncio
import struct
from typing import Annotated, Final
from urllib.parse import urlsplit

import msgspec

from abcast.codec import NOT_A_MESSAGE, GroupField, NodeField
from abcast.errors import ConfigError, DecodeError
from abcast.ids import MAX_GROUP_SIZE

#: largest registry message either side accepts (a member table of thousands of nodes fits)
MAX_MESSAGE_BYTES: Final = 1024 * 1024
PREFIX: Final = struct.Struct(">I")

Rid = Annotated[int, msgspec.Meta(ge=0, le=2**62)]
Size = Annotated[int, msgspec.Meta(ge=1, le=MAX_GROUP_SIZE)]
Address = Annotated[str, msgspec.Meta(min_length=1, max_length=512)]
Token = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
#: a secret group's verifier (abcast.security.signing), and a request's proof under it
Verifier = Annotated[bytes, msgspec.Meta(max_length=32)]
Proof = Annotated[bytes, msgspec.Meta(max_length=64)]


class _Message(msgspec.Struct, frozen=True, array_like=True, tag=True, gc=False):
    rid: Rid


# ------------------------------------------------------------------------ requests


class Register(_Message, frozen=True):
    """Give me a node id (n1, n2, … in connection order), or let me keep `claim`.

    `token` is the client's secret for the id: a claim of an id already held is granted
    only to the same token (a client re-registering after the registry restarted)."""

    token: Token
    claim: NodeField | None = None
    #: the node's transport URL, for peers that must reach it without a group's
    #: member table (members of later views resolve it with `Locate`)
    address: Address | None = None
    #: with a group secret: its verifier (binds this id to it) and this request's proof
    verifier: Verifier = b""
    auth: Proof = b""


class Join(_Message, frozen=True):
    """`node` (registered) joins `group`, reachable at `address`. `size` declares how many
    members the group has; the first join that names it fixes it."""

    node: NodeField
    token: Token
    group: GroupField
    address: Address
    size: Size | None = None
    verifier: Verifier = b""
    auth: Proof = b""


class Leave(_Message, frozen=True):
    node: NodeField
    token: Token
    group: GroupField
    auth: Proof = b""


class Lookup(_Message, frozen=True):
    """Who is in `group`; with `wait_for`, the reply is held until that many have joined."""

    group: GroupField
    wait_for: Annotated[int, msgspec.Meta(ge=0, le=65_536)] = 0


class Done(_Message, frozen=True):
    """`node` finished its part of a run in `group` (for nodes started by hand); `token`
    is the one `node` registered with, as for Join and Leave."""

    node: NodeField
    token: Token
    group: GroupField
    auth: Proof = b""


class WaitDone(_Message, frozen=True):
    """Reply once `count` members of `group` have reported Done."""

    group: GroupField
    count: Size


class Locate(_Message, frozen=True):
    """Where is `node` reachable (the address it registered)?"""

    node: NodeField


class Announce(_Message, frozen=True):
    """The leader of a dynamic group publishes its current view: the ordering, the view
    id and the members with their addresses. A view older than the one held is ignored
    (the reply shows the newer one); `create` makes a new group, refused if one of that
    name exists, and is the only way back for a removed name."""

    node: NodeField
    token: Token
    group: GroupField
    ordering: Annotated[str, msgspec.Meta(min_length=1, max_length=64)]
    view_id: Annotated[int, msgspec.Meta(ge=1, le=2**62)]
    members: Annotated[dict[NodeField, Address], msgspec.Meta(min_length=1, max_length=65_536)]
    create: bool = False
    #: the creator's ordering options, opaque here (msgpack; joiners build the same stack)
    options: Annotated[bytes, msgspec.Meta(max_length=16_384)] = b""
    verifier: Verifier = b""
    auth: Proof = b""


class ListGroups(_Message, frozen=True):
    """One page of the groups the registry knows, by name: those after `after` ("": from
    the first), at most `limit` of them (0: the registry's page size; it caps it too)."""

    after: Annotated[str, msgspec.Meta(max_length=128)] = ""
    limit: Annotated[int, msgspec.Meta(ge=0)] = 0


class Remove(_Message, frozen=True):
    """Forget `group`; its leader's later announcements are refused (until the registry
    restarts: removals live in memory like everything else)."""

    group: GroupField
    auth: Proof = b""


class Challenge(_Message, frozen=True):
    """Send me this connection's nonce: a secret group's requests on it carry a proof
    over it (see Signed)."""


Request = (
    Register | Join | Leave | Lookup | Done | WaitDone | Locate | Announce | ListGroups | Remove
    | Challenge
)
#: the requests that carry a proof of the group secret (an `auth` field)
Signed = Register | Join | Leave | Done | Announce | Remove

# ------------------------------------------------------------------------ replies


class Registered(_Message, frozen=True):
    node: NodeField


class GroupInfo(_Message, frozen=True):
    """A group as the registry knows it: members (node id → transport URL), the leader
    (the lowest member, "" while empty), the declared size (None until someone names it)
    and who has reported Done."""

    group: GroupField
    members: Annotated[dict[NodeField, Address], msgspec.Meta(max_length=65_536)]
    leader: str
    size: Size | None = None
    done: Annotated[list[NodeField], msgspec.Meta(max_length=65_536)] = []
    ordering: str = ""  # dynamic groups: the ordering their creator chose
    view_id: int = 0  # dynamic groups: the latest view their leader announced
    options: bytes = b""  # dynamic groups: their ordering options (see Announce)
    secret: bool = False  # bound to a group secret: only its holders may join or change it


class Located(_Message, frozen=True):
    node: NodeField
    address: str  # "" when the node registered no address


class GroupSummary(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """One line of `ListGroups`."""

    group: GroupField
    ordering: str
    view_id: int
    leader: str
    members: int


class GroupList(_Message, frozen=True):
    """A page of `ListGroups`; `next` is the `after` of the next page ("": the last)."""

    groups: Annotated[list[GroupSummary], msgspec.Meta(max_length=65_536)]
    next: str = ""


class Nonce(_Message, frozen=True):
    """This connection's challenge (the answer to Challenge)."""

    nonce: Annotated[bytes, msgspec.Meta(min_length=16, max_length=64)]


class Refused(_Message, frozen=True):
    """The request cannot be granted (group full, size mismatch, id taken, …)."""

    reason: Annotated[str, msgspec.Meta(max_length=1024)]


Reply = Registered | GroupInfo | Refused | Located | GroupList | Nonce

_encoder: Final = msgspec.msgpack.Encoder()
_request_decoder: Final = msgspec.msgpack.Decoder(Request)
_reply_decoder: Final = msgspec.msgpack.Decoder(Reply)


def encode(message: Request | Reply) -> bytes:
    """The message with its length prefix, ready for one write."""
    body = _encoder.encode(message)
    return PREFIX.pack(len(body)) + body


def signed_body(request: Signed) -> bytes:
    """What a proof covers: the request's encoding with its `auth` field empty, its
    `rid` included (on one connection the registry accepts only rising rids with a
    proof, which makes each proof good for one request)."""
    return _encoder.encode(msgspec.structs.replace(request, auth=b""))


def decode_request(body: bytes) -> Request:
    try:
        request: Request = _request_decoder.decode(body)
    except NOT_A_MESSAGE as exc:
        raise DecodeError(f"not a registry request: {exc}") from None
    return request


def decode_reply(body: bytes) -> Reply:
    try:
        reply: Reply = _reply_decoder.decode(body)
    except NOT_A_MESSAGE as exc:
        raise DecodeError(f"not a registry reply: {exc}") from None
    return reply


def reply_rid(body: bytes) -> int | None:
    """The request id of a reply `decode_reply` refused, if it has one where a reply's
    rid belongs (so a client can fail that request instead of re-sending it for ever)."""
    try:
        raw = msgspec.msgpack.decode(body)
    except msgspec.DecodeError:
        return None
    if isinstance(raw, list) and len(raw) >= 2 and type(raw[1]) is int:
        return raw[1]
    return None


async def read_body(reader: asyncio.StreamReader, max_bytes: int = MAX_MESSAGE_BYTES) -> bytes:
    """The next message body; DecodeError for a length above `max_bytes`, EOF errors
    (asyncio.IncompleteReadError) for a connection that ends, even mid-message."""
    prefix = await reader.readexactly(PREFIX.size)
    (length,) = PREFIX.unpack(prefix)
    if length > max_bytes:
        raise DecodeError(f"registry message of {length} bytes exceeds the limit {max_bytes}")
    return await reader.readexactly(length)


def parse_registry_url(url: str) -> tuple[str, int]:
    """(host, port) of a `tcp://host:port` registry address; ConfigError otherwise."""
    parts = urlsplit(url) if isinstance(url, str) else None
    if parts is None or parts.scheme != "tcp" or parts.path not in ("", "/"):
        raise ConfigError(f"registry address {url!r} is not like tcp://127.0.0.1:7400")
    try:
        port = parts.port
    except ValueError:
        raise ConfigError(f"registry address {url!r} has a bad port") from None
    if not parts.hostname or port is None:
        raise ConfigError(f"registry address {url!r} needs host:port")
    return parts.hostname, port
