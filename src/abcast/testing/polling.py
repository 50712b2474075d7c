"""Waiting for a condition in an asyncio test or bench: `until(predicate, timeout_s)`
polls every 5 ms and raises TimeoutError when the time is up. One definition for the
runtime tests, which wait for deliveries, views and counters that arrive through real
sockets (asserting the end state, never sleeping and hoping)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

POLL_S = 0.005


async def until(predicate: Callable[[], bool], timeout_s: float) -> None:
    """Return once `predicate()` holds; TimeoutError after `timeout_s` seconds."""
    async with asyncio.timeout(timeout_s):
        while not predicate():
            await asyncio.sleep(POLL_S)
