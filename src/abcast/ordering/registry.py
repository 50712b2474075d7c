"""The orderings abcast offers, by name: what each claims and which faults it survives.

Rules: this table is the single place that maps a name (`ordering="fifo"`) to the layers
that fill the ordering slot, the guarantees the ordering claims (checked on every trace),
the faults it can honour (the simulator refuses the others with a clear message) and the
thesis's packet-count model. Adding an ordering = one module + one entry here.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, Final

from abcast.codec import Packet, encode_frame
from abcast.errors import ConfigError
from abcast.group.failure_detector import DetectorConfig, FailureDetectorLayer
from abcast.ids import GroupName, NodeId, View
from abcast.membership import Membership, MembershipConfig
from abcast.ordering._credit import MAX_UNSTABLE, hard_cap
from abcast.ordering._open_channel import OpenChannel
from abcast.ordering._open_detector import OpenDetector
from abcast.ordering.causal import Causal
from abcast.ordering.chandra_toueg import ChandraToueg
from abcast.ordering.fifo import MAX_AHEAD, Fifo
from abcast.ordering.matrix import Matrix, MatrixConfig
from abcast.ordering.sequencer import Sequencer
from abcast.ordering.sequencer_state import OptimisticConfig
from abcast.ordering.sequencer_wire import check_batch
from abcast.ordering.skeen import Skeen
from abcast.ordering.ticket import TICKET_NODE, Ticket, TicketConfig
from abcast.ordering.unordered import Unordered
from abcast.reliability.basic_channel import BasicChannel
from abcast.reliability.channel import LINGER_US, ChannelConfig, ReliableChannel
from abcast.reliability.fragments import HEADROOM
from abcast.reliability.nak import NakChannel, NakConfig
from abcast.stack import Layer, Stack

#: faults every ordering over the reliable channel survives: the network misbehaving
NETWORK_FAULTS = frozenset({"drop", "dup", "delay", "partition", "hold"})
ALL_FAULTS = NETWORK_FAULTS | {"crash", "join", "leave"}

BASIC = ("integrity", "validity", "agreement")
#: what best-effort (basic) multicast cannot promise: a lost packet stays lost
LIVENESS_UNDER_LOSS = frozenset({"validity", "agreement", "uniform_agreement"})
MULTICASTS = ("reliable", "basic", "nak")
#: "primary": only a majority partition goes on; "evs": every partition goes on and they
#: merge on heal (extended virtual synchrony, abcast.membership.merge)
PARTITIONS = ("primary", "evs")
#: Under evs, two sides deliver different sets in the view they split from, and a merged
#: member never delivers what the other side delivered apart (it gets the merged state):
#: agreement, FIFO and causal order hold within each lineage of views between merges
#: (abcast.sim.churn judges them so), not over the whole trace.
EVS_LINEAGE_ONLY = frozenset({"agreement", "uniform_agreement", "fifo", "causal"})


@dataclass(frozen=True, slots=True)
class OrderingOptions:
    """Per-group knobs; each ordering reads the ones it understands."""

    batch: int | None = None  # ids per order packet (None: adaptive); sequencer family
    safe: bool = False  # deliver only once a majority has the order (uniform agreement)
    channel: ChannelConfig = field(default_factory=ChannelConfig)
    detector: DetectorConfig = field(default_factory=DetectorConfig)
    matrix: MatrixConfig = field(default_factory=MatrixConfig)  # heartbeats; matrix
    #: "reliable": the reliable channel under the ordering (acks, retransmission);
    #: "basic": best effort, each packet sent once (abcast.reliability.basic_channel);
    #: "nak": one multicast per packet, NAK repair (abcast.reliability.nak); None: the
    #: transport's default, "nak" over udp:// and "reliable" elsewhere (an explicit
    #: "reliable" over udp:// keeps the ack-based channel)
    multicast: str | None = None
    nak: NakConfig = field(default_factory=NakConfig)
    #: what a partition does: "primary" (only a majority goes on; the rest stop, or under
    #: chandra-toueg rejoin with state transfer) or "evs" (both sides go on, merge views
    #: on heal; sequencer family)
    partitions: str = "primary"
    #: the origin sends to the sequencer only, which relays the body with its number
    #: (unicast-broadcast: n packets per broadcast, not 2(n−1)); sequencer family
    relay: bool = False
    #: the sequencer orders every id it admitted during this many ms in one order
    #: packet (ROMIOP's leader timer); 0: each admission is ordered at once
    order_interval_ms: float = 0
    #: ordering "optimistic": compensation's inertia α and on/off (sequencer_optimistic)
    optimistic: OptimisticConfig = field(default_factory=OptimisticConfig)
    #: ordering "ticket": the ticket server's address ("": the lowest member issues)
    ticket: str = ""
    #: flow control of the sequencer family: numbers the sequencer announces past what
    #: every member reported delivered, and own broadcasts undelivered before `broadcast()`
    #: waits (abcast.ordering.sequencer_numbering); of causal, skeen and matrix: own
    #: broadcasts not yet delivered everywhere before it waits (abcast.ordering._credit)
    max_unstable: int = MAX_UNSTABLE
    #: messages of one origin a FIFO holdback keeps waiting for an earlier one; a message
    #: further ahead is refused (one log line; abcast.ordering.fifo). At least the window;
    #: over the NAK channel raised to what it may hand up above a gap (`_fifo_ahead`).
    holdback: int = MAX_AHEAD

    def __post_init__(self) -> None:
        check_batch(self.batch)  # the order packet's bound: refused here, not in a node
        if not 0 <= self.order_interval_ms <= 10_000:
            raise ConfigError(f"order_interval_ms must be between 0 and 10000, "
                              f"not {self.order_interval_ms!r}")
        if self.multicast is not None and self.multicast not in MULTICASTS:
            raise ConfigError(f"multicast must be one of {', '.join(MULTICASTS)}, "
                              f"not {self.multicast!r}")
        if self.holdback < self.channel.window:
            raise ConfigError(f"holdback ({self.holdback}) must be at least the channel's "
                              f"window ({self.channel.window})")
        if self.max_unstable < 1:
            raise ConfigError(f"max_unstable must be at least 1, not {self.max_unstable!r}")
        if self.partitions not in PARTITIONS:
            raise ConfigError(f"partitions must be one of {', '.join(PARTITIONS)}, "
                              f"not {self.partitions!r}")

    @property
    def evs(self) -> bool:
        return self.partitions == "evs"

    def within_frames(
        self, frame_bytes: int | None, datagram_bytes: int | None = None,
        envelope: int | None = None,
    ) -> OrderingOptions:
        """These options for a transport that refuses frames above `frame_bytes`, and
        sends frames up to `datagram_bytes` as one datagram: the channels split what
        would not fit (`ChannelConfig.frame_bytes`, and the NAK channel's `frag_bytes`,
        leaving HEADROOM for the envelope and headers, so each of its fragments is one
        datagram); never raised above what is set. None: no such bound. `envelope`
        (envelope_bytes of the group and node, when known) narrows the room left for a
        datagram to this envelope instead of the largest possible one."""
        channel, nak = self.channel, self.nak
        if frame_bytes is not None and frame_bytes < channel.frame_bytes:
            channel = replace(channel, frame_bytes=frame_bytes)
        room = 1 << 62 if frame_bytes is None else frame_bytes - HEADROOM
        if datagram_bytes is not None:
            headroom = HEADROOM - _LARGEST_ENVELOPE + (envelope or _LARGEST_ENVELOPE)
            room = min(room, datagram_bytes - headroom)
        if room < nak.frag_bytes:  # the same largest packet, in more
            frag = max(1, room)
            most = min(65_536, -(-nak.frag_bytes * nak.max_fragments // frag))
            nak = replace(nak, frag_bytes=frag, max_fragments=max(nak.max_fragments, most))
        return replace(self, channel=channel, nak=nak)


#: the envelope of a frame at its largest (group of 128, sender of 64 four-byte characters):
#: HEADROOM less it is what the headers at and below a channel may take
_LARGEST_ENVELOPE: Final = len(encode_frame("\U0010ffff" * 128, "\U0010ffff" * 64, Packet()))


def envelope_bytes(group: str, node: NodeId) -> int:
    """Bytes of the envelope of `group`'s frames from `node` (OrderingOptions.within_frames)."""
    return len(encode_frame(group, node, Packet()))


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
    #: `safe_claims` to the claims
    supports_safe: bool = False
    safe_claims: tuple[str, ...] = ("uniform_agreement",)
    #: sends timers forever (heartbeats): a simulated run ends once it has settled
    periodic: bool = False
    #: the channel layer under the ordering (open groups need links outside the view)
    channel: Callable[[NodeId, ChannelConfig], Layer] = ReliableChannel
    #: the failure detector under it, when `needs_detector` (open groups: OpenDetector)
    detector_layer: Callable[[NodeId, DetectorConfig], Layer] = FailureDetectorLayer
    #: offers `partitions="evs"` (every partition goes on; merge views on heal)
    supports_evs: bool = False
    #: has a sequencer: offers `relay=True` (it relays each body with its number) and
    #: `order_interval_ms` (it orders an interval's ids in one packet)
    supports_relay: bool = False

    def check_options(self, options: OrderingOptions) -> None:
        """Raise ConfigError for options this ordering cannot honour."""
        if options.evs and not self.supports_evs:
            able = ", ".join(sorted(n for n, s in ORDERINGS.items() if s.supports_evs))
            raise ConfigError(
                f"ordering {self.name!r} cannot run partitions='evs' (only a primary "
                f"partition goes on there); extended virtual synchrony needs one of: {able}")
        if options.relay and not self.supports_relay:
            able = ", ".join(sorted(n for n, s in ORDERINGS.items() if s.supports_relay))
            raise ConfigError(f"ordering {self.name!r} has no sequencer to relay through; "
                              f"relay=True needs one of: {able}")
        if options.order_interval_ms and not self.supports_relay:
            able = ", ".join(sorted(n for n, s in ORDERINGS.items() if s.supports_relay))
            raise ConfigError(f"ordering {self.name!r} has no sequencer to time; "
                              f"order_interval_ms needs one of: {able}")

    def claimed(self, options: OrderingOptions) -> tuple[str, ...]:
        """The guarantees a group with these options claims (and is checked for). A basic
        (best-effort) group keeps only the safety properties: integrity and its order.
        Under evs, the properties that hold only per lineage of views are not claimed
        for the whole trace, and virtual synchrony is (each side's views are apart)."""
        self.check_options(options)
        claims = self.guarantees
        if options.evs:
            claims = (*(g for g in claims if g not in EVS_LINEAGE_ONLY), "virtual_synchrony")
            claims = tuple(dict.fromkeys(claims))
        elif options.safe:
            if not self.supports_safe:
                raise ConfigError(f"ordering {self.name!r} has no safe mode")
            claims = (*claims, *(g for g in self.safe_claims if g not in claims))
        if options.multicast == "basic":
            claims = tuple(g for g in claims if g not in LIVENESS_UNDER_LOSS)
        return claims

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


