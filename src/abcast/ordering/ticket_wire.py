"""The ticket ordering's wire messages (abcast.ordering.ticket describes the protocol).

Rules: frozen, tagged `Header`s, bounded in size; a peer's packet is one of them or a
DecodeError. Epoch 0's tickets come from the ticket server (a node outside the group);
each later epoch's from the member that took over (the view's lowest member).
"""

from __future__ import annotations

from typing import Annotated, Final

import msgspec

from abcast.codec import Count, Header, Seq

#: most ticket numbers a failover report or resume carries (the decoder refuses more)
MAX_NUMBERS: Final = 1 << 16
#: most messages one ticket request covers
MAX_RANGE: Final = 1 << 20

Numbers = Annotated[list[Seq], msgspec.Meta(max_length=MAX_NUMBERS)]
Range = Annotated[int, msgspec.Meta(ge=1, le=MAX_RANGE)]


class TData(Header, frozen=True):
    """A broadcast message (origin: the packet's sender) with its ticket number."""

    number: Seq
    seq: Seq


class TRequest(Header, frozen=True):
    """Origin → issuer: numbers for my messages first_seq … first_seq+count−1."""

    epoch: Count
    first_seq: Seq
    count: Range


class TTicket(Header, frozen=True):
    """Issuer → origin: consecutive numbers from `first_number` for that request."""

    epoch: Count
    first_number: Seq
    first_seq: Seq
    count: Range


class TSuspect(Header, frozen=True):
    """A member gave up on `epoch`'s issuer: everyone moves to epoch + 1."""

    epoch: Count


class TCollect(Header, frozen=True):
    """The new epoch's issuer asks every member for its report."""

    epoch: Count


class TReport(Header, frozen=True):
    """A member's state for a failover: it delivered every number up to `floor`, holds
    tickets `held` for messages of its own (above `floor`), and saw numbers up to `top`."""

    epoch: Count
    floor: Count
    top: Count
    held: Numbers = []


class TResume(Header, frozen=True):
    """The new issuer: numbers go on from `start`; `skipped` were issued by the old
    issuer but reached no origin, and are never delivered."""

    epoch: Count
    start: Seq
    skipped: Numbers = []


TicketHeader = TData | TRequest | TTicket | TSuspect | TCollect | TReport | TResume
