"""What the runtime takes from the operating system: the event loop it runs on and the
monotonic µs clock its stacks read.

Rules: `run_async` is the one way a command runs a coroutine to completion (uvloop when
the `fast` extra is installed, unless ABCAST_LOOP=asyncio; SIGTERM cancels it as Ctrl-C
does, so cleanup runs either way). `MonotonicClock` is the only clock a runtime node
reads; the sans-IO cores never read one (`now` comes in with every call).
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

__all__ = ["MonotonicClock", "run_async"]

T = TypeVar("T")


def run_async(main: Coroutine[Any, Any, T]) -> T:
    """Run `main` on uvloop when it is installed (the `fast` extra) unless
    ABCAST_LOOP=asyncio, else on asyncio's loop. SIGTERM cancels `main` as Ctrl-C does, so
    its cleanup (killing child processes, closing sockets) runs either way."""

    async def cancellable() -> T:
        task = asyncio.current_task()
        if task is not None:
            asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, task.cancel)
        return await main

    factory: Callable[[], asyncio.AbstractEventLoop] | None = None
    if os.environ.get("ABCAST_LOOP", "uvloop") != "asyncio":
        try:
            import uvloop
        except ImportError:
            pass
        else:
            factory = uvloop.new_event_loop
    try:
        with asyncio.Runner(loop_factory=factory) as runner:
            return runner.run(cancellable())
    except asyncio.CancelledError:
        sys.exit(128 + signal.SIGTERM)


class MonotonicClock:
    """Integer µs that never run backwards; `at_least` lets a fired timer's deadline
    become "now" when the loop woke a little early."""

    __slots__ = ("_last",)

    def __init__(self) -> None:
        self._last = 0

    def now_us(self) -> int:
        # Read two or three times per frame: a comparison, not a max() call.
        t = time.monotonic_ns() // 1_000
        if t > self._last:
            self._last = t
            return t
        return self._last

    def at_least(self, at: int) -> int:
        now = self.now_us()
        if at > now:
            self._last = at
            return at
        return now