#: the stack under an ordering whose views the membership layer keeps: a failure detector
#: and a channel that let a joiner talk to its contact before a view holds both
_MEMBERSHIP: dict[str, Any] = {"needs_detector": True, "channel": OpenChannel,
                               "detector_layer": OpenDetector}
#: Without SAFE, a sequencer cut off in a minority may deliver a few messages there
#: before it learns it was excluded, so virtual synchrony is claimed only with SAFE.
_SAFE_SEQUENCER = ("uniform_agreement", "virtual_synchrony")


def _credit(opts: OrderingOptions) -> dict[str, int]:
    """Flow control of causal, skeen and matrix (abcast.ordering._credit): the origin's
    bound, and the receiver's cap far above what an honest origin can have waiting (its
    credit plus what the channel below may hand up out of order)."""
    ahead = opts.nak.max_holdback if opts.multicast == "nak" else opts.channel.window
    return {"max_unstable": opts.max_unstable,
            "max_held": hard_cap(opts.max_unstable, ahead)}


def _fifo_ahead(opts: OrderingOptions) -> int:
    """FIFO's holdback: `holdback`, and over the NAK channel at least what that channel may
    hand up above a gap (`nak.max_holdback` past its lowest missing packet): a message
    FIFO refused would never come up again."""
    if opts.multicast == "nak":
        return max(opts.holdback, opts.nak.max_holdback + 1)
    return opts.holdback


