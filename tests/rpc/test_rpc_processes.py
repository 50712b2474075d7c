"""Requests and replies over real processes and TCP, for each ordering that claims total
order and survives crashes: three `abcast serve --kv` processes (the first creates the
group), two clients in this process calling `incr` in closed loops — Case A and Case B
alternating, `majority` votes with `majority_same` — and the first server (the leader:
sequencer, first coordinator; for skeen, the membership layer's flush coordinator)
SIGKILLed mid-run; matrix, which claims no crash tolerance, has its leader leave
(Ctrl-C) instead. Every request returns OK; at the end both survivors answer `digest`
identically (`all` + `all_same`), and the counter equals the number of increments the
clients were told about (a request executed twice would show as a larger counter).
With one of three servers dead, `quorum(3)` ends MEMBERS_LOST or NO_QUORUM within its
timeout."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest

from abcast import RegistryServer
from abcast.ordering.registry import ORDERINGS
from abcast.rpc import Client, Status

pytestmark = pytest.mark.timeout(120)

REPO = Path(__file__).resolve().parents[2]


async def _serve(registry: str, ordering: str, log: Path) -> tuple[asyncio.subprocess.Process,
                                                                     str]:
    env = {**os.environ, "PYTHONPATH": str(REPO / "src"), "ABCAST_LOOP": "asyncio"}
    with open(log, "ab") as err:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "abcast.cli", "serve", "svc", "--kv", "--registry",
            registry, "--ordering", ordering, stdout=asyncio.subprocess.PIPE, stderr=err,
            env=env)
    assert proc.stdout is not None
    async with asyncio.timeout(30):
        while True:
            line = (await proc.stdout.readline()).decode()
            assert line, f"server exited ({await proc.wait()}); see {log}"
            if line.startswith("serving "):
                return proc, line.split(" as ")[1].split(",")[0]


async def _load(client: Client, key: str, stop: asyncio.Event, told: list[int],
                failures: list[str]) -> None:
    k = 0
    while not stop.is_set():
        k += 1
        path = ("direct", "via-member")[k % 2]
        outcome = await client.request(f"incr {key}".encode(), vote="majority",
                                       consistency="majority_same", timeout=15.0, path=path)
        if outcome.status is not Status.OK:
            failures.append(f"{client.id} #{k} {path}: {outcome}")
            return
        told.append(int(outcome.value or b"0"))


#: every total ordering `serve` can make (it admits joiners); the first server is killed
#: where the ordering tolerates crashes, else it leaves (Ctrl-C)
CASES = [(name, "kill" if "crash" in spec.tolerates else "leave")
         for name, spec in sorted(ORDERINGS.items())
         if "total" in spec.guarantees and "join" in spec.tolerates]


@pytest.mark.parametrize(("ordering", "fault"), CASES)
def test_servers_survive_a_kill(ordering: str, fault: str, tmp_path: Path) -> None:
    asyncio.run(_scenario(ordering, fault, tmp_path))


async def _scenario(ordering: str, fault: str, tmp: Path) -> None:
    log = tmp / "servers.log"
    procs: list[asyncio.subprocess.Process] = []
    async with RegistryServer() as registry:
        try:
            for _ in range(3):
                proc, _node = await _serve(registry.url, ordering, log)
                procs.append(proc)
            clients = [await Client.connect("svc", registry=registry.url) for _ in range(2)]
            for _ in range(50):  # the registry's record catches up with the third join
                if len(clients[0].members) == 3 and len(clients[1].members) == 3:
                    break
                for c in clients:
                    await c.request(b"get warm", vote="first", timeout=2.0)
                await asyncio.sleep(0.05)
            stop = asyncio.Event()
            told: list[list[int]] = [[], []]
            failures: list[str] = []
            loads = [asyncio.create_task(_load(c, "c", stop, t, failures))
                     for c, t in zip(clients, told, strict=True)]
            await asyncio.sleep(1.0)
            procs[0].send_signal(signal.SIGKILL if fault == "kill" else signal.SIGINT)
            await procs[0].wait()  # the leader, gone
            await asyncio.sleep(3.0)
            stop.set()
            await asyncio.gather(*loads)
            assert failures == []
            values = sorted(told[0] + told[1])
            assert values == list(range(1, len(values) + 1)), "an increment ran twice"
            final = await clients[0].request(b"get c", vote="all", consistency="all_same",
                                             timeout=10.0)
            assert final.status is Status.OK and int(final.value or b"0") == len(values)
            digest = await clients[1].request(b"digest", vote="all", consistency="all_same",
                                              timeout=10.0, path="direct")
            assert digest.status is Status.OK, digest
            assert {r.server for r in digest.replies} == set(clients[1].members)
            assert len(digest.replies) == 2
            lost = await clients[0].request(b"get c", vote="quorum(3)", timeout=3.0)
            assert lost.status in (Status.MEMBERS_LOST, Status.NO_QUORUM)
            for c in clients:
                await c.close()
        finally:
            for proc in procs:
                if proc.returncode is None:
                    proc.send_signal(signal.SIGKILL)  # nothing to leave gracefully
            for proc in procs:
                async with asyncio.timeout(20):
                    await proc.wait()
