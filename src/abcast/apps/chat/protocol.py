"""The chat demo's websocket messages: what a page may ask, what the server tells it.

Rules: every frame is one JSON object whose "type" names its Struct. A page's frame is
decoded into exactly one `ClientMessage` (unknown fields, wrong types, out-of-range
values and unknown types are refused); a refused or failed request earns that page one
`Error` frame and changes nothing (a frame too big to read closes the socket instead:
abcast.apps.chat.web). The server pushes `ServerMessage`s: `Hello` first, then the state
so far (`Joined`, `ViewChanged`, `Delivered`, `Debug` for each open group), then every
change as it happens, to every connected page.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

import msgspec

GroupName = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
Member = Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
#: the longest hold delay the control accepts (ms)
MAX_DELAY_MS = 600_000


class _Client(msgspec.Struct, frozen=True, forbid_unknown_fields=True, tag_field="type"):
    pass


class ListGroups(_Client, tag="list", frozen=True):
    """Ask for the registry's groups (answered with `Groups`)."""


class Create(_Client, tag="create", frozen=True):
    group: GroupName
    ordering: str
    multicast: Literal["reliable", "basic"] = "reliable"
    partitions: Literal["primary", "evs"] = "primary"


class Join(_Client, tag="join", frozen=True):
    group: GroupName


class Leave(_Client, tag="leave", frozen=True):
    group: GroupName


class Send(_Client, tag="send", frozen=True):
    group: GroupName
    text: Annotated[str, msgspec.Meta(min_length=1, max_length=4096)]


class Hold(_Client, tag="hold", frozen=True):
    """Hold `member`'s packets for `group` (delay_ms=0) or delay each by delay_ms; `member`
    is another member of the group's view, or one with a rule already."""

    group: GroupName
    member: Member
    delay_ms: Annotated[int, msgspec.Meta(ge=0, le=MAX_DELAY_MS)] = 0


class Release(_Client, tag="release", frozen=True):
    group: GroupName
    member: Member


ClientMessage = ListGroups | Create | Join | Leave | Send | Hold | Release

_decoder: msgspec.json.Decoder[ClientMessage] = msgspec.json.Decoder(ClientMessage)


def decode_client(data: str | bytes) -> ClientMessage:
    """One page frame as a ClientMessage; msgspec.ValidationError/DecodeError if not."""
    return _decoder.decode(data)


# ---------------------------------------------------------------- server → page


class _Server(msgspec.Struct, frozen=True, tag_field="type"):
    pass


class Hello(_Server, tag="hello", frozen=True):
    node: str
    registry: str
    orderings: list[str]
    joinable: list[str]
    multicasts: list[str]
    partitions: list[str]
    #: orderings that offer partitions="evs"
    evs: list[str]
    #: the lines a group's history keeps (the page shows no more than these either)
    history_lines: int


class GroupRow(msgspec.Struct, frozen=True):
    group: str
    ordering: str
    view_id: int
    leader: str
    members: int


class Groups(_Server, tag="groups", frozen=True):
    groups: list[GroupRow]


class Joined(_Server, tag="joined", frozen=True):
    """This node is in `group`; the `Delivered` lines that follow are its whole window
    (sent again when the group replaced the window: a page drops the lines it showed)."""

    group: str
    ordering: str
    multicast: str
    partitions: str


class ViewChanged(_Server, tag="view", frozen=True):
    group: str
    view_id: int
    members: list[str]
    leader: str


class Delivered(_Server, tag="deliver", frozen=True):
    group: str
    #: position in this node's delivery order of the group (1, 2, …)
    index: int
    origin: str
    seq: int
    text: str


class Left(_Server, tag="left", frozen=True):
    group: str
    #: "left" (this page asked) or "removed" (the group went on without this node)
    how: str


class Debug(_Server, tag="debug", frozen=True):
    group: str
    #: `Stack.inspect()`, bottom layer first, as builtins
    layers: list[dict[str, Any]]
    #: the hold/release control: member → delay ms (0: held), member → frames waiting
    rules: dict[str, int]
    held: dict[str, int]
    #: this node's transport counters (every group's frames: sent, received, …)
    transport: dict[str, int] = {}


class Error(_Server, tag="error", frozen=True):
    message: str


ServerMessage = Hello | Groups | Joined | ViewChanged | Delivered | Left | Debug | Error

_encoder = msgspec.json.Encoder()


def encode_server(message: ServerMessage) -> str:
    return _encoder.encode(message).decode()
