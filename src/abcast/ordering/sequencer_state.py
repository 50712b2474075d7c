"""One node's state in the sequencer family, and the optimistic option's knobs and state.

Rules: declarations only. The core (abcast.ordering.sequencer) owns one `SequencerState`;
its helper modules (sequencer_numbering, sequencer_view, sequencer_optimistic) read and
change it. The family has no phases of its own: views, the flush that freezes a member,
joins, leaves and the evs merge are the membership layer's (abcast.membership.layer has
the phase table).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from abcast.errors import ConfigError
from abcast.ids import MsgId, NodeId, View
from abcast.ordering._credit import MAX_UNSTABLE
from abcast.ordering._holdback import CausalHoldback

if TYPE_CHECKING:
    from collections.abc import Mapping


@dataclass(frozen=True, slots=True)
class OptimisticConfig:
    """Optimistic delivery (sequencer_optimistic): `alpha` is the compensation's inertia
    (0 ≤ α < 1: the share of the old delay kept per correction); `compensate=False`
    opt-delivers in receipt order (the baseline)."""

    alpha: float = 0.8
    compensate: bool = True

    def __post_init__(self) -> None:
        if not 0.0 <= self.alpha < 1.0:
            raise ConfigError(f"optimistic alpha must be in [0, 1), got {self.alpha}")


@dataclass(slots=True)
class OptimisticState:
    """One node's optimistic side: the delays and what waits for its opt-delivery."""

    config: OptimisticConfig
    delay: dict[NodeId, float] = field(default_factory=dict)
    received: dict[MsgId, int] = field(default_factory=dict)  # receipt time, until final
    held: dict[MsgId, bytes] = field(default_factory=dict)  # opt-delivery not yet due
    due: list[tuple[int, NodeId, int]] = field(default_factory=list)  # heap, lazily kept
    opted: set[MsgId] = field(default_factory=set)  # opt-delivered, not final yet
    last: tuple[NodeId, int, float] | None = None  # previous final: origin, time, opt time
    requests: dict[NodeId, int] = field(default_factory=dict)  # sequencer: suggestions
    own: list[tuple[int, int]] = field(default_factory=list)  # sequencer: (due, seq) FIFO
    armed: int | None = None  # when OPT_TIMER fires
    opt_deliveries: int = 0
    corrections: int = 0
    #: nesting of the core's handle (a flush replays events through it): the effects
    #: are scanned once, at the outermost level
    depth: int = 0


class SequencerState:
    """Everything one node of the family knows; the helper modules read and change it,
    the core (abcast.ordering.sequencer) owns it. No behaviour."""

    __slots__ = (
        "acked", "admission", "batch", "bodies", "causal", "delivered", "deps_of", "evs", "holds",
        "interval_armed", "interval_ids", "log", "max_unstable", "next_delivery", "next_number",
        "node", "now", "numbers", "optimistic", "order_interval_us", "order_packets", "others",
        "relay", "reported", "resend", "safe", "safe_upto", "sent", "settled_through", "stable",
        "stable_period_us", "view",
    )

    def __init__(
        self, node: NodeId, *, batch: int | None, relay: bool, safe: bool, evs: bool,
        causal: bool, stable_period_us: int, order_interval_us: int = 0,
        optimistic: OptimisticState | None = None, max_unstable: int = MAX_UNSTABLE,
    ) -> None:
        self.node = node
        # options
        self.batch = batch
        self.relay = relay
        self.safe = safe
        self.evs = evs
        self.causal = causal
        self.stable_period_us = stable_period_us
        #: opt-delivery and delay compensation (sequencer_optimistic); None: off
        self.optimistic = optimistic
        self.now = 0
        # steady state (sequencer_numbering): what this node knows, not delivered yet
        self.view: View | None = None
        self.others: tuple[NodeId, ...] = ()
        self.bodies: dict[MsgId, bytes] = {}
        self.numbers: dict[int, MsgId] = {}
        self.next_delivery = 1
        self.delivered: dict[NodeId, int] = {}  # per origin; FIFO makes it a prefix
        self.admission: CausalHoldback[None] = CausalHoldback()  # the sequencer's
        self.next_number = 1
        #: the last number its latest flush (or the cut it joined or merged at) fixed; the
        #: view's sequencer numbers on after it
        self.settled_through = 0
        #: evs: our own bodies a merge left undelivered, sent again in the merge view
        self.resend: list[tuple[int, bytes]] = []
        self.log: dict[int, tuple[MsgId, bytes]] = {}  # delivered, not yet stable
        self.deps_of: dict[MsgId, Mapping[NodeId, int]] = {}
        self.order_packets = 0
        # the order interval (sequencer_numbering): admitted ids waiting for its end
        self.order_interval_us = order_interval_us  # 0: number on admission
        self.interval_ids: list[tuple[NodeId, int]] = []
        self.interval_armed = False
        # flow control (sequencer_numbering): numbers past the stable point, own sends
        if max_unstable < 1:
            raise ConfigError(f"max_unstable must be at least 1, not {max_unstable}")
        self.max_unstable = max_unstable
        self.sent = 0  # the seq of our last broadcast sent
        # stability (the membership layer's `forget`) and SAFE (sequencer_view)
        self.reported = 0
        self.stable = 0
        self.holds: dict[NodeId, int] = {}
        self.acked = 0
        self.safe_upto = 0

    def delivered_through(self) -> int:
        """The highest global number delivered here."""
        return self.next_delivery - 1
