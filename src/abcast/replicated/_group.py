"""What a replicated object needs from a group, and which groups can carry one.

Rules: `GroupLike` is the part of abcast.Group a replica's facade uses (ReplicatedHandle,
Objects); `require_total_order` refuses, with ConfigError, an ordering whose copies
would apply writes in different orders; `refuse_dynamic` refuses, with
LocalProtocolError, an object reading a dynamic group's deliveries without being its
application (its joiners would get no state). Nothing here knows transports or the wire.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from abcast.effects import Deliver
from abcast.errors import ConfigError, LocalProtocolError
from abcast.ids import MsgId, NodeId
from abcast.ordering.registry import ORDERINGS, OrderingOptions, get_ordering


class GroupLike(Protocol):
    """What a handle needs from abcast.Group."""

    @property
    def node(self) -> NodeId: ...

    def broadcast_nowait(self, payload: bytes) -> MsgId: ...

    def deliveries(self) -> AsyncIterator[Deliver]: ...


def refuse_dynamic(group: object, what: str) -> None:
    """LocalProtocolError for a dynamic group (created or joined: it has a registrar) when
    `what` would read the group's deliveries itself (`attach` without `app=`): the group
    would hand no object state to a joiner, so a joiner's copy would start afresh while the
    members' hold every write so far, and the copies would differ from then on."""
    if getattr(group, "registrar", None) is None:
        return
    raise LocalProtocolError(
        f"group {getattr(group, 'name', '')!r} admits members at run time (made with "
        f"Group.create or Group.join): {what} must be the group's application, so that its "
        f"state moves to every joiner — Group.create/join(..., app=ReplicatedHandle(obj)), "
        f"or app=Objects() for named objects (then attach(group, cls, name=...))")


def total_orderings() -> tuple[str, ...]:
    """The orderings a replicated object can run on: those that claim total order."""
    return tuple(sorted(n for n, spec in ORDERINGS.items() if "total" in spec.guarantees))


def require_total_order(ordering: str, options: OrderingOptions | None = None) -> None:
    """ConfigError unless a group of `ordering` (with `options`) claims total order: every
    copy must apply the same writes in the same order."""
    if "total" not in get_ordering(ordering).claimed(options or OrderingOptions()):
        raise ConfigError(
            f"ordering {ordering!r} does not claim total order, so replicas would apply "
            f"writes in different orders and diverge; a replicated object needs one of: "
            f"{', '.join(total_orderings())}")
