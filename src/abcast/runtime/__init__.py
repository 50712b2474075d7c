"""The asyncio runtime: nodes, groups, benchmark workers and the local cluster launcher."""

from __future__ import annotations

from abcast.runtime.driver import AppHooks, GroupDriver
from abcast.runtime.group import Group, GroupApp, Registrar
from abcast.runtime.node import MonotonicClock, Node, NodeStats
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
]
