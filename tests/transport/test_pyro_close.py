"""pyro:// close() releases every file descriptor it opened, without the garbage
collector's help: Pyro's thread-pool server does not close its selector (an epoll fd)
when it shuts down, so each closed transport held one until a collection happened to
run (a long-lived node that counts its fds, test_transport_departures, saw them go at
random later).

What is counted is the fds opened during the test and still open after it (each by its
number and what it points at): the process's other fds are not this test's, and a thread
an earlier test left (Pyro's workers, grpc's) may close one of them meanwhile.
"""

from __future__ import annotations

import contextlib
import gc
import os

import pytest
from transport_harness import Inbox, Nodes, numbered, run

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts fds")]


def _open_fds() -> set[tuple[str, str]]:
    """The process's open fds, each with what it points at (socket:[inode], a path)."""
    found = set()
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(FileNotFoundError):  # closed since listed (the listing's)
            found.add((fd, os.readlink(f"/proc/self/fd/{fd}")))
    return found


def test_close_releases_every_fd() -> None:
    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            a = await nodes.start("pyro", "a", Inbox())
            b = await nodes.start("pyro", "b", inbox)
            a.add_peer("b", b.address)
            a.send("b", numbered(0))
            await inbox.wait_until(lambda: inbox.got("a") == [0], "a's frame")

    gc.collect()
    gc.disable()
    try:
        before = _open_fds()
        run(main)
        assert _open_fds() - before == set()
    finally:
        gc.enable()
