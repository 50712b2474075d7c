"""The sequencer family's phases, their transitions, and one node's state.

Rules (h11's `_state.py` manner: the tables are the spec, `go_*` enforces them). A node
has two phases at once, one per axis:

- its role in the group (`Role`): joining → member → leaving → departing → stopped;
- its view's flow (`Flow`): steady (numbering and delivering), flushing (frozen for a
  view change: delivers nothing, numbers nothing, queues its own broadcasts) or merging
  (frozen for an evs merge).

A transition not in the tables is a bug in the core: `LocalProtocolError`. Staying in a
phase is always allowed. What each transition means is docs/orderings.md's; the code that
makes it is named in the table's comment.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final, Protocol

from abcast.errors import ConfigError, LocalProtocolError
from abcast.ids import MsgId, NodeId, View
from abcast.membership.state import MembershipConfig
from abcast.ordering._credit import MAX_UNSTABLE
from abcast.ordering._holdback import CausalHoldback

if TYPE_CHECKING:
    from collections.abc import Mapping

    from abcast.effects import Effect
    from abcast.events import Event, Received
    from abcast.ordering.sequencer_wire import MSide, MState, VcInstall, VcState


class Role(enum.StrEnum):
    JOINING = "joining"
    MEMBER = "member"
    LEAVING = "leaving"
    DEPARTING = "departing"
    STOPPED = "stopped"


class Flow(enum.StrEnum):
    STEADY = "steady"
    FLUSHING = "flushing"
    MERGING = "merging"


#: role → the roles it may go to (and what takes it there: sequencer_join unless named)
ROLE_TRANSITIONS: Final[dict[Role, frozenset[Role]]] = {
    # JoinRequested; LeaveRequested; excluded, or the last to leave
    Role.MEMBER: frozenset({Role.JOINING, Role.LEAVING, Role.STOPPED}),
    # SWelcome
    Role.JOINING: frozenset({Role.MEMBER}),
    # left out by the flush that took its leave; cut off
    Role.LEAVING: frozenset({Role.DEPARTING, Role.STOPPED}),
    # every farewell heard (or waited for long enough)
    Role.DEPARTING: frozenset({Role.STOPPED}),
    Role.STOPPED: frozenset(),
}

#: flow → the flows it may go to
FLOW_TRANSITIONS: Final[dict[Flow, frozenset[Flow]]] = {
    # VcPrepare answered or sent (sequencer_flush), left out (sequencer_join);
    # MPrepare answered or sent (sequencer_merge)
    Flow.STEADY: frozenset({Flow.FLUSHING, Flow.MERGING}),
    # VcInstall or SWelcome
    Flow.FLUSHING: frozenset({Flow.STEADY}),
    # MInstall, or the merge given up (MAbort, timeouts)
    Flow.MERGING: frozenset({Flow.STEADY}),
}


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


@dataclass(frozen=True, slots=True)
class MergeConfig:
    """Knobs in microseconds."""

    probe_us: int = 300_000  # a leader probes the nodes its lineage lost this often
    probe_for_us: int = 60_000_000  # ...for this long after losing them
    timeout_us: int = 3_000_000  # a merge not concluded by then is given up

    def __post_init__(self) -> None:
        if min(self.probe_us, self.probe_for_us, self.timeout_us) <= 0:
            raise LocalProtocolError(f"merge knobs must be positive: {self}")


@dataclass(slots=True)
class FlushRound:
    """The coordinator's side of a view change."""

    target: int
    attempt: int
    members: tuple[NodeId, ...]
    states: dict[NodeId, VcState] = field(default_factory=dict)
    #: members still waiting for their first state (joiners): nothing to report
    fresh: set[NodeId] = field(default_factory=set)

    def complete(self) -> bool:
        return set(self.states) | self.fresh == set(self.members)


@dataclass(frozen=True, slots=True)
class EvsWelcomeDraft:
    """A welcome waiting for its snapshot (the evs engine's; the membership layer has its own
    WelcomeDraft)."""

    joiners: tuple[NodeId, ...]
    view: View
    attempt: int
    first: int
    ids: list[tuple[NodeId, int]]
    bodies: list[tuple[NodeId, int, bytes]]
    per_origin: dict[NodeId, int]
    safe: int


@dataclass(slots=True)
class MergeRound:
    """The merge coordinator's side of a merge."""

    target: int
    attempt: int
    members: tuple[NodeId, ...]
    states: dict[NodeId, MState] = field(default_factory=dict)
    sides: dict[int, MSide] = field(default_factory=dict)  # view id → outcome
    lowest: dict[int, NodeId] = field(default_factory=dict)  # view id → its lowest member
    snapshots: dict[int, bytes] = field(default_factory=dict)  # view id → state after
    per_origin: dict[NodeId, int] = field(default_factory=dict)
    token: int = 0  # the MergeStates token, once asked


class Hub(Protocol):
    """What the helper modules call back on the core (the one place that knows every
    option): a replayed event, and the view-change steps membership and evs add to."""

    def handle(self, event: Event, now: int) -> list[Effect]: ...

    def view_installed(self, old: View, new: View, last_number: int) -> list[Effect]: ...

    def left_out(self, old: View, new: View, last_number: int) -> list[Effect]: ...

    def excluded(self, by: NodeId, view_id: int) -> list[Effect]: ...


