"""The asyncio runtime: nodes, groups, benchmark workers and the local cluster launcher."""

from __future__ import annotations

from abcast.runtime.driver import DeliveredPrefix, GroupDriver
from abcast.runtime.group import Group
from abcast.runtime.node import MonotonicClock, Node, NodeStats

__all__ = ["DeliveredPrefix", "Group", "GroupDriver", "MonotonicClock", "Node", "NodeStats"]
