"""Ordering "ticket" with a real ticket-server process (`abcast ticket-server`) that is
killed (SIGKILL) while three members write a replicated counter in closed loops: the
members detect it, the lowest takes over, every write completes once, and every copy
ends with the same value — the number of writes issued."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys

from abcast.ordering.registry import OrderingOptions
from abcast.replicated import Counter, ReplicatedHandle


async def start_server(registry: str) -> tuple[asyncio.subprocess.Process, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "abcast.cli", "ticket-server", "--registry", registry,
        "--group", "tk", "--json", stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL)
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    return proc, json.loads(line)["url"]


async def scenario() -> None:
    from abcast.registry.server import RegistryServer
    from abcast.runtime.group import Group

    async with RegistryServer() as registry:
        server, url = await start_server(registry.url)
        try:
            handles = [ReplicatedHandle(Counter()) for _ in range(3)]
            groups = [Group("tk", ordering="ticket", registry=registry.url, node=f"n{i + 1}",
                            size=3, options=OrderingOptions(ticket=url), app=handles[i])
                      for i in range(3)]
            await asyncio.wait_for(asyncio.gather(*(g.open() for g in groups)), 30)
            done = [0, 0, 0]
            stop = asyncio.Event()

            async def writer(i: int) -> None:
                while not stop.is_set():
                    await handles[i].add(1)
                    done[i] += 1

            tasks = [asyncio.create_task(writer(i)) for i in range(3)]
            await asyncio.sleep(0.5)
            before = sum(done)
            os.kill(server.pid, signal.SIGKILL)  # under load
            await server.wait()
            await asyncio.sleep(2.5)  # the 1 s detection, the takeover, more writes
            stop.set()
            await asyncio.wait_for(asyncio.gather(*tasks), 30)
            total = sum(done)
            assert before > 0 and total > before  # writes went on after the crash
            for handle in handles:
                await asyncio.wait_for(handle.wait_until(lambda c: c.value == total), 20)
            assert {h.local.value for h in handles} == {total}
            assert all(h.applied == total for h in handles)  # each write executed once
            ticket = groups[0].inspect()[-1]
            assert ticket.clock["epoch"] == 1 and ticket.clock["issuer"] == "n1"
            await asyncio.gather(*(g.close() for g in groups))
        finally:
            if server.returncode is None:
                server.kill()
                await server.wait()


def test_a_killed_ticket_server_loses_no_write() -> None:
    asyncio.run(asyncio.wait_for(scenario(), 120))
