"""Stopping an asyncio task without losing the caller's own cancellation.

Rules: `await stop_task(task)` cancels `task` and waits for it to end, and is the one way
the package stops a background task of its own (the runtime, the registry client,
replicated objects, the chat's web server, the evaluation worker). The usual
`task.cancel(); with suppress(CancelledError): await task` swallows a cancellation of the
*caller* that arrives while it waits — the caller's cancel is passed on to the awaited
task, whose CancelledError is then suppressed as if it were only the task's — and the
caller runs on (a `Group.close()` or `Node.close()` cancelled there finished normally;
an `asyncio.timeout` around it did not fire). Here a cancellation of the caller made
while it waited is raised again; one made before (cleanup running after a cancellation)
is not the stopped task's business and does not cut that cleanup short. An exception
the task ended with is raised, as `await task` would.
"""

from __future__ import annotations

import asyncio
from typing import Any


async def stop_task(task: asyncio.Task[Any]) -> None:
    """Cancel `task` and wait for its end (see the module rules)."""
    current = asyncio.current_task()
    before = current.cancelling() if current is not None else 0
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        if current is not None and current.cancelling() > before:
            raise  # the caller was cancelled while it waited: that is not the task's
