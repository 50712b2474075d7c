"""The registration server and its client: node ids, group members and leaders."""

from __future__ import annotations

from abcast.registry.client import RegistryClient
from abcast.registry.limits import RegistryLimits, RegistryStats
from abcast.registry.messages import GroupInfo, parse_registry_url
from abcast.registry.server import RegistryServer

__all__ = [
    "GroupInfo", "RegistryClient", "RegistryLimits", "RegistryServer", "RegistryStats",
    "parse_registry_url",
]
