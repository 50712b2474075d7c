"""Packets larger than the transport's frame bound, on real processes over tcp: the
members' transports refuse frames above 16 KiB (`?max_frame_bytes=16384`), the group's
state is 400 KB and some broadcasts are 40 KB. A joiner still gets the whole state (its
snapshot crosses in fragments), every member delivers the same messages in the same order,
and the large broadcasts arrive whole."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from abcast import RegistryServer

pytestmark = pytest.mark.timeout(90)

MEMBER = Path(__file__).with_name("frag_member.py")
REPO = Path(__file__).resolve().parents[2]
MAX_FRAME = 16 * 1024
STATE = 400_000


class Member:
    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc

    async def expect(self, event: str, timeout_s: float = 30.0) -> dict[str, Any]:
        assert self.proc.stdout is not None
        async with asyncio.timeout(timeout_s):
            while True:
                line = await self.proc.stdout.readline()
                if not line:
                    raise AssertionError(f"member exited (code {await self.proc.wait()})")
                message: dict[str, Any] = json.loads(line)
                if message.get("event") == event:
                    return message

    def tell(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command.encode() + b"\n")


async def _spawn(registry: str, out: Path, create: bool) -> Member:
    args = [sys.executable, str(MEMBER), "--registry", registry,
            "--max-frame", str(MAX_FRAME), "--state", str(STATE)]
    if create:
        args.append("--create")
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    with open(out / "stderr.log", "ab") as log:
        proc = await asyncio.create_subprocess_exec(
            *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=log, env=env)
    member = Member(proc)
    await member.expect("ready")
    return member


async def _run(out: Path) -> list[dict[str, Any]]:
    members: list[Member] = []
    async with RegistryServer() as server:
        try:
            members.append(await _spawn(server.url, out, True))
            first = members[0]
            first.tell(f"send 5 {40_000}")  # larger than a frame: in fragments
            await first.expect("sent")
            for _ in range(2):  # each join moves the whole state: ~25 frames' worth
                members.append(await _spawn(server.url, out, False))
            for m in members:
                m.tell(f"send 3 {40_000}")
                m.tell("send 20 100")
            for m in members:
                await m.expect("sent")
                await m.expect("sent")
            reports: list[dict[str, Any]] = []
            async with asyncio.timeout(30):
                while True:
                    for m in members:
                        m.tell("report")
                    reports = [await m.expect("report") for m in members]
                    if len({(r["count"], r["chain"]) for r in reports}) == 1 and (
                            reports[0]["count"] == 5 + 3 * (3 + 20)):
                        break
                    await asyncio.sleep(0.2)
            for m in members:
                m.tell("exit")
            for m in members:
                async with asyncio.timeout(20):
                    await m.proc.wait()
            return reports
        finally:
            for m in members:
                if m.proc.returncode is None:
                    m.proc.kill()
                    await m.proc.wait()


def test_a_joiner_gets_a_state_far_larger_than_a_frame_and_big_broadcasts_arrive(
    tmp_path: Path,
) -> None:
    reports = asyncio.run(_run(tmp_path))
    assert len({r["blob"] for r in reports}) == 1  # the 400 KB blob reached both joiners
    assert [r["installed"] > 20 * MAX_FRAME for r in reports] == [False, True, True]
    assert len({(r["count"], r["chain"]) for r in reports}) == 1
