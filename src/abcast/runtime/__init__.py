"""The asyncio runtime: nodes, groups, their drivers and the loop and clock they run on.
(The benchmark worker, launcher and cluster runner are in abcast.evaluation.)"""

from __future__ import annotations

from abcast.runtime.driver import AppHooks, GroupDriver
from abcast.runtime.group import Group, GroupApp
from abcast.runtime.loop import MonotonicClock, run_async
from abcast.runtime.node import Node, NodeStats
from abcast.runtime.registrar import Registrar
from abcast.trace.recorder import DeliveredPrefix

__all__ = [
    "AppHooks",
    "DeliveredPrefix",
    "Group",
    "GroupApp",
    "GroupDriver",
    "MonotonicClock",
    "Node",
    "NodeStats",
    "Registrar",
    "run_async",
]
