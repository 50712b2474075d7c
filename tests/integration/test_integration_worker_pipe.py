"""A node's result line reaches the launcher whole, however long: after a uvloop run a
line of several pipe buffers (every stamped latency of an untraced run) used to arrive
cut at a multiple of 64 KiB, and the launcher then counted the node as silent."""

from __future__ import annotations

import asyncio
import sys

import pytest

from abcast.evaluation.worker import Result, decode_report

LATENCIES = 40_000  # about 400 KB of JSON: six pipe buffers

CHILD = f"""
import sys
from abcast.cli import _run_async
from abcast.evaluation.worker import PipeControl, Result, WorkerOutcome, emit

async def main():
    control = PipeControl()
    await control.start()
    await control.stop_requested().wait()

_run_async(main())
emit(Result(WorkerOutcome(
    node="n1", delivered=1, broadcasts=1, complete=True, protocol_packets=0,
    control_packets=0, retransmissions=0, bad_frames=0, transport_bad_frames=0, go_ns=1,
    last_deliver_ns=2, latencies_ns=list(range(10**8, 10**8 + {LATENCIES})))))
"""


async def _one_report() -> bytes:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CHILD, stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, limit=64 * 1024 * 1024)
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write(b"stop\n")
    proc.stdin.close()
    line = await asyncio.wait_for(proc.stdout.readline(), 60)
    assert await proc.wait() == 0
    return line


@pytest.mark.parametrize("attempt", range(2))
def test_a_long_result_line_arrives_whole(attempt: int) -> None:
    report = decode_report(asyncio.run(_one_report()))
    assert isinstance(report, Result)
    assert len(report.outcome.latencies_ns) == LATENCIES