def _sequencer(node: NodeId, opts: OrderingOptions, *, causal: bool) -> Layer:
    core = Sequencer(node, opts.batch, safe=opts.safe, evs=opts.evs,
                     relay=opts.relay, causal=causal, max_unstable=opts.max_unstable,
                     order_interval_us=round(opts.order_interval_ms * 1000))
    # views are the membership layer's; under evs its partition policy lets every side go
    # on and merges sides on heal (abcast.membership.merge)
    return Membership(node, core, membership_config(opts))


def membership_config(opts: OrderingOptions) -> MembershipConfig:
    """The membership layer's knobs for a group's options: the layer is built with them,
    and the channel's linger under evs follows their probing time (`removed_linger_us`)."""
    return MembershipConfig(partitions=opts.partitions,
                            channel_max_rto_us=opts.channel.max_rto_us)


ORDERINGS: dict[str, OrderingSpec] = {
    spec.name: spec
    for spec in (
        OrderingSpec(
            "unordered", lambda node, _: [Membership(node, Unordered(node))], BASIC,
            ALL_FAULTS, lambda n: n - 1,
            "reliable broadcast, delivered on receipt; views by the membership layer's flush",
            **_MEMBERSHIP,
        ),
        OrderingSpec(
            "fifo", lambda node, opts: [Membership(node, Fifo(node, _fifo_ahead(opts)))],
            (*BASIC, "fifo"), ALL_FAULTS, lambda n: n - 1,
            "per-origin order (holdback by origin sequence number); views by the"
            " membership layer's flush",
            **_MEMBERSHIP,
        ),
        OrderingSpec(
            "causal", lambda node, opts: [Membership(node, Causal(node, **_credit(opts)))],
            (*BASIC, "fifo", "causal"), ALL_FAULTS, lambda n: n - 1,
            "causal order (vector clocks, holdback until every predecessor is delivered);"
            " views by the membership layer's flush",
            **_MEMBERSHIP,
        ),
        OrderingSpec(
            "sequencer",
            lambda node, opts: [_sequencer(node, opts, causal=False)],
            (*BASIC, "fifo", "total"), ALL_FAULTS, lambda n: 2 * (n - 1),
            "total order from a fixed sequencer (data to all, then numbered ids); views by"
            " the membership layer's flush, which settles numbers and bodies (evs: its own"
            " flush and merge); the new view's leader is its sequencer",
            needs_detector=True, supports_safe=True, safe_claims=_SAFE_SEQUENCER,
            channel=OpenChannel, detector_layer=OpenDetector, supports_evs=True,
            supports_relay=True,
        ),
        OrderingSpec(
            "optimistic",
            lambda node, opts: [Membership(node, Sequencer(node, opts.batch, safe=opts.safe,
                                                           optimistic=opts.optimistic,
                                                           max_unstable=opts.max_unstable))],
            (*BASIC, "fifo", "total", "local_order"), ALL_FAULTS, lambda n: 2 * (n - 1),
            "the sequencer's total order, opt-delivered first on receipt after a per-sender"
            " compensation delay (optimistic total order for wide-area groups); views by"
            " the membership layer's flush",
            needs_detector=True, supports_safe=True, safe_claims=_SAFE_SEQUENCER,
            channel=OpenChannel, detector_layer=OpenDetector,
        ),
        OrderingSpec(
            "skeen", lambda node, opts: [Membership(node, Skeen(node, **_credit(opts)))],
            (*BASIC, "total"),
            ALL_FAULTS, lambda n: 3 * (n - 1),
            "total order from Lamport-clock proposals (the final stamp is their maximum);"
            " views by the membership layer's flush, which settles pending timestamps",
            **_MEMBERSHIP,
        ),
        OrderingSpec(
            "causal-total",
            lambda node, opts: [_sequencer(node, opts, causal=True)],
            (*BASIC, "fifo", "causal", "total"), ALL_FAULTS, lambda n: 2 * (n - 1),
            "total order that respects causality (the sequencer numbers in causal order);"
            " views as `sequencer`",
            needs_detector=True, supports_safe=True, safe_claims=_SAFE_SEQUENCER,
            channel=OpenChannel, detector_layer=OpenDetector, supports_evs=True,
            supports_relay=True,
        ),
        OrderingSpec(
            "chandra-toueg", lambda node, opts: [ChandraToueg(node, opts.batch)],
            (*BASIC, "uniform_agreement", "fifo", "total", "virtual_synchrony"), ALL_FAULTS,
            lambda n: 4 * (n - 1),
            "total order by consensus on batches (rotating coordinator, majority quorums);"
            " joins, leaves and removals decided in the same sequence",
            needs_detector=True, channel=OpenChannel, detector_layer=OpenDetector,
        ),
        OrderingSpec(
            "matrix",
            lambda node, opts: [Membership(node, Matrix(node, opts.matrix, **_credit(opts)))],
            (*BASIC, "fifo", "total", "virtual_synchrony"), ALL_FAULTS,
            lambda n: n * (n - 1),
            "total order from Lamport matrix clocks and NOPE heartbeats (RepMI); views by"
            " the membership layer's flush, where a departed member's row leaves the clock",
            periodic=True, **_MEMBERSHIP,
        ),
        OrderingSpec(
            "ticket",
            lambda node, opts: [Ticket(node, TicketConfig(TICKET_NODE if opts.ticket else None))],
            (*BASIC, "fifo", "total"), NETWORK_FAULTS, lambda n: n + 1,
            "total order from a ticket server outside the group (RepMI): the origin asks"
            " it for a number, then sends the numbered body; a member takes over if the"
            " server crashes",
            channel=OpenChannel,
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


def removed_linger_us(opts: OrderingOptions) -> int:
    """How long the open channel keeps the link of a removed member that went silent:
    under evs as long as the group's membership layer probes for it at its fast period,
    and the usual linger after (a side cut off for up to that long merges on heal, links
    whole; one cut off for longer merges over links forgotten and resumed, as the slow
    probes that go on for ever reach it: abcast.membership.discovery); else LINGER_US."""
    if not opts.evs:
        return LINGER_US
    return membership_config(opts).probe_for_us + LINGER_US


def build_stack(
    node: NodeId, group: GroupName, ordering: str, view: View,
    options: OrderingOptions | None = None,
) -> Stack:
    """The standard stack for one group: the channel at the bottom — reliable, or basic
    (best effort) when the group asked for it — under it a failure detector for
    crash-tolerant orderings, the ordering on top."""
    opts = options or OrderingOptions()
    spec = get_ordering(ordering)
    spec.check_options(opts)
    open_group = spec.channel is OpenChannel
    channel = (BasicChannel(node, open_group=open_group, frame_bytes=opts.channel.frame_bytes,
                            reassembly_bytes=opts.channel.reassembly_bytes)
               if opts.multicast == "basic"
               else NakChannel(node, opts.nak, open_group) if opts.multicast == "nak"
               else OpenChannel(node, opts.channel, removed_linger_us=removed_linger_us(opts))
               if spec.channel is OpenChannel
               else spec.channel(node, opts.channel))
    layers: list[Layer] = [channel, *spec.make(node, opts)]
    if isinstance(channel, ReliableChannel | BasicChannel | NakChannel):  # splits large ones
        channel.decode_above([layer.header_type for layer in layers[1:]])
    if spec.needs_detector:
        layers.insert(0, spec.detector_layer(node, opts.detector))
    return Stack(node, group, layers, view)
