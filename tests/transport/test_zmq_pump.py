"""zmq://'s pump task settles its in-flight batch exactly once when it is cancelled
(add_peer again, a DROP, remove_peer, close).

A zmq send goes whole or not at all: a send still waiting when the pump is cancelled
never happened, and its batch goes back to the queue (discarded when the peer or the
transport goes). But the cancellation can arrive in the loop turn the send completed
in; the batch went then, and queueing it again sent it twice on the next connection
(and close counted a frame on the wire as discarded). The race is made deterministic
with a real DEALER whose sends wait for the test to complete them.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import zmq
import zmq.asyncio
from transport_harness import Inbox, Nodes, number_of, numbered, run

from abcast.transport._framing import split_frames

pytestmark = pytest.mark.timeout(60)

NOWHERE = "zmq://127.0.0.1:9"


class _Sends:
    """Every send of the channel's DEALERs, in order, each with the future it returned."""

    def __init__(self) -> None:
        self.pending: list[tuple[bytes, asyncio.Future[None]]] = []
        self.waiting = asyncio.Event()

    def frames(self, start: int) -> list[int]:
        return [number_of(f) for data, _ in self.pending[start:]
                for f in split_frames(data, 1 << 20)]


class _HeldSocket(zmq.asyncio.Socket):
    sends: _Sends

    def send(self, data: Any, flags: int = 0, copy: bool = True, track: bool = False,
             **kwargs: Any) -> asyncio.Future[None]:
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.sends.pending.append((bytes(data), fut))
        self.sends.waiting.set()
        return fut


class _Context:
    """The transport's context, except that its sockets hold their sends."""

    def __init__(self, real: zmq.asyncio.Context, sends: _Sends) -> None:
        self._real = real
        self._sends = sends

    def socket(self, kind: int) -> zmq.asyncio.Socket:
        sock = _HeldSocket(self._real, kind)
        sock.sends = self._sends
        return sock

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


@pytest.mark.parametrize("how", ["readdress", "remove_peer", "close"])
@pytest.mark.parametrize("send", ["completed", "still-waiting"])
def test_a_cancelled_pump_counts_its_batch_sent_or_unsent_once(how: str, send: str) -> None:
    went = send == "completed"

    async def main() -> None:
        async with Nodes() as nodes:
            a = await nodes.start("zmq", "a", Inbox())
            sends = _Sends()
            a._ctx = _Context(a._ctx, sends)  # type: ignore[attr-defined]
            before = asyncio.all_tasks()
            a.add_peer("b", NOWHERE)
            channel_tasks = asyncio.all_tasks() - before  # its pump and control tasks
            a.send("b", numbered(0))
            await asyncio.wait_for(sends.waiting.wait(), 10)
            ((_, first),) = sends.pending
            sends.waiting.clear()
            if went:  # the send completes in the loop turn the pump is cancelled in
                first.set_result(None)
            if how == "readdress":
                a.add_peer("b", NOWHERE)
                a.send("b", numbered(1))
                await asyncio.wait_for(sends.waiting.wait(), 10)
                again = sends.frames(1)
                assert again == ([1] if went else [0, 1]), f"the new connection sent {again}"
                assert a.stats.frames_out == int(went)  # the new send still waits
                return
            if how == "remove_peer":
                a.remove_peer("b")
                await asyncio.wait(channel_tasks, timeout=10)
            else:
                await a.close()
                assert all(task.done() for task in channel_tasks), "close left a task running"
            assert (a.stats.frames_out, a.stats.discarded_frames) == (int(went), int(not went))

    run(main)
