"""A test's member process: a Python script started with the test's source tree on its
path, talking JSON lines on stdout (`{"event": ...}`) and taking command lines on stdin.
Used by the real-process tests (tests/runtime/test_runtime_churn.py,
test_runtime_fragments.py)."""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any


class MemberProcess:
    """One started member: `expect` its next event of a kind, `tell` it a command."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.node = ""

    async def expect(self, event: str, timeout_s: float = 20.0) -> dict[str, Any]:
        assert self.proc.stdout is not None
        async with asyncio.timeout(timeout_s):
            while True:
                line = await self.proc.stdout.readline()
                if not line:
                    raise AssertionError(f"member {self.node or '?'} exited "
                                         f"(code {await self.proc.wait()})")
                message: dict[str, Any] = json.loads(line)
                if message.get("event") == event:
                    return message

    def tell(self, command: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command.encode() + b"\n")


async def spawn_member(script: Path, args: list[str], src: Path, stderr: Path
                       ) -> MemberProcess:
    """Start `script` with `args`, `src` on its PYTHONPATH, its stderr appended to
    `stderr`; returns once it printed its `ready` event (whose `node` it keeps)."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    with open(stderr, "ab") as log:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, str(script), *args, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=log, env=env)
    member = MemberProcess(proc)
    member.node = (await member.expect("ready"))["node"]
    return member


async def reports_until(members: list[MemberProcess], done: Callable[[list[dict[str, Any]]],
                                                                      bool],
                        timeout_s: float, every_s: float = 0.2) -> list[dict[str, Any]]:
    """Ask every member for a `report` until `done(reports)` holds; the last reports."""
    async with asyncio.timeout(timeout_s):
        while True:
            for member in members:
                member.tell("report")
            reports = [await member.expect("report") for member in members]
            if done(reports):
                return reports
            await asyncio.sleep(every_s)
