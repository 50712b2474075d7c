"""A join that times out leaves nothing behind (real nodes over mem://, an in-process
registry): the member that admitted the joiner, whose welcome never landed, installs a
view without it, the registry's record follows, and the same node joining again is
admitted and delivers. The member's `get_state` fails on the first join (no snapshot, so
no welcome: the joiner's `Group.join` times out), as a chat demo's failed state transfer
did. Planted: a joiner that only detaches on its timeout (what `Group` did before) leaves
its member a minority of a two-member view that can never remove it."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from abcast import Group, Node, RegistryServer
from abcast.effects import Deliver
from abcast.testing.polling import until

pytestmark = pytest.mark.timeout(60)

#: the membership layer's orderings, and chandra-toueg, which decides joins by consensus
#: (before it took no `JoinAbandoned`: the member kept the joiner and the retry timed out)
ORDERINGS = ["sequencer", "skeen", "chandra-toueg"]


class FlakyState:
    """A member's state hooks whose first `get_state` fails (no snapshot: no welcome)."""

    def __init__(self) -> None:
        self.failures_left = 1
        self.delivered: list[bytes] = []

    def get_state(self) -> bytes:
        if self.failures_left:
            self.failures_left -= 1
            raise RuntimeError("state transfer failed (planted)")
        return b"state"

    def on_deliver(self, delivery: Deliver) -> None:
        self.delivered.append(delivery.payload)


@asynccontextmanager
async def member_and_joiner(ordering: str) -> AsyncIterator[tuple[Group, Node, FlakyState]]:
    async with RegistryServer() as registry:
        a = await Node("mem://", registry=registry.url).start()
        b = await Node("mem://", registry=registry.url).start()
        state = FlakyState()
        group = await Group.create("small", ordering=ordering, host=a,
                                   get_state=state.get_state, on_deliver=state.on_deliver)
        try:
            yield group, b, state
        finally:
            await group.close()
            await b.close()
            await a.close()


def _suspects(group: Group) -> list[str]:
    layer = next(s for s in group.inspect() if s.layer == "membership")
    return list(layer.clock["suspects"])


async def _members_at_registry(node: Node) -> set[str]:
    assert node.registry is not None
    return set((await node.registry.lookup("small")).members)


@pytest.mark.parametrize("ordering", ORDERINGS)
def test_a_join_that_times_out_is_withdrawn_and_the_retry_is_admitted(ordering: str) -> None:
    async def main() -> None:
        async with member_and_joiner(ordering) as (group, b, state):
            a = group.node
            with pytest.raises(TimeoutError):
                await Group.join("small", host=b, join_timeout_s=1.0, set_state=lambda s: None)
            assert state.failures_left == 0  # the member admitted it and failed its welcome
            # The member goes on without it, and the leader's record with it.
            await until(lambda: group.view.members == (a,), timeout_s=10.0)
            assert group.view.view_id >= 3  # admitted in view 2, left out after it
            left: set[str] = set()

            async def registry_caught_up() -> bool:
                left.clear()
                left.update(await _members_at_registry(b))
                return left == {a}

            async with asyncio.timeout(10.0):
                while not await registry_caught_up():
                    await asyncio.sleep(0.01)
            # The same node joins again: fresh links, a view of both, deliveries flow.
            got: list[bytes] = []
            joined = await Group.join("small", host=b, join_timeout_s=10.0,
                                      set_state=lambda s: None,
                                      on_deliver=lambda d: got.append(d.payload))
            try:
                assert set(joined.view.members) == {a, b.id}
                await group.broadcast(b"after the retry")
                await until(lambda: got == [b"after the retry"], timeout_s=10.0)
                await until(lambda: state.delivered == [b"after the retry"], timeout_s=10.0)
            finally:
                await joined.close()

    asyncio.run(main())


def test_planted_a_joiner_that_only_detaches_stays_a_member_for_ever(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async def only_detach(self: Group, *_: object) -> None:
        return None

    monkeypatch.setattr(Group, "_abandon_join", only_detach)

    async def main() -> None:
        async with member_and_joiner("sequencer") as (group, b, _):
            with pytest.raises(TimeoutError):
                await Group.join("small", host=b, join_timeout_s=1.0, set_state=lambda s: None)
            # Suspected by the detector (its timeout is 1 s) ...
            await until(lambda: b.id in _suspects(group), timeout_s=10.0)
            # ... yet never removed: one member of a two-member view is a minority.
            with pytest.raises(TimeoutError):
                await until(lambda: group.view.members == (group.node,), timeout_s=4.0)
            assert group.view.members == (group.node, b.id)
            assert await _members_at_registry(b) == {group.node, b.id}

    asyncio.run(main())
