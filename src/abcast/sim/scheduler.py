"""The simulator's clock: a heap of callbacks at integer-microsecond virtual times.

Rules: ties run in scheduling order (a counter breaks them), so the same sequence of
`at` calls always runs the same way. Nothing here is random and nothing reads a real
clock; a run ends when no event is left (quiescence) or at a time limit.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable

from abcast.errors import LocalProtocolError


class Scheduler:
    def __init__(self) -> None:
        self.now = 0
        self.events_run = 0
        self._heap: list[tuple[int, int, Callable[[], None]]] = []
        self._counter = itertools.count()

    def at(self, t_us: int, fn: Callable[[], None]) -> None:
        """Run `fn` at virtual time `t_us` (never in the past: clamped to now)."""
        heapq.heappush(self._heap, (max(t_us, self.now), next(self._counter), fn))

    def after(self, delay_us: int, fn: Callable[[], None]) -> None:
        if delay_us < 0:
            raise LocalProtocolError(f"negative delay {delay_us}")
        self.at(self.now + delay_us, fn)

    def stop(self) -> None:
        """Drop every pending event: the run ends after the current one."""
        self._heap.clear()

    def pending(self) -> int:
        return len(self._heap)

    def next_time(self) -> int | None:
        return self._heap[0][0] if self._heap else None

    def run(
        self, until_us: int, *, on_tick: Callable[[int], None] | None = None,
        tick_every: int = 10_000,
    ) -> bool:
        """Run events up to `until_us`. True when the run went quiet before the limit."""
        heap = self._heap
        while heap:
            t, _, fn = heap[0]
            if t > until_us:
                self.now = until_us
                return False
            heapq.heappop(heap)
            self.now = t
            fn()
            self.events_run += 1
            if on_tick is not None and self.events_run % tick_every == 0:
                on_tick(t)
        return True
