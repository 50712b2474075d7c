"""A registry that goes silent (connected, not answering) or away must not make a node's
shutdown or a group's creation wait for it: a node closes all its groups at once (their
Leaves go out together), and `Group.create` gives up within its deadline, leaving the
registry's record as it was. The registry sits behind a relay (abcast.testing.relay)
that can hold its replies (and release them), so "silent" is a state the test sets, not
a timing."""

from __future__ import annotations

import asyncio

import pytest

from abcast import Group, Node, RegistryClient, RegistryServer
from abcast.errors import ConfigError
from abcast.runtime import group as group_module
from abcast.testing.relay import Relay

pytestmark = pytest.mark.timeout(60)

FAST = {"initial_backoff_s": 0.01, "max_backoff_s": 0.05}
#: a bound on a failure only: every wait below ends at once when the code is right
BOUND_S = 5.0


async def _listed(url: str, group: str) -> dict[str, str]:
    async with RegistryClient(url, **FAST) as client:
        return dict((await client.lookup(group)).members)


def test_a_node_closes_its_groups_together_under_a_silent_registry(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Node.close() closed its groups one after another, each waiting up to
    LEAVE_TIMEOUT_S for its Leave's reply: with a silent registry a node of k groups took
    2k s to close. Here the registry answers only once it has every group's Leave (the
    wait made long, so a one-by-one close never sends the second Leave): closed together,
    all k Leaves are out at once, the registry lists none of the groups, and the close
    ends as soon as the replies come."""
    monkeypatch.setattr(group_module, "LEAVE_TIMEOUT_S", 60.0)
    names = ("g1", "g2", "g3")

    async def main() -> None:
        async with RegistryServer() as server:
            proxy = Relay(server.url)
            url = f"tcp://{await proxy.start()}"
            node = await Node("mem://", registry=RegistryClient(url, **FAST)).start()
            groups = [await Group(name, ordering="fifo", host=node, size=1).open()
                      for name in names]
            created = await Group.create("chat", ordering="sequencer", host=node)
            proxy.holding = True
            closing = asyncio.create_task(node.close())
            async with asyncio.timeout(BOUND_S):  # every Leave reached the registry
                while any(server.group_info(name).members for name in (*names, "chat")):
                    await asyncio.sleep(0.005)
            assert not closing.done()  # its Leaves' replies are held
            proxy.release()
            async with asyncio.timeout(BOUND_S):
                await closing
            assert not node.running
            for group in (*groups, created):
                assert not group.active
            for name in (*names, "chat"):
                assert await _listed(server.url, name) == {}, name
            await proxy.close()

    asyncio.run(main())


def test_create_gives_up_within_its_timeout_when_the_registry_went_away() -> None:
    """Group.create waited for ever for a registry that went away (its Announce waits
    for the registry to come back): it has join's deadline now, and says what it was
    waiting for."""

    async def main() -> None:
        server = RegistryServer()
        await server.start()
        node = await Node("mem://", registry=RegistryClient(server.url, **FAST)).start()
        await server.close()
        creating = asyncio.create_task(
            Group.create("chat", ordering="sequencer", host=node, join_timeout_s=0.2))
        done, _ = await asyncio.wait({creating}, timeout=BOUND_S)
        assert done, "Group.create still waiting past its join_timeout_s"
        error = creating.exception()
        assert isinstance(error, TimeoutError)
        assert "registry" in str(error) and "0.2 s" in str(error)
        assert node.groups == ()
        again = await Group("chat", ordering="fifo", host=node, peers={}).open()  # free
        await again.close()
        await node.close()

    asyncio.run(main())


def test_create_gives_up_within_its_timeout_under_a_silent_registry_and_is_not_listed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The registry got the Announce but its reply never came: create gives up at its
    deadline, and the group it announced is not left listed with this node in it once
    the registry speaks again."""
    monkeypatch.setattr(group_module, "LEAVE_TIMEOUT_S", 0.1)

    async def main() -> None:
        async with RegistryServer() as server:
            proxy = Relay(server.url)
            url = f"tcp://{await proxy.start()}"
            node = await Node("mem://", registry=RegistryClient(url, **FAST)).start()
            proxy.holding = True
            creating = asyncio.create_task(
                Group.create("chat", ordering="sequencer", host=node, join_timeout_s=0.2))
            done, _ = await asyncio.wait({creating}, timeout=BOUND_S)
            assert done, "Group.create still waiting past its join_timeout_s"
            assert isinstance(creating.exception(), TimeoutError)
            assert node.groups == ()
            proxy.release()
            assert await _listed(server.url, "chat") == {}
            await node.close()
            await proxy.close()

    asyncio.run(main())


def test_a_refused_create_sends_the_registry_no_leave(caplog: pytest.LogCaptureFixture) -> None:
    """A create the registry refused stored nothing there: the failed open takes nothing
    off the record (a create that timed out does: its Announce may have arrived). A
    Leave after a refusal would be refused in its turn for a secret group of another
    secret, a warning in the registry's log for the creator's mistake."""

    async def main() -> None:
        async with RegistryServer() as server:
            owner = await Group.create("bank", ordering="sequencer", registry=server.url,
                                       secret=b"the-bank-secret-a")
            other = await Node("tcp://127.0.0.1:0", registry=server.url,
                               secret=b"the-bank-secret-b").start()
            with pytest.raises(ConfigError, match="bound to another secret"):
                await Group.create("bank", ordering="sequencer", host=other)
            assert other.groups == ()
            await other.close()
            await owner.close()

    with caplog.at_level("WARNING", logger="abcast.registry.server"):
        asyncio.run(main())
    refused = [r.getMessage() for r in caplog.records if r.name == "abcast.registry.server"]
    assert [m for m in refused if "Leave" in m] == [], refused
