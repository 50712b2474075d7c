"""The registrar of a dynamic group's leader, against a real registry: what it asks of
the registry while a member of its view has no address anywhere."""

from __future__ import annotations

import asyncio
from collections import Counter

import pytest

from abcast.ids import View
from abcast.registry import RegistryClient, RegistryServer
from abcast.registry.messages import GroupInfo
from abcast.runtime import registrar as registrar_module
from abcast.runtime.registrar import Registrar
from abcast.testing.polling import until

pytestmark = pytest.mark.timeout(60)

FAST = {"initial_backoff_s": 0.01, "max_backoff_s": 0.05}
RECHECK_S = 0.02


class CountingClient(RegistryClient):
    """A registry client that counts its lookups, locates and announces."""

    def __init__(self, url: str) -> None:
        super().__init__(url, **FAST)  # type: ignore[arg-type]
        self.asked: Counter[str] = Counter()

    async def lookup(self, group: str) -> GroupInfo:
        self.asked["lookup"] += 1
        return await super().lookup(group)

    async def locate(self, node: str) -> str | None:
        self.asked["locate"] += 1
        return await super().locate(node)

    async def announce(self, *args: object, **kwargs: object) -> GroupInfo:
        self.asked["announce"] += 1
        return await super().announce(*args, **kwargs)  # type: ignore[arg-type]


def test_a_member_without_an_address_is_looked_for_with_backoff_not_announced_each_recheck(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The leader's view holds n9, whose address neither it nor the registry has. The
    record it announces lacks n9, so every recheck found it "stale" and repaired it: a
    locate, an announce and an INFO line every recheck_s for as long as that lasted (19
    announces in 20 rechecks on main, /tmp/opsfix2/registrar_storm.py). Now it is
    announced once; n9's address is looked for again with backoff, and once n9 has one
    the record gets it."""
    monkeypatch.setattr(registrar_module, "RELOCATE_MAX_S", 0.16, raising=False)

    async def main() -> tuple[Counter[str], Counter[str], int, dict[str, str]]:
        async with RegistryServer() as server:
            client = CountingClient(server.url)
            me = await client.register(address="tcp://127.0.0.1:1")
            view = View(1, (me, "n9"))
            registrar = Registrar(client, "d", "sequencer", b"", me, "tcp://127.0.0.1:1",
                                  lambda: view, lambda member: None, recheck_s=RECHECK_S)
            registrar.start()
            try:
                await until(lambda: client.asked["lookup"] >= 30, timeout_s=20.0)
                while_unknown = Counter(client.asked)
                n9 = RegistryClient(server.url, **FAST)  # type: ignore[arg-type]
                await n9.register("n9", address="tcp://127.0.0.1:9")
                await until(lambda: "n9" in (server.group_info("d").members), timeout_s=10.0)
                await n9.close()
                return (while_unknown, client.asked, registrar.repairs,
                        dict(server.group_info("d").members))
            finally:
                await registrar.stop()
                await client.close()

    while_unknown, after, repairs, members = asyncio.run(main())
    assert while_unknown["announce"] == 1  # the view's, once
    # one locate for the announce, then one per backoff step: far fewer than rechecks
    assert while_unknown["locate"] <= while_unknown["lookup"] // 3
    assert repairs == 0  # a record lacking only n9 was never taken for a stale one
    assert after["announce"] == 2
    assert members == {"n1": "tcp://127.0.0.1:1", "n9": "tcp://127.0.0.1:9"}