class SequencerState:
    """Everything one node of the family knows; the helper modules read and change it,
    the core (abcast.ordering.sequencer) owns it. No behaviour but the phase checks."""

    def __init__(
        self, node: NodeId, hub: Hub, *, batch: int | None, relay: bool, safe: bool,
        evs: bool, causal: bool, stable_period_us: int, membership: MembershipConfig,
        merge: MergeConfig, order_interval_us: int = 0,
        optimistic: OptimisticState | None = None, max_unstable: int = MAX_UNSTABLE,
    ) -> None:
        self.node = node
        self.hub = hub
        # options
        self.batch = batch
        self.relay = relay
        self.safe = safe
        self.evs = evs
        self.causal = causal
        self.stable_period_us = stable_period_us
        self.membership = membership
        self.merge_config = merge
        #: opt-delivery and delay compensation (sequencer_optimistic); None: off
        self.optimistic = optimistic
        # phases
        self.role = Role.MEMBER
        self.flow = Flow.STEADY
        #: the phases as the hot path reads them, kept by `go_role`/`go_flow` (a plain
        #: attribute: an Enum member lookup costs ~0.17 µs on CPython 3.11, several a frame)
        self.steady = True  # flow is STEADY
        self.steady_member = True  # ...and role is MEMBER
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
        #: under the membership layer: the last number its latest flush (or the cut it
        #: joined at) fixed; the view's sequencer numbers on after it
        self.settled_through = 0
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
        # stability and SAFE (sequencer_flush)
        self.reports: dict[NodeId, int] = {}
        self.reported = 0
        self.stable = 0
        self.timer_armed = False
        self.holds: dict[NodeId, int] = {}
        self.acked = 0
        self.safe_upto = 0
        # the flush (sequencer_flush)
        self.suspects: set[NodeId] = set()
        self.queued: list[tuple[int, bytes]] = []  # own broadcasts while frozen
        self.early: list[Received] = []  # packets for the view being installed
        self.answered: tuple[int, int] = (0, 0)  # (target, attempt) last answered
        #: target → the attempts answered for it: a flush may conclude after this member
        #: answered a later one (its VcInstall overtaken by the next VcPrepare, or its
        #: coordinator crashed and the VcInstall comes from a member that has it)
        self.answered_for: dict[int, set[int]] = {}
        self.answered_to: NodeId = node  # the coordinator of that attempt
        self.last_install: VcInstall | None = None  # the one that made our view
        self.flush: FlushRound | None = None
        self.attempts = 0
        # join and leave (sequencer_join)
        self.contacts: tuple[NodeId, ...] = ()
        self.contact_index = 0
        self.buffered: list[Received] = []  # while joining: packets of the view to come
        self.fresh_for = 0  # the latest flush told (SNotYet) that we have no state yet
        #: the latest view we know the group installed without us: a welcome into it or
        #: an older one is stale (it was retransmitted across a partition that healed)
        self.left_out_of = 0
        self.leave_after_join = False
        self.leave_asked = False  # leaving: SLeave sent (own broadcasts all delivered)
        self.join_requests: set[NodeId] = set()
        self.leave_requests: set[NodeId] = set()
        self.welcome_next: tuple[NodeId, ...] = ()
        self.drafts: dict[int, EvsWelcomeDraft] = {}
        self.tokens = 0
        self.final_view: View | None = None
        self.awaiting_farewell: set[NodeId] = set()
        self.welcomes_sent = 0
        # the evs merge (sequencer_merge)
        self.lost: dict[NodeId, int] = {}  # node our views left out → when
        self.probe_armed = False
        self.probe_answered: dict[NodeId, int] = {}  # leader → when we answered its probe
        self.merge: MergeRound | None = None  # coordinating
        self.merging: tuple[int, int, NodeId] | None = None  # answered (target, attempt, by)
        self.merge_view = 0  # our view id when we answered
        self.outcome_tokens: dict[int, tuple[int, int, int, NodeId]] = {}
        self.deferred: list[Received] = []  # flush prepares heard while merging
        #: merges given up that we may still be asked to join (packets cross)
        self.aborted: set[tuple[NodeId, int, int]] = set()
        self.merges = 0

    # -- phases ----------------------------------------------------------------------------
    @property
    def frozen(self) -> bool:
        return not self.steady

    @property
    def stopped(self) -> bool:
        return self.role is Role.STOPPED

    def go_role(self, role: Role) -> None:
        if role is not self.role and role not in ROLE_TRANSITIONS[self.role]:
            raise LocalProtocolError(
                f"sequencer on {self.node}: no transition {self.role.value} → {role.value}")
        self.role = role
        self.steady_member = self.steady and role is Role.MEMBER

    def go_flow(self, flow: Flow) -> None:
        if flow is not self.flow and flow not in FLOW_TRANSITIONS[self.flow]:
            raise LocalProtocolError(
                f"sequencer on {self.node}: no transition {self.flow.value} → {flow.value}")
        self.flow = flow
        self.steady = steady = flow is Flow.STEADY
        self.steady_member = steady and self.role is Role.MEMBER

    def delivered_through(self) -> int:
        """The highest global number delivered here."""
        return self.next_delivery - 1
