"""pyro://'s receiver bounds what its worker threads hand to the loop: a worker whose
connection has high_water_bytes of frames waiting for the loop waits before it takes
another call, so a sender faster than the receiver's loop meets backpressure (its
call returns later, its queue and `drain` hold it) instead of growing the receiver's
memory without bound.

The worker is played by a thread calling the Pyro entry points (on_handshake,
on_append) while the loop is held up; what the loop has not yet handed over is read
from the transport's hand-off queue.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from transport_harness import Inbox, Nodes, numbered, run

from abcast.transport import TransportOptions
from abcast.transport.pyro_transport import PyroTransport

pytestmark = pytest.mark.timeout(60)

HIGH = 64 * 1024
FRAME = 1024
COUNT = 4 * HIGH // FRAME


class _Conn:
    """What the transport reads of a Pyro connection."""

    sock = None

    def close(self) -> None:
        pass


def _waiting_bytes(b: PyroTransport) -> int:
    with b._lock:
        return sum(len(args[1]) for callback, args in b._posted
                   if callback is b._deliver_posted)


def test_a_worker_waits_while_the_loop_is_behind() -> None:
    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            b = await nodes.start("pyro", "b", inbox, TransportOptions(high_water_bytes=HIGH))
            assert isinstance(b, PyroTransport)
            most = 0
            done = threading.Event()

            def worker() -> None:
                nonlocal most
                conn: Any = _Conn()
                b.on_handshake(conn, ["a", 1, 1, b.options.max_frame_bytes])
                for seq in range(COUNT):
                    b.on_append(conn, numbered(seq, FRAME))
                    most = max(most, _waiting_bytes(b))
                done.set()

            thread = threading.Thread(target=worker, name="test-pyro-worker")
            thread.start()
            # Hold the loop up (as a busy handler would) while the worker calls: it must
            # stop at the bound instead of finishing.
            finished_alone = done.wait(0.5)
            await inbox.wait_until(lambda: len(inbox.got("a")) >= COUNT, "every frame")
            thread.join(10)
            assert inbox.got("a") == list(range(COUNT))
            assert not finished_alone, f"the worker handed {most} bytes to a stalled loop"
            assert most <= HIGH + FRAME

    run(main)
