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
from abcast.group.failure_detector import DetectorConfig, FailureDetectorLayer
from abcast.ids import GroupName, NodeId, View
from abcast.ordering._open_channel import OpenChannel
from abcast.ordering.causal import Causal
from abcast.ordering.causal_total import CausalTotal
from abcast.ordering.chandra_toueg import ChandraToueg
from abcast.ordering.fifo import Fifo
from abcast.ordering.matrix import Matrix, MatrixConfig
from abcast.ordering.sequencer_failover import FailoverSequencer
from abcast.ordering.skeen import Skeen
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
    detector: DetectorConfig = field(default_factory=DetectorConfig)
    matrix: MatrixConfig = field(default_factory=MatrixConfig)  # heartbeats; matrix


@dataclass(frozen=True, slots=True)
class OrderingSpec:
    name: str
    make: Callable[[NodeId, OrderingOptions], list[Layer]]
    guarantees: tuple[str, ...]
    tolerates: frozenset[str]
    #: protocol packets per broadcast in a failure-free unbatched run of n nodes
    model_packets: Callable[[int], int]
    summary: str
    #: crash-tolerant orderings get a failure detector at the bottom of their stack
    needs_detector: bool = False
    #: offers `safe=True` (deliver once a majority holds the order), which adds
    #: uniform agreement to the claims
    supports_safe: bool = False
    #: sends timers forever (heartbeats): a simulated run ends once it has settled
    periodic: bool = False
    #: the channel layer under the ordering (open groups need links outside the view)
    channel: Callable[[NodeId, ChannelConfig], Layer] = ReliableChannel

    def claimed(self, options: OrderingOptions) -> tuple[str, ...]:
        """The guarantees a group with these options claims (and is checked for)."""
        if not options.safe:
            return self.guarantees
        if not self.supports_safe:
            raise ConfigError(f"ordering {self.name!r} has no safe mode")
        return (*self.guarantees, "uniform_agreement")

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
        OrderingSpec(
            "causal", lambda node, _: [Causal(node)], (*BASIC, "fifo", "causal"),
            NETWORK_FAULTS, lambda n: n - 1,
            "causal order (vector clocks, holdback until every predecessor is delivered)",
        ),
        OrderingSpec(
            "sequencer",
            lambda node, opts: [FailoverSequencer(node, opts.batch, safe=opts.safe)],
            (*BASIC, "fifo", "total"), NETWORK_FAULTS | {"crash"}, lambda n: 2 * (n - 1),
            "total order from a fixed sequencer (data to all, then numbered ids)",
            needs_detector=True, supports_safe=True,
        ),
        OrderingSpec(
            "skeen", lambda node, _: [Skeen(node)], (*BASIC, "total"), NETWORK_FAULTS,
            lambda n: 3 * (n - 1),
            "total order from Lamport-clock proposals (the final stamp is their maximum)",
        ),
        OrderingSpec(
            "causal-total",
            lambda node, opts: [CausalTotal(node, opts.batch, safe=opts.safe)],
            (*BASIC, "fifo", "causal", "total"), NETWORK_FAULTS | {"crash"},
            lambda n: 2 * (n - 1),
            "total order that respects causality (the sequencer numbers in causal order)",
            needs_detector=True, supports_safe=True,
        ),
        OrderingSpec(
            "chandra-toueg", lambda node, opts: [ChandraToueg(node, opts.batch)],
            (*BASIC, "uniform_agreement", "fifo", "total"), NETWORK_FAULTS | {"crash"},
            lambda n: 4 * (n - 1),
            "total order by consensus on batches (rotating coordinator, majority quorums)",
            needs_detector=True,
        ),
        OrderingSpec(
            "matrix", lambda node, opts: [Matrix(node, opts.matrix)],
            (*BASIC, "fifo", "total"), NETWORK_FAULTS | {"join", "leave"},
            lambda n: n * (n - 1),
            "total order from Lamport matrix clocks and NOPE heartbeats (RepMI); open group",
            periodic=True, channel=OpenChannel,
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
    """The standard stack for one group: reliable channel at the bottom (under it a
    failure detector, for crash-tolerant orderings), the ordering on top."""
    opts = options or OrderingOptions()
    spec = get_ordering(ordering)
    layers: list[Layer] = [spec.channel(node, opts.channel), *spec.make(node, opts)]
    if spec.needs_detector:
        layers.insert(0, FailureDetectorLayer(node, opts.detector))
    return Stack(node, group, layers, view)
