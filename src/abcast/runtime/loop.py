"""What the runtime takes from the operating system: the event loop it runs on, the
monotonic µs clock its stacks read, and how its garbage collector runs.

Rules: `run_async` is the one way a command runs a coroutine to completion (uvloop when
the `fast` extra is installed, unless ABCAST_LOOP=asyncio; SIGTERM cancels it as Ctrl-C
does, so cleanup runs either way). `MonotonicClock` is the only clock a runtime node
reads; the sans-IO cores never read one (`now` comes in with every call).

Garbage collection (`gc=` of `Node`, else ABCAST_GC; "tuned" unless set): "tuned" raises
CPython's thresholds when a node starts (`tune_gc`) and, once a node process has built
its stacks, moves everything alive into the permanent generation (`freeze_gc`), so
young collections are 14x rarer and an old one no longer walks the imports and the
stacks; "python" leaves CPython's own (700, 10, 10).
Thresholds are the process's, not one node's: the last node to start sets them.
`GcMeter` counts collections and their CPU time per generation (bench/gc_pauses.py).
"""

from __future__ import annotations

import asyncio
import gc
import os
import signal
import sys
import time
from collections.abc import Callable, Coroutine
from typing import Any, Final, TypeVar

from abcast.errors import ConfigError

__all__ = ["GC_MODES", "GcMeter", "MonotonicClock", "freeze_gc", "gc_mode", "run_async",
           "tune_gc"]

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


# ------------------------------------------------------------------ garbage collection

GC_MODES: Final = ("tuned", "python")
#: "tuned": (net allocations per young collection, young per middle, middle per old).
#: A young collection costs ~0.1–0.2 µs per young object, so 10,000 makes it ~1–2 ms,
#: 14x rarer than CPython's 700: a lone message meets one about once per several
#: thousand deliveries instead of once per few hundred (bench/gc_pauses.py).
TUNED_THRESHOLDS: Final = (10_000, 20, 20)


def gc_mode(mode: str | None = None) -> str:
    """`mode`, else ABCAST_GC, else "tuned"; ConfigError for anything but GC_MODES."""
    chosen = mode if mode is not None else os.environ.get("ABCAST_GC", "tuned")
    if chosen not in GC_MODES:
        raise ConfigError(f"gc mode {chosen!r}: expected one of {', '.join(GC_MODES)} "
                          "(Node(gc=...) or ABCAST_GC)")
    return chosen


def tune_gc(mode: str) -> None:
    """A node is starting: set the process's thresholds for `mode`."""
    if mode == "tuned":
        gc.set_threshold(*TUNED_THRESHOLDS)


def freeze_gc(mode: str) -> None:
    """A node process has built its stacks: collect once, then keep everything alive now
    (modules, stacks, buffers) out of every later collection. For node processes only: a
    process that builds and drops many nodes (a test run) would keep their cycles."""
    if mode == "tuned":
        gc.collect()
        gc.freeze()


class GcMeter:
    """Collections and their CPU time (`time.thread_time_ns`, so other processes' load
    does not count) per generation, from `gc.callbacks`; `reset()` starts over."""

    __slots__ = ("_started", "collections", "cpu_ns", "max_ns")

    def __init__(self) -> None:
        self.collections = [0, 0, 0]
        self.cpu_ns = [0, 0, 0]
        self.max_ns = [0, 0, 0]
        self._started = 0

    def __enter__(self) -> GcMeter:
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._callback in gc.callbacks:
            gc.callbacks.remove(self._callback)

    def reset(self) -> None:
        self.collections = [0, 0, 0]
        self.cpu_ns = [0, 0, 0]
        self.max_ns = [0, 0, 0]

    def _callback(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.thread_time_ns()
            return
        took = time.thread_time_ns() - self._started
        generation = info["generation"]
        self.collections[generation] += 1
        self.cpu_ns[generation] += took
        self.max_ns[generation] = max(self.max_ns[generation], took)
