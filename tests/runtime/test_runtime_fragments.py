"""Packets larger than the transport's frame bound, on real processes over tcp: the
members' transports refuse frames above 16 KiB (`?max_frame_bytes=16384`), the group's
state is 400 KB and some broadcasts are 40 KB. A joiner still gets the whole state (its
snapshot crosses in fragments), every member delivers the same messages in the same order,
and the large broadcasts arrive whole."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from abcast import RegistryServer
from abcast.testing.member_process import MemberProcess as Member
from abcast.testing.member_process import reports_until, spawn_member

pytestmark = pytest.mark.timeout(90)

MEMBER = Path(__file__).with_name("frag_member.py")
REPO = Path(__file__).resolve().parents[2]
MAX_FRAME = 16 * 1024
STATE = 400_000


async def _spawn(registry: str, out: Path, create: bool) -> Member:
    args = ["--registry", registry, "--max-frame", str(MAX_FRAME), "--state", str(STATE)]
    if create:
        args.append("--create")
    return await spawn_member(MEMBER, args, REPO / "src", out / "stderr.log")


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
            reports = await reports_until(members, lambda rs: len(
                {(r["count"], r["chain"]) for r in rs}) == 1 and rs[0]["count"] == 5 + 3 * 23,
                timeout_s=30)
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
