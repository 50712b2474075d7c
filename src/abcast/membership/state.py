"""The membership layer's state: every field the layer keeps, its knobs and timer keys,
and the hooks its parts call across modules.

Rules: declarations only. The layer (abcast.membership.layer, where the phase table is)
owns one `MembershipState` and the parts that take it explicitly: the member's and the
coordinator's side of the flush (abcast.membership.flush_member,
abcast.membership.flush_coordinator), join, leave and removal
(abcast.membership.join_leave), stability (abcast.membership.stability) and the evs merge
(abcast.membership.merge). Each part reads and writes the same fields and calls the
member's steps through `MemberSteps` (the layer), without importing the others.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final, Protocol, TypeVar

from abcast.effects import Effect, SetTimer
from abcast.errors import ConfigError, LocalProtocolError
from abcast.events import Received, TimerFired
from abcast.ids import NodeId, View
from abcast.membership.api import ViewOrdering
from abcast.membership.contacts import JoinContacts
from abcast.membership.wire import (
    FlushMessage,
    JoinCut,
    MInstall,
    MMergeAbort,
    MMergeState,
    MPrepare,
    MState,
    SideOutcome,
)


def _owes_nothing() -> bool:
    return False


JOIN_RETRY: Final = "m-join-retry"
LEAVE_RETRY: Final = "m-leave-retry"
FAREWELL_WAIT: Final = "m-farewell-wait"
STABLE: Final = "m-stable"
MERGE_PROBE: Final = "m-merge-probe"
MERGE_TIMEOUT: Final = "m-merge-timeout"
MERGE_WAIT: Final = "m-merge-wait"
TIMERS: Final = frozenset({JOIN_RETRY, LEAVE_RETRY, FAREWELL_WAIT, STABLE, MERGE_PROBE,
                           MERGE_TIMEOUT, MERGE_WAIT})
#: the partition policies: "primary" (only a side that hears a majority of its view goes
#: on) and "evs" (every side goes on in its own view; sides merge when they meet again)
PARTITIONS: Final = ("primary", "evs")
#: evs: the retransmissions of one packet a member's merge wait outlasts past the merge's
#: time limit (abcast.membership.merge: the install may be sent just before it)
MERGE_RETRANSMISSIONS: Final = 2
#: evs: the merge aborts heard ahead of their prepare and the probes answered a member
#: keeps at most (the oldest go first; each also expires: abcast.membership.merge)
MAX_MERGE_NOTES: Final = 64
#: evs: the nodes a member remembers its lineage lost, probed for ever (the longest lost
#: forgotten first: abcast.membership.discovery)
MAX_LOST: Final = 256
#: packets for a view beyond ours (flush prepares, refusals) a member keeps until it
#: installs a view: the newest of each sender and kind, at most this many in all
MAX_EARLY: Final = 64
#: join asks the acting leader holds for the next view; more are dropped (counted) and
#: come back with the joiner's retry: a member forwarding asks for strangers cannot grow
#: the leader's state (issue #21). The open channel's bound on strangers, MAX_GUESTS.
MAX_PENDING_JOINS: Final = 1_024


@dataclass(frozen=True, slots=True)
class MembershipConfig:
    """Knobs in microseconds (the same defaults as the sequencer family's)."""

    join_retry_us: int = 500_000  # ask the next contact after this long unanswered
    leave_retry_us: int = 500_000  # ask the (maybe new) leader again
    farewell_wait_us: int = 5_000_000  # a leaver waits at most this long for farewells
    #: how often members report what they delivered (stability: the log's garbage)
    stable_period_us: int = 200_000
    partitions: str = "primary"  # or "evs" (PARTITIONS)
    probe_us: int = 300_000  # evs: a coordinator probes the nodes its lineage lost this often
    probe_for_us: int = 60_000_000  # ...for this long after losing them
    #: ...and then this often, for ever: longer than the open channel's guest linger
    #: (LINGER_US, 10 s), so a node that does not answer holds one probe at a time
    #: (abcast.membership.discovery)
    probe_slow_us: int = 15_000_000
    merge_timeout_us: int = 3_000_000  # a merge not concluded by then is given up
    #: the channel's largest retransmission timeout (`ChannelConfig.max_rto_us`; the
    #: registry passes it): a packet its sender sent once may come that much later, per
    #: retransmission
    channel_max_rto_us: int = 1_000_000
    #: evs: how long a member that answered a merge waits for its install or abort before
    #: it thaws; 0 derives it (`merge_wait`), and a set one must be at least that
    merge_wait_us: int = 0
    #: how long a member takes a withdrawn join's asks for stale: the joiner's stack
    #: retransmits them until it detaches (the runtime waits at most 2 s)
    withdraw_memory_us: int = 10_000_000

    def __post_init__(self) -> None:
        if min(self.join_retry_us, self.leave_retry_us, self.farewell_wait_us,
               self.stable_period_us, self.probe_us, self.probe_for_us,
               self.probe_slow_us, self.merge_timeout_us, self.channel_max_rto_us,
               self.withdraw_memory_us) <= 0 or self.merge_wait_us < 0:
            raise LocalProtocolError(f"membership knobs must be positive: {self}")
        if self.probe_slow_us < self.probe_us:
            raise LocalProtocolError(f"probe_slow_us ({self.probe_slow_us}) must be at least "
                                     f"probe_us ({self.probe_us})")
        if self.partitions not in PARTITIONS:
            raise LocalProtocolError(
                f"partitions must be one of {', '.join(PARTITIONS)}: {self.partitions!r}")
        if self.merge_wait_us and self.merge_wait_us < self.least_merge_wait:
            raise ConfigError(
                f"merge_wait_us={self.merge_wait_us} is shorter than the merge's time limit "
                f"({self.merge_timeout_us}) plus {MERGE_RETRANSMISSIONS} of the channel's "
                f"retransmission timeouts ({self.channel_max_rto_us}): an install sent in "
                f"time could reach a member that gave up; give at least {self.least_merge_wait}")

    @property
    def evs(self) -> bool:
        return self.partitions == "evs"

    @property
    def least_merge_wait(self) -> int:
        """The shortest merge wait that outlasts an install its coordinator sent just
        within its time limit and the channel retransmitted `MERGE_RETRANSMISSIONS` times."""
        return self.merge_timeout_us + MERGE_RETRANSMISSIONS * self.channel_max_rto_us

    @property
    def merge_wait(self) -> int:
        """A member's wait for the merge it answered (`merge_wait_us`, or derived: at
        least `least_merge_wait`, and twice the merge's time limit)."""
        return self.merge_wait_us or max(2 * self.merge_timeout_us, self.least_merge_wait)


@dataclass(slots=True)
class CoordinatedFlush:
    """The coordinator's side of a view change."""

    target: int
    attempt: int
    members: tuple[NodeId, ...]
    states: dict[NodeId, MState] = field(default_factory=dict)
    fresh: set[NodeId] = field(default_factory=set)  # joiners with nothing to report

    def complete(self) -> bool:
        return set(self.states) | self.fresh == set(self.members)


@dataclass(slots=True)
class MergeRound:
    """The merge coordinator's side of a merge (evs): every member's state, then each
    side's outcome, its lowest member's snapshot after it, and the merged state."""

    target: int
    attempt: int
    members: tuple[NodeId, ...]
    #: the view id of the other side, as the probe that started the merge named it
    probed: int = 0
    states: dict[NodeId, MMergeState] = field(default_factory=dict)
    sides: dict[int, SideOutcome] = field(default_factory=dict)  # by the side's view id
    lowest: dict[int, NodeId] = field(default_factory=dict)
    snapshots: dict[int, bytes] = field(default_factory=dict)
    cut: JoinCut | None = None
    token: int = 0


@dataclass(frozen=True, slots=True)
class WelcomeDraft:
    """What a coordinator welcomes joiners with, once the snapshot is taken."""

    joiners: tuple[NodeId, ...]
    view: View
    attempt: int
    cut: JoinCut


class MemberSteps(Protocol):
    """The member's steps the layer's parts call (abcast.membership.layer.Membership)."""

    def prior_for(self, coordinator: NodeId) -> int: ...

    def state_for(self, target: int, attempt: int, prior: int = 0) -> MState: ...

    def on_install(self, install: MInstall) -> list[Effect]: ...

    def adopt(self, view: View, fresh: tuple[NodeId, ...] = ()) -> list[Effect]: ...

    def resume(self) -> list[Effect]: ...

    def unfreeze(self) -> list[Effect]: ...

    def release(self, coordinator: NodeId, target: int, attempt: int) -> None: ...

    def acting_leader(self, view: View) -> NodeId: ...

    def settled(self, flush: CoordinatedFlush) -> tuple[list[FlushMessage], int]: ...

    def change_view(self) -> list[Effect]: ...

    def depart(self) -> list[Effect]: ...

    def replay(self, event: Received) -> list[Effect]: ...

    def recheck(self) -> list[Effect]: ...

    def go_on_without(self, by: NodeId, in_view: int = 0) -> list[Effect]: ...


class Part:
    """What every part of the membership layer holds (the flush's two sides, joins and
    leaves, merges, stability): the layer's state `s`, which it reads and writes, and
    the member's steps it takes (`member`, the layer itself)."""

    def __init__(self, s: MembershipState, member: MemberSteps) -> None:
        self.s = s
        self.member = member


class MembershipState:
    """Every field of the membership layer; the layer owns one and hands it to its
    parts (no behaviour here)."""

    __slots__ = (
        "aborted", "admitted_in", "answered", "answered_for", "answered_to", "ask", "attempts",
        "awaiting_farewell", "buffered", "config", "contacts", "cut_off", "deferred", "drafts",
        "early", "final_view", "flush", "flushes_coordinated", "fresh_for", "frozen",
        "join_requests", "joins_deferred", "last_install", "leave_after_join", "leave_requests",
        "left_out_of", "lost", "lower_probes", "merge", "merge_aborted", "merge_deferred",
        "merge_given_up", "merge_installs_late", "merge_view", "merges", "merges_coordinated",
        "merges_given_up", "merging", "node", "now", "ordering", "owes_own", "pledged", "prepared",
        "probe_answered", "probe_at", "queued", "seen_in", "side_delivered", "side_kept",
        "side_to_pass", "side_tokens", "slow_probe_at", "stable", "stable_reports", "stable_said",
        "stale_from", "status", "suspects", "thawed_at", "timers", "tokens", "view",
        "views_installed", "welcome_next", "welcomes_sent", "withdrawals_refused", "withdrawn",
        "withdrawn_asks",
    )

    def __init__(
        self, node: NodeId, ordering: ViewOrdering, config: MembershipConfig | None = None
    ) -> None:
        self.node = node
        self.ordering = ordering
        self.config = config or MembershipConfig()
        #: an ordering may owe this member its own broadcasts: a leaver asks to leave
        #: only once it owes none (optional `owes_own()`, see abcast.membership.api)
        self.owes_own: Callable[[], bool] = getattr(ordering, "owes_own", _owes_nothing)
        self.view: View | None = None
        self.status = "member"  # member | joining | leaving | departing | stopped
        self.frozen = False
        self.cut_off = False  # the group removed this node (not a graceful leave)
        self.now = 0
        self.suspects: set[NodeId] = set()
        self.buffered: list[Received] = []  # the ordering's packets while frozen/joining
        self.queued: list[tuple[int, bytes]] = []  # broadcasts while frozen/joining
        self.timers: list[TimerFired] = []  # the ordering's timers that fired while frozen
        #: prepares and refusals for a view beyond ours, by (sender, kind): keep_early
        self.early: dict[tuple[NodeId, str], tuple[tuple[int, int], Received]] = {}
        #: member of our view → the id of our view that admitted it (joined or merged in)
        self.admitted_in: dict[NodeId, int] = {}
        self.withdrawals_refused = 0  # MWithdraw from a first-view member (on_withdraw)
        #: prepares from a coordinator some member I trust precedes, by sender
        self.deferred: dict[NodeId, Received] = {}
        self.aborted: set[tuple[NodeId, int, int]] = set()  # aborts ahead of their prepare
        #: non-members whose stale flush messages were reported (one log line each)
        self.stale_from: set[NodeId] = set()
        # the flush, as a member
        self.answered: tuple[int, int] = (0, 0)
        self.answered_for: dict[int, set[int]] = {}
        self.answered_to: NodeId = node
        #: the flushes we gave our state to, (coordinator, target, attempt), that may
        #: have installed a view with it: none given up (its abort), superseded (a later
        #: attempt of that coordinator for that target or a lower one) or settled (a view
        #: installed). While one is open, another's abort does not unfreeze us (`pledge`)
        self.pledged: set[tuple[NodeId, int, int]] = set()
        self.last_install: MInstall | None = None
        # the flush, as coordinator
        self.flush: CoordinatedFlush | None = None
        self.attempts = 0
        self.join_requests: set[NodeId] = set()
        self.leave_requests: set[NodeId] = set()
        self.welcome_next: tuple[NodeId, ...] = ()
        self.drafts: dict[int, WelcomeDraft] = {}
        self.tokens = 0
        # joining
        self.contacts: JoinContacts | None = None
        self.fresh_for = 0
        self.left_out_of = 0
        self.leave_after_join = False
        #: members of our view that withdrew their join (`MWithdraw`): suspected, and
        #: left out of the majority a flush needs (they answer nothing); kept while
        #: a view of ours lists them
        self.withdrawn: dict[NodeId, None] = {}
        #: joins given up (`MWithdraw`): node -> (its ask, when heard); an ask no later
        #: than that one, within `withdraw_memory_us`, is a retransmission of the old
        #: stack's (at most MAX_PENDING_JOINS, the oldest forgotten first)
        self.withdrawn_asks: dict[NodeId, tuple[int, int]] = {}
        self.ask = 0  # this joiner's own ask (its clock when it asked)
        # leaving
        self.final_view: View | None = None
        self.awaiting_farewell: set[NodeId] = set()
        # stability: what each member delivered (as acting leader), what we last said
        self.stable_reports: dict[NodeId, dict[NodeId, int]] = {}
        self.stable_said: dict[NodeId, int] | None = None
        self.stable: dict[NodeId, int] = {}
        # counters
        self.views_installed = 0
        self.flushes_coordinated = 0
        self.welcomes_sent = 0
        self.joins_deferred = 0  # asks dropped at MAX_PENDING_JOINS (the joiner retries)
        # evs: discovery (abcast.membership.discovery) and the merge (.merge)
        #: node our views left out → when (or when its side last probed us); MAX_LOST
        self.lost: dict[NodeId, int] = {}
        self.probe_at: int | None = None  # when the probe timer is armed for
        self.slow_probe_at = 0  # when the nodes lost over `probe_for_us` ago are next due
        #: the last flush we gave our state to, as member or coordinator: (target,
        #: attempt, its members). Its install installs all of them but the leavers: a
        #: member it leaves out answered it, and left gracefully (nobody probes it)
        self.prepared: tuple[int, int, tuple[NodeId, ...]] = (0, 0, ())
        #: coordinator → when we answered its probe (within `probe_us`; MAX_MERGE_NOTES)
        self.probe_answered: dict[NodeId, int] = {}
        #: the lowest node of a side that probed us, lower than us → when (MAX_MERGE_NOTES)
        self.lower_probes: dict[NodeId, int] = {}
        self.merge: MergeRound | None = None  # coordinating
        self.merging: tuple[int, int, NodeId] | None = None  # answered (target, attempt, by)
        self.merge_view = 0  # our view id when we answered
        self.side_delivered = False  # we delivered our side's outcome (its lowest member)
        #: the merge (target, attempt) whose side outcome we delivered, once
        self.side_kept: tuple[int, int] | None = None
        #: the lowest member's side outcome, passed on to its side should the merge be off
        self.side_to_pass: MMergeAbort | None = None
        #: snapshot tokens of a side's outcome: (target, attempt, side view id, coordinator)
        self.side_tokens: dict[int, tuple[int, int, int, NodeId]] = {}
        #: flush prepares heard while merging, and merge prepares (the newest of each
        #: coordinator) heard while answering another merge, with when each was heard
        self.merge_deferred: list[tuple[int, Received]] = []
        #: node of another side → the latest view id it was heard to be in (probes,
        #: merge states, declines; a node's view ids only grow; MAX_MERGE_NOTES)
        self.seen_in: dict[NodeId, int] = {}
        #: the last merge we answered and gave up on (its install may still come)
        self.merge_given_up: tuple[int, int, NodeId] | None = None
        #: what the ordering had delivered when we gave that merge up (stable_point)
        self.thawed_at: dict[NodeId, int] = {}
        #: merges given up that we may still be asked to join (packets cross), oldest
        #: first: at most MAX_MERGE_NOTES, none for a view id we are past
        self.merge_aborted: dict[tuple[NodeId, int, int], None] = {}
        self.merges = 0  # merge views installed
        self.merges_coordinated = 0  # merges this member started
        self.merges_given_up = 0  # merges answered or started that ended without a view
        self.merge_installs_late = 0  # installs that came after we gave their merge up


_K = TypeVar("_K")
_V = TypeVar("_V")


def note(notes: dict[_K, _V], key: _K, value: _V, cap: int = MAX_MERGE_NOTES) -> None:
    """Keep `key` in `notes`, the newest, dropping the oldest past `cap`."""
    notes.pop(key, None)
    notes[key] = value
    while len(notes) > cap:
        del notes[next(iter(notes))]


def keep_early(s: MembershipState, event: Received, rank: tuple[int, int]) -> None:
    """Keep a packet for a view beyond ours, replayed once we install a view
    (abcast.membership.layer's `adopt`): of each sender and kind only the newest by
    `rank` (target, attempt), MAX_EARLY in all. Full, the oldest of the least vouched
    for goes (`_vouched`), never for one vouched for less: a peer cannot grow it at will,
    a retransmission come late replaces nothing, and strangers, however many, push out
    only one another. A prepare that leaves us out is never answered: not kept."""
    if isinstance(event.header, MPrepare) and s.node not in event.header.members:
        return
    key = (event.sender, type(event.header).__name__)
    kept = s.early.get(key)
    if kept is not None and kept[0] >= rank:
        return
    s.early.pop(key, None)
    if len(s.early) >= MAX_EARLY:
        weakest = min(s.early, key=lambda k: _vouched(s, s.early[k][1]))
        if _vouched(s, s.early[weakest][1]) > _vouched(s, event):
            return
        del s.early[weakest]
    s.early[key] = (rank, event)


def _vouched(s: MembershipState, event: Received) -> tuple[bool, int]:
    """How much our view vouches for a kept packet: it comes from a member, or names
    that many members (a flush prepare of the next view's coordinator, a joiner that
    view admitted, names every member of ours that goes on). Nothing is authenticated:
    a stranger naming them all ranks with it (docs/orderings.md, "Not handled")."""
    members = s.view.members if s.view is not None else ()
    named = event.header.members if isinstance(event.header, MPrepare) else ()
    return event.sender in members, sum(m in named for m in members)


def arm_probe(s: MembershipState) -> list[Effect]:
    """evs: the merge probe's timer (abcast.membership.discovery), unless nobody is lost
    or it is armed no later than due: in `probe_us` while a node was lost within
    `probe_for_us`, else at the next slow round. Discovery arms it as views lose members
    and sides are heard from, a joiner as it is welcomed (its contacts that view lacks)."""
    if not s.lost:
        return []
    due = s.now + s.config.probe_us
    if max(s.lost.values()) < s.now - s.config.probe_for_us:
        due = max(due, s.slow_probe_at)
    if s.probe_at is not None and s.probe_at <= due:
        return []
    s.probe_at = due
    return [SetTimer(MERGE_PROBE, due)]
