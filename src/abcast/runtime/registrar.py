"""`Registrar`: a dynamic group's leader keeps the registry's record of the group true.

Rules: only the view's leader announces; it announces on every view change and repairs a
stale or missing record every `recheck_s`; a removed group stops it. A member nobody has
an address of is left out of the announcement, and the record that lacks only it is not
repaired: the leader looks for the address again after `recheck_s`, then twice as long
each time up to RELOCATE_MAX_S, and announces once it has one. It knows the registry
client and the node's addresses, nothing of stacks or orderings (abcast.runtime.group
starts and stops it).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Final

from abcast.errors import AbcastError, ConfigError
from abcast.ids import NodeId, View
from abcast.registry.client import RegistryClient
from abcast.registry.messages import GroupInfo
from abcast.tasks import stop_task

log: Final = logging.getLogger(__name__)

#: how often a leader checks the registry still holds its group
RECHECK_S: Final = 1.0
#: the longest a leader waits before it looks again for the address of a member nobody
#: had one of (it starts at recheck_s and doubles)
RELOCATE_MAX_S: Final = 30.0


class Registrar:
    """A dynamic group's leader keeps the registry's record of the group true.

    The leader is the lowest member of the current view (`View.leader`), so after a
    leave or a crash the survivors agree on the next one without an election of their own:
    whoever the ordering's next view puts first takes over. On every view change the
    leader announces the view (ordering, options, view id, members → addresses) at once;
    every `recheck_s` it looks the group up and announces again if the registry's record
    differs from its view — which is how a registry that restarted and lost everything, or
    a record left stale by a leader that crashed mid-announce, is put right. A member
    whose address neither this node nor the registry knows is left out of the
    announcement, and a record that lacks only it is no stale one: the leader looks for
    the address again with backoff (up to RELOCATE_MAX_S) and announces once it has it,
    rather than announcing the same record every `recheck_s`. Non-leaders
    only watch (they become leader by a view change, which wakes them). The registry
    ignores an announcement older than the view it holds, so two leaders for a moment (an
    old one that has not yet installed the view without itself) cannot roll it back.

    A removed group (`abcast group remove`) refuses announcements: the registrar then stops
    and calls `on_refused` with the reason. It knows the registry client and the node's
    addresses, nothing of stacks or orderings.
    """

    def __init__(
        self, registry: RegistryClient, group: str, ordering: str, options: bytes,
        me: NodeId, my_address: str, current_view: Callable[[], View],
        peer_url: Callable[[NodeId], str | None], *, recheck_s: float = RECHECK_S,
        on_refused: Callable[[str], None] | None = None,
    ) -> None:
        if recheck_s <= 0:
            raise ConfigError(f"recheck_s must be positive, got {recheck_s}")
        self.registry = registry
        self.group = group
        self.ordering = ordering
        self.options = options
        self.me = me
        self.my_address = my_address
        self.current_view = current_view
        self.peer_url = peer_url
        self.recheck_s = recheck_s
        self.on_refused = on_refused
        self.announcements = 0  # announces sent (view changes and repairs)
        self.repairs = 0  # of which: the registry's record had gone stale or missing
        self._changed = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        #: the view id and members (with addresses) this leader last announced
        self._announced: tuple[int, dict[NodeId, str]] | None = None
        #: while that announcement left members out: when to look for them again, and
        #: the wait after that (doubling up to RELOCATE_MAX_S)
        self._relocate_at = 0.0
        self._relocate_every = recheck_s

    def start(self) -> None:
        if self._task is None:
            self._changed.set()  # the first view counts as a change
            self._task = asyncio.get_running_loop().create_task(
                self._run(), name=f"registrar-{self.group}")

    def view_changed(self) -> None:
        self._changed.set()

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await stop_task(task)

    async def _run(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(self.recheck_s):
                    await self._changed.wait()
            changed = self._changed.is_set()
            self._changed.clear()
            try:
                await self._ensure(force=changed)
            except ConfigError as exc:
                if "was removed" in str(exc):
                    log.warning("%s stops registering %s: %s", self.me, self.group, exc)
                    if self.on_refused is not None:
                        self.on_refused(str(exc))
                    return
                log.warning("%s could not register %s: %s", self.me, self.group, exc)
            except AbcastError as exc:
                log.warning("%s could not register %s: %s", self.me, self.group, exc)
            except Exception:
                # A bug, not the registry: one line with its traceback, and the task ends
                # here rather than dying unseen and raising later from stop() (in the
                # middle of a Group.close).
                log.exception("%s stops registering %s", self.me, self.group)
                return

    async def _ensure(self, *, force: bool) -> None:
        view = self.current_view()
        if self.me not in view.members or view.leader != self.me:
            return  # (membership first: the view a last member leaves into is empty)
        relocating = False
        if not force:
            info = await self.registry.lookup(self.group)
            if (info.view_id, info.ordering, sorted(info.members)) == (
                    view.view_id, self.ordering, sorted(view.members)):
                return
            if info.view_id > view.view_id:
                return  # a newer view is there: ours is on its way, or we are out of date
            relocating = self._holds_ours(info, view)
            if relocating and asyncio.get_running_loop().time() < self._relocate_at:
                return  # it lacks only members nobody had an address of: not yet
            if not relocating:
                self.repairs += 1
                log.info("%s re-registers %s (the registry had view %d, we are at %d)",
                         self.me, self.group, info.view_id, view.view_id)
        members = await self._addresses(view)
        if self.current_view() != view:
            self._changed.set()  # the view moved on while we looked addresses up
            return
        if relocating and self._announced is not None and members == self._announced[1]:
            self._relocate_later(twice=True)  # still nobody has their addresses
            return
        self.announcements += 1
        await self.registry.announce(self.group, self.ordering, view.view_id, members,
                                     options=self.options)
        self._announced = (view.view_id, members)
        if len(members) < len(view.members):
            self._relocate_later(twice=False)
            log.info("%s announced view %d of %s without %s: no address known (looked for "
                     "again in %g s, then less often)", self.me, view.view_id, self.group,
                     " ".join(m for m in view.members if m not in members),
                     self._relocate_every)

    def _holds_ours(self, info: GroupInfo, view: View) -> bool:
        """The registry holds what this leader last announced for this view: it differs
        from the view only by members nobody had an address of."""
        announced = self._announced
        return (announced is not None and info.view_id == view.view_id == announced[0]
                and info.ordering == self.ordering and dict(info.members) == announced[1])

    def _relocate_later(self, *, twice: bool) -> None:
        most = max(RELOCATE_MAX_S, self.recheck_s)
        every = min(2 * self._relocate_every, most) if twice else self.recheck_s
        self._relocate_every = every
        self._relocate_at = asyncio.get_running_loop().time() + every

    async def _addresses(self, view: View) -> dict[NodeId, str]:
        members: dict[NodeId, str] = {}
        for member in view.members:
            url = self.my_address if member == self.me else self.peer_url(member)
            if url is None:
                url = await self.registry.locate(member)
            if url is not None:
                members[member] = url
        return members
