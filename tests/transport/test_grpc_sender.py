"""grpc://'s sender task ends when its peer is removed or the transport closes, even when
the cancellation arrives in the same loop turn as the outcome of the call's hello (sent
as its metadata: the sender waits for it to go out, `wait_for_connection`).

On Python 3.11, `asyncio.wait_for` returns (or raises) the inner outcome in that case and
the cancellation is lost; the sender then retried a removed peer forever, and `close()`
waited on it forever (a CI hang). The race is made deterministic here with a stand-in for
grpc's channel whose hello the test sends itself.
"""

from __future__ import annotations

import asyncio

import pytest
from transport_harness import Inbox, Nodes, bind_url, run

pytestmark = pytest.mark.timeout(60)


class _Call:
    """A Push call whose hello (and writes) wait for the test to complete them."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.written: asyncio.Future[None] = loop.create_future()
        self.waiting = asyncio.Event()

    def add_done_callback(self, _callback: object) -> None:
        pass

    def done(self) -> bool:
        return False

    def cancel(self) -> bool:
        return True

    async def wait_for_connection(self) -> None:
        self.waiting.set()
        await self.written

    async def write(self, _message: bytes) -> None:
        self.waiting.set()
        await self.written


class _Calls(list[_Call]):
    """The calls the sender opened, in order; `opened` is set at the first."""

    def __init__(self) -> None:
        super().__init__()
        self.opened = asyncio.Event()


class _Channel:
    def __init__(self, calls: _Calls, closing_turns: int = 0) -> None:
        self._calls = calls
        self._closing_turns = closing_turns  # loop turns its close() takes

    def stream_unary(self, _path: str) -> object:
        def start(metadata: object = None) -> _Call:
            call = _Call(asyncio.get_running_loop())
            self._calls.append(call)
            self._calls.opened.set()
            return call
        return start

    async def close(self) -> None:
        for _ in range(self._closing_turns):
            await asyncio.sleep(0)


@pytest.mark.parametrize("how", ["remove_peer", "close"])
@pytest.mark.parametrize("outcome", ["fails", "succeeds"])
def test_the_sender_stops_when_cancelled_as_its_hello_goes_out(
    how: str, outcome: str,
) -> None:
    async def main() -> None:
        async with Nodes() as nodes:
            a = await nodes.start("grpc", "a", Inbox(), url=bind_url("grpc"))
            calls = _Calls()
            a.open_channel = lambda _target: _Channel(calls)  # type: ignore[attr-defined]
            before = asyncio.all_tasks()
            a.add_peer("b", "grpc://127.0.0.1:9")
            (sender,) = asyncio.all_tasks() - before
            await asyncio.wait_for(calls.opened.wait(), 10)
            await asyncio.wait_for(calls[0].waiting.wait(), 10)
            # the hello's outcome and the cancellation in the same loop turn
            if outcome == "fails":
                calls[0].written.set_exception(ConnectionError("refused"))
            else:
                calls[0].written.set_result(None)
            if how == "remove_peer":
                a.remove_peer("b")
                done, _ = await asyncio.wait([sender], timeout=10)
            else:
                closing = asyncio.ensure_future(a.close())
                done, _ = await asyncio.wait([sender, closing], timeout=10)
                assert closing in done, "close() waits on a sender that lost its cancellation"
            assert sender in done, "the sender task outlived its cancellation"
            assert len(calls) == 1, f"the sender opened {len(calls) - 1} more call(s) after"

    run(main)



def test_close_waits_for_a_replaced_sender_to_close_its_channel() -> None:
    """add_peer again replaces the sender task; the old one still closes its grpc
    channel (which takes a few loop turns) when close() begins: close waits for it
    too, so no sender task outlives close."""

    async def main() -> None:
        async with Nodes() as nodes:
            a = await nodes.start("grpc", "a", Inbox(), url=bind_url("grpc"))
            calls = _Calls()
            channels = iter([_Channel(calls, closing_turns=20)])
            a.open_channel = lambda _target: next(channels, _Channel(calls))  # type: ignore[attr-defined]
            before = asyncio.all_tasks()
            a.add_peer("b", "grpc://127.0.0.1:9")
            (first,) = asyncio.all_tasks() - before
            await asyncio.wait_for(calls.opened.wait(), 10)
            a.add_peer("b", "grpc://127.0.0.1:9")  # the first sender closes its channel
            await a.close()
            assert first.done(), "close() returned while a replaced sender was still closing"

    run(main)
