"""abcast: group communication for Python.

The public names: `Group` (broadcast to a group, iterate over its deliveries), `Node`
(one transport hosting several groups), `Delivery` (what `Group.deliveries()` yields),
`MsgId`, `View`, the registry's server and client, and the errors abcast raises.

Names are imported on first use (PEP 562), so `import abcast.ids` in a protocol core or
a simulator run does not pay for the runtime, the transports and pyarrow.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from abcast.effects import Deliver as Delivery
    from abcast.effects import Stage
    from abcast.errors import (
        AbcastError,
        Backpressure,
        ConfigError,
        DecodeError,
        LocalProtocolError,
        RemoteProtocolError,
    )
    from abcast.ids import MsgId, NodeId, View
    from abcast.ordering.registry import ORDERINGS, OrderingOptions
    from abcast.registry import RegistryClient, RegistryServer
    from abcast.replicated import Objects, lookup
    from abcast.rpc import Client, Outcome, Server
    from abcast.runtime import Group, Node

_WHERE: dict[str, tuple[str, str]] = {
    "AbcastError": ("abcast.errors", "AbcastError"),
    "Backpressure": ("abcast.errors", "Backpressure"),
    "Client": ("abcast.rpc.client", "Client"),
    "Outcome": ("abcast.rpc.voting", "Outcome"),
    "Server": ("abcast.rpc.server", "Server"),
    "ConfigError": ("abcast.errors", "ConfigError"),
    "DecodeError": ("abcast.errors", "DecodeError"),
    "Delivery": ("abcast.effects", "Deliver"),
    "Group": ("abcast.runtime.group", "Group"),
    "LocalProtocolError": ("abcast.errors", "LocalProtocolError"),
    "MsgId": ("abcast.ids", "MsgId"),
    "Node": ("abcast.runtime.node", "Node"),
    "NodeId": ("abcast.ids", "NodeId"),
    "ORDERINGS": ("abcast.ordering.registry", "ORDERINGS"),
    "OrderingOptions": ("abcast.ordering.registry", "OrderingOptions"),
    "RegistryClient": ("abcast.registry.client", "RegistryClient"),
    "RegistryServer": ("abcast.registry.server", "RegistryServer"),
    "RemoteProtocolError": ("abcast.errors", "RemoteProtocolError"),
    "Stage": ("abcast.effects", "Stage"),
    "View": ("abcast.ids", "View"),
    "ReplicatedHandle": ("abcast.replicated", "ReplicatedHandle"),
    "attach": ("abcast.replicated", "attach"),
    "lookup": ("abcast.replicated", "lookup"),
    "Objects": ("abcast.replicated", "Objects"),
    "read": ("abcast.replicated", "read"),
    "write": ("abcast.replicated", "write"),
}

__all__ = [
    "ORDERINGS",
    "AbcastError",
    "Backpressure",
    "Client",
    "ConfigError",
    "DecodeError",
    "Delivery",
    "Group",
    "LocalProtocolError",
    "MsgId",
    "Node",
    "NodeId",
    "Objects",
    "OrderingOptions",
    "Outcome",
    "RegistryClient",
    "RegistryServer",
    "RemoteProtocolError",
    "ReplicatedHandle",
    "Server",
    "Stage",
    "View",
    "attach",
    "lookup",
    "read",
    "replicated",
    "write",
]


def __getattr__(name: str) -> Any:
    if name == "replicated":
        # The package is itself the class decorator (`@abcast.replicated`): importing it
        # binds it here, so the name and the decorator are one object.
        return importlib.import_module("abcast.replicated")
    try:
        module, attr = _WHERE[name]
    except KeyError:
        raise AttributeError(f"module 'abcast' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_WHERE))
