"""The orderings abcast offers, by name: what each claims and which faults it survives.

Rules: this table is the single place that maps a name (`ordering="fifo"`) to the layers
that fill the ordering slot, the guarantees the ordering claims (checked on every trace),
the faults it can honour (the simulator refuses the others with a clear message) and the
thesis's packet-count model. Adding an ordering = one module + one entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from abcast.errors import ConfigError
from abcast.ids import GroupName, NodeId, View
from abcast.ordering.fifo import Fifo
from abcast.ordering.unordered import Unordered
from abcast.reliability.channel import ChannelConfig, ReliableChannel
from abcast.stack import Layer, Stack

#: faults every ordering over the reliable channel survives: the network misbehaving
NETWORK_FAULTS = frozenset({"drop", "dup", "delay", "partition", "hold"})
ALL_FAULTS = NETWORK_FAULTS | {"crash", "join", "leave"}

BASIC = ("integrity", "validity", "agreement")


@dataclass(frozen=True, slots=True)
class OrderingOptions:
    """Per-group knobs; each ordering reads the ones it understands."""

    batch: int | None = None  # ids per order packet (None: adaptive); sequencer family
    safe: bool = False  # deliver only once a majority has the order (uniform agreement)
    channel: ChannelConfig = field(default_factory=ChannelConfig)


@dataclass(frozen=True, slots=True)
class OrderingSpec:
    name: str
    make: Callable[[NodeId, OrderingOptions], list[Layer]]
    guarantees: tuple[str, ...]
    tolerates: frozenset[str]
    #: protocol packets per broadcast in a failure-free unbatched run of n nodes
    model_packets: Callable[[int], int]
    summary: str

    def refuse_faults(self, kinds: set[str]) -> None:
        """Raise ConfigError naming the faults this ordering cannot honour."""
        unknown = kinds - ALL_FAULTS
        if unknown:
            raise ConfigError(f"unknown fault kinds: {', '.join(sorted(unknown))}")
        refused = kinds - self.tolerates
        if refused:
            raise ConfigError(
                f"ordering {self.name!r} cannot honour {', '.join(sorted(refused))} faults "
                f"(it tolerates: {', '.join(sorted(self.tolerates))})"
            )


ORDERINGS: dict[str, OrderingSpec] = {
    spec.name: spec
    for spec in (
        OrderingSpec(
            "unordered", lambda node, _: [Unordered(node)], BASIC, NETWORK_FAULTS,
            lambda n: n - 1, "reliable broadcast, delivered on receipt",
        ),
        OrderingSpec(
            "fifo", lambda node, _: [Fifo(node)], (*BASIC, "fifo"), NETWORK_FAULTS,
            lambda n: n - 1, "per-origin order (holdback by origin sequence number)",
        ),
    )
}


def get_ordering(name: str) -> OrderingSpec:
    try:
        return ORDERINGS[name]
    except KeyError:
        raise ConfigError(
            f"unknown ordering {name!r}; choose one of: {', '.join(sorted(ORDERINGS))}"
        ) from None


def build_stack(
    node: NodeId, group: GroupName, ordering: str, view: View,
    options: OrderingOptions | None = None,
) -> Stack:
    """The standard stack for one group: reliable channel at the bottom, ordering on top."""
    opts = options or OrderingOptions()
    spec = get_ordering(ordering)
    layers: list[Layer] = [ReliableChannel(node, opts.channel), *spec.make(node, opts)]
    return Stack(node, group, layers, view)
