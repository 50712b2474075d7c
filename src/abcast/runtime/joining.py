"""Opening a dynamic group (abcast.runtime.group's `Group.create` and `Group.join`): the
one deadline each has, what a joiner checks in the registry's description of the group,
and how a join that is given up leaves nothing behind.

Rules: a dynamic open has one deadline (`join_timeout_s`, JOIN_TIMEOUT_S by default)
covering every step that waits — the registry's answers (create's Announce, join's
Lookup) and a joiner's admission — and past it raises TimeoutError saying what it was
waiting for; a registry that is away or silent cannot make it hang. A join given up
withdraws its ask (or, admitted meanwhile, waits for its graceful leave) before the
group is detached. It knows the registry's GroupInfo, the driver and the transport's
buffers; nothing of the application API.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator
from typing import Final

from abcast.errors import ConfigError, LocalProtocolError
from abcast.ids import NodeId
from abcast.ordering.registry import get_ordering
from abcast.registry.messages import GroupInfo
from abcast.runtime.driver import GroupDriver
from abcast.transport import Transport

log: Final = logging.getLogger(__name__)

#: how long `Group.create` / `Group.join` may take (the registry's answers, admission):
#: join_timeout_s's default
JOIN_TIMEOUT_S: Final = 30.0
#: how long a withdrawn join (and a group's Leave at the registry) may take
LEAVE_TIMEOUT_S: Final = 2.0
#: how long a graceful leave may take before the group is closed anyway
GRACEFUL_LEAVE_TIMEOUT_S: Final = 10.0


@contextlib.asynccontextmanager
async def within(deadline: float, timeout_s: float, waiting_for: str) -> AsyncIterator[None]:
    """Run the block until the loop time `deadline`; past it raise TimeoutError naming
    what was `waiting_for` and the `timeout_s` the deadline was made of."""
    try:
        async with asyncio.timeout_at(deadline):
            yield
    except TimeoutError:
        raise TimeoutError(f"{waiting_for} within {timeout_s:g} s (join_timeout_s)") from None


def check_joinable(name: str, info: GroupInfo, node: NodeId, has_secret: bool,
                   ordering_given: str | None) -> None:
    """ConfigError naming why `node` may not join the group `info` describes, if so."""
    if info.secret and not has_secret:
        raise ConfigError(f"group {name!r} is a secret group: its members admit only "
                          "holders of its secret (secret=, ABCAST_SECRET or --secret-file)")
    if not info.ordering or not info.members:
        raise ConfigError(f"the registry has no group {name!r} (create it first)")
    if ordering_given is not None and ordering_given != info.ordering:
        raise ConfigError(f"group {name!r} uses ordering {info.ordering!r}, "
                          f"not {ordering_given!r}")
    if "join" not in get_ordering(info.ordering).tolerates:
        raise ConfigError(f"ordering {info.ordering!r} cannot admit members at run time")
    if node in info.members:
        raise ConfigError(f"{node} is already a member of {name!r}")


async def withdraw(driver: GroupDriver, transport: Transport, contacts: tuple[NodeId, ...],
                   admitted: bool, departed: asyncio.Event) -> None:
    """A join that timed out (or was cancelled): leave nothing behind in the group. Not
    admitted yet: the stack withdraws its ask (`MWithdraw` to every contact: a member
    whose view admitted us meanwhile leaves us out, counting us as agreeing), and the
    group stays attached until its channel has nothing unacked (the withdrawal
    arrived; a lost frame is retransmitted) or LEAVE_TIMEOUT_S passed: the caller then
    detaches it. Admitted meanwhile: a graceful leave (until `departed`). Either way the
    registry's record follows the view the leader installs without us."""
    node, name = driver.stack.node, driver.name
    try:
        driver.abandon_join()
    except LocalProtocolError as exc:  # an ordering that joins by its own protocol
        log.warning("%s could not withdraw its join of %s: %s", node, name, exc)
        return
    stack = driver.stack

    def delivered() -> bool:  # nothing unacked in the channel, nothing unwritten
        return not stack.in_flight() and not any(transport.buffered(c) for c in contacts)

    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(GRACEFUL_LEAVE_TIMEOUT_S if admitted else LEAVE_TIMEOUT_S):
            if admitted:
                await departed.wait()
            await asyncio.sleep(0)  # a transport may write once per loop turn
            while not delivered():
                await asyncio.sleep(0.01)
    log.info("%s gave its join of %s up (%s)", node, name, "left" if admitted else "withdrawn")
