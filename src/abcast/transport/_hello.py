"""The hello: the first message of every connection, and whom a receiver admits on it
— the own id, the frame bound, the supersede rule (`Sessions`) and the memory of refusals
(`Refusals`). Shared by every stream transport; `QueuedTransport.admit` (_common)
applies it.

The supersede rule: every outbound connection starts with a hello naming (node,
incarnation, conn_seq; conn_seq counts the transport's connections to all its peers, so a
later one always has a higher number, across remove_peer and add_peer). One node has at
most one live inbound connection at a receiver: a newer hello from the same node retires
the older connection, and frames still arriving on it are discarded, so a reconnect can
lose frames at the break but never reorder them.

The frame bound: the hello also says the sender's `max_frame_bytes`, and a receiver whose
own differs refuses the connection (`QueuedTransport.admit`; `Link.refuse`): the group's
channels split packets by their own node's bound, so a receiver with a smaller one would
drop the connection at every larger frame, and one with another size would refuse every
fragment, for ever. The refusal is one WARNING line per peer and value (DEBUG after it),
counted in `refused_links`; the sender's reconnects back off like any failure (_common's
`Backoff`), and `QueuedTransport.lost` logs one INFO line per run of failures, DEBUG after
it. A hello without the field (0: a node from before it, or a hand-made hello) is
admitted unchecked. With a secret the tcp handshake binds the bound (zmq:// derives its
key from the whole hello), so the value compared is authenticated.

The own id: a node never opens a connection to itself, so a hello naming the receiving
node is another node configured with the same id (or a forgery): refused like another
frame bound, before any frame is delivered — one WARNING line, DEBUG for its reconnects,
counted in `refused_links` — rather than admitted and each of its frames refused by
`Stack.receive`, which kept the link up and the impostor's frames coming.
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec
import msgspec.inspect

from abcast.codec import NOT_A_MESSAGE, NodeField
from abcast.errors import DecodeError
from abcast.ids import NodeId
from abcast.transport.base import Link

HELLO_MAGIC: Final = b"ABCAST-HELLO/1:"
_Counter = Annotated[int, msgspec.Meta(ge=0, le=2**62)]


#: the most a refusing node remembers of whom it warned about (see `Refusals`)
MAX_REFUSALS: Final = 1024


class Hello(msgspec.Struct, frozen=True, array_like=True, gc=False):
    """First message of every outbound connection: who is talking, which incarnation of
    that node's transport, which of its connections (1, 2, ... over all its peers: a
    later connection has a higher number), and the sender's frame bound (its
    `TransportOptions.max_frame_bytes`; 0, or absent on the wire: not said, admitted
    unchecked)."""

    node: NodeField
    incarnation: _Counter
    conn_seq: _Counter
    max_frame_bytes: Annotated[int, msgspec.Meta(ge=0, le=2**31)] = 0


def hello_refusal(me: NodeId, own: int, hello: Hello) -> str | None:
    """Why node `me`, whose frame bound is `own`, refuses this hello (None: it does
    not): every rule a hello is checked by, here once for every transport that reads
    one (`QueuedTransport.admit`, pyro://'s handshake). A hello naming `me` is refused
    (a node never connects to itself: another node has our id), then members must share
    the bound: see the module rules."""
    if hello.node == me:
        return (f"the hello names {me}, this node: two nodes have the id {me} (give "
                "every node its own id)")
    theirs = hello.max_frame_bytes
    if theirs in (0, own):  # 0: not said
        return None
    return (f"{hello.node} has max_frame_bytes {theirs}, {me} has {own}: members must "
            "share max_frame_bytes / frame_bytes (give every member the same "
            "TransportOptions.max_frame_bytes, ?max_frame_bytes= on its URL)")


def max_msgpack_bytes(struct: type[msgspec.Struct]) -> int:
    """The most bytes an array_like `struct` of bounded strs, bytes and ints (and its
    tag, if tagged) can take in msgpack, in its widest legal encoding (array32, str32
    and bin32 headers, every int as 9 bytes, 4 bytes a character): what a reader must
    accept to read any valid one."""
    info = msgspec.inspect.type_info(struct)
    assert isinstance(info, msgspec.inspect.StructType) and info.array_like
    size = 5
    if isinstance(info.tag, int):
        size += 9
    elif isinstance(info.tag, str):
        size += 5 + 4 * len(info.tag)
    for field in info.fields:
        kind = field.type
        if isinstance(kind, msgspec.inspect.StrType) and kind.max_length is not None:
            size += 5 + 4 * kind.max_length
        elif isinstance(kind, msgspec.inspect.BytesType) and kind.max_length is not None:
            size += 5 + kind.max_length
        elif isinstance(kind, msgspec.inspect.IntType):
            size += 9
        else:  # a new field must be bounded for the bound below to mean anything
            raise TypeError(f"{struct.__name__}.{field.name}: no byte bound for {kind}")
    return size


#: the largest hello (frame body) a receiver must read, derived from Hello's field
#: bounds; a stream transport reads no larger frame before a connection is admitted
#: (a stranger who knows only the address makes a node buffer at most this much)
HELLO_MAX_BYTES: Final = len(HELLO_MAGIC) + max_msgpack_bytes(Hello)

_hello_decoder: Final = msgspec.msgpack.Decoder(Hello)
_hello_encoder: Final = msgspec.msgpack.Encoder()


def encode_hello(hello: Hello) -> bytes:
    return HELLO_MAGIC + _hello_encoder.encode(hello)


def decode_hello(data: bytes) -> Hello:
    """DecodeError for anything that is not a hello (also one longer than any Hello
    encodes to: msgspec would take extra trailing fields, of any size)."""
    if len(data) > HELLO_MAX_BYTES:
        raise DecodeError(f"a hello of {len(data)} bytes exceeds the hello bound "
                          f"{HELLO_MAX_BYTES}")
    if not data.startswith(HELLO_MAGIC):
        raise DecodeError(f"expected a hello, got {bytes(data[:16])!r}...")
    try:
        return _hello_decoder.decode(data[len(HELLO_MAGIC) :])
    except NOT_A_MESSAGE as exc:
        raise DecodeError(f"bad hello: {exc}") from None


class Sessions:
    """The supersede rule: the current inbound link of each sending node."""

    __slots__ = ("_current",)

    def __init__(self) -> None:
        self._current: dict[NodeId, tuple[Hello, Link]] = {}

    def admit(self, hello: Hello, link: Link) -> tuple[bool, Link | None]:
        """(accepted, superseded link). Not accepted = an older connection of the same
        incarnation arriving late: close it quietly."""
        current = self._current.get(hello.node)
        if current is not None:
            old_hello, _ = current
            if old_hello.incarnation == hello.incarnation and hello.conn_seq < old_hello.conn_seq:
                return False, None
        self._current[hello.node] = (hello, link)
        if current is not None and current[1] is not link:
            current[1].retire()
            return True, current[1]
        return True, None

    def forget(self, link: Link) -> None:
        if link.peer is None:
            return
        current = self._current.get(link.peer)
        if current is not None and current[1] is link:
            del self._current[link.peer]

    def links(self) -> list[Link]:
        return [link for _, link in self._current.values()]


class Refusals:
    """Whom this node refused, and why: the first refusal of a peer for a reason is
    worth a WARNING, its reconnects that are refused again only DEBUG. Bounded: past
    MAX_REFUSALS peers (hellos may claim any name) it forgets them all and warns anew."""

    __slots__ = ("_reasons",)

    def __init__(self) -> None:
        self._reasons: dict[NodeId | None, str] = {}

    def first(self, peer: NodeId | None, reason: str) -> bool:
        """Note a refusal; True if this peer was not refused for this reason before."""
        if self._reasons.get(peer) == reason:
            return False
        if len(self._reasons) >= MAX_REFUSALS:
            self._reasons.clear()
        self._reasons[peer] = reason
        return True

    def admitted(self, peer: NodeId) -> None:
        """The peer got in: a later refusal is news again."""
        self._reasons.pop(peer, None)
