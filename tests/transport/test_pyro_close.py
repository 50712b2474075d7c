"""pyro:// close() releases every file descriptor it opened, without the garbage
collector's help: Pyro's thread-pool server does not close its selector (an epoll fd)
when it shuts down, so each closed transport held one until a collection happened to
run (a long-lived node that counts its fds, test_transport_departures, saw them go at
random later).
"""

from __future__ import annotations

import gc
import os

import pytest
from transport_harness import Inbox, Nodes, numbered, run

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="counts fds")]


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
        before = len(os.listdir("/proc/self/fd"))
        run(main)
        assert len(os.listdir("/proc/self/fd")) == before
    finally:
        gc.enable()
