"""The membership layer's state: every field the layer keeps, its knobs and timer keys,
and the hooks its parts call across modules.

Rules: declarations only. `MembershipState` is the base of the layer's three parts —
the member's side and the phases (abcast.membership.layer, where the phase table is), the
coordinator's flush (abcast.membership.flush_coordinator) and join, leave and removal
(abcast.membership.join_leave) — so that each part reads and writes the same fields and
calls the others' steps through the abstract hooks below, without importing them.
"""

from __future__ import annotations

from abc import abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from abcast.effects import Effect
from abcast.errors import LocalProtocolError
from abcast.events import Received, TimerFired
from abcast.ids import NodeId, View
from abcast.layer import Layer
from abcast.membership.api import ViewOrdering
from abcast.membership.wire import (
    FlushMessage,
    JoinCut,
    MembershipHeader,
    MInstall,
    MState,
)


def _owes_nothing() -> bool:
    return False


JOIN_RETRY: Final = "m-join-retry"
LEAVE_RETRY: Final = "m-leave-retry"
FAREWELL_WAIT: Final = "m-farewell-wait"
STABLE: Final = "m-stable"
TIMERS: Final = frozenset({JOIN_RETRY, LEAVE_RETRY, FAREWELL_WAIT, STABLE})


@dataclass(frozen=True, slots=True)
class MembershipConfig:
    """Knobs in microseconds (the same defaults as the sequencer family's)."""

    join_retry_us: int = 500_000  # ask the next contact after this long unanswered
    leave_retry_us: int = 500_000  # ask the (maybe new) leader again
    farewell_wait_us: int = 5_000_000  # a leaver waits at most this long for farewells
    #: how often members report what they delivered (stability: the log's garbage)
    stable_period_us: int = 200_000

    def __post_init__(self) -> None:
        if min(self.join_retry_us, self.leave_retry_us, self.farewell_wait_us,
               self.stable_period_us) <= 0:
            raise LocalProtocolError(f"membership knobs must be positive: {self}")


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


@dataclass(frozen=True, slots=True)
class WelcomeDraft:
    """What a coordinator welcomes joiners with, once the snapshot is taken."""

    joiners: tuple[NodeId, ...]
    view: View
    attempt: int
    cut: JoinCut


class MembershipState(Layer):
    """The fields of the membership layer (abcast.membership.layer.Membership)."""

    def __init__(
        self, node: NodeId, ordering: ViewOrdering, config: MembershipConfig | None = None
    ) -> None:
        super().__init__(node)
        self.ordering = ordering
        self.name = ordering.name  # type: ignore[misc]  # the slot keeps the ordering's name
        self.header_type = ordering.header_type | MembershipHeader  # type: ignore[misc]
        self.config = config or MembershipConfig()
        #: an ordering may owe this member its own broadcasts: a leaver asks to leave
        #: only once it owes none (optional `owes_own()`, see abcast.membership.api)
        self._owes_own: Callable[[], bool] = getattr(ordering, "owes_own", _owes_nothing)
        self.view: View | None = None
        self.status = "member"  # member | joining | leaving | departing | stopped
        self.frozen = False
        self.cut_off = False  # the group removed this node (not a graceful leave)
        self._now = 0
        self._suspects: set[NodeId] = set()
        self._buffered: list[Received] = []  # the ordering's packets while frozen/joining
        self._queued: list[tuple[int, bytes]] = []  # broadcasts while frozen/joining
        self._timers: list[TimerFired] = []  # the ordering's timers that fired while frozen
        self._early: list[Received] = []  # prepares for a view beyond the next
        #: prepares from a coordinator some member I trust precedes, by sender
        self._deferred: dict[NodeId, Received] = {}
        self._aborted: set[tuple[NodeId, int, int]] = set()  # aborts ahead of their prepare
        #: non-members whose stale flush messages were reported (one log line each)
        self._stale_from: set[NodeId] = set()
        # the flush, as a member
        self._answered: tuple[int, int] = (0, 0)
        self._answered_for: dict[int, set[int]] = {}
        self._answered_to: NodeId = node
        self._last_install: MInstall | None = None
        # the flush, as coordinator
        self._flush: CoordinatedFlush | None = None
        self._attempts = 0
        self._join_requests: set[NodeId] = set()
        self._leave_requests: set[NodeId] = set()
        self._welcome_next: tuple[NodeId, ...] = ()
        self._drafts: dict[int, WelcomeDraft] = {}
        self._tokens = 0
        # joining
        self._contacts: tuple[NodeId, ...] = ()
        self._contact_index = 0
        self._fresh_for = 0
        self._left_out_of = 0
        self._leave_after_join = False
        # leaving
        self._final_view: View | None = None
        self._awaiting_farewell: set[NodeId] = set()
        # stability: what each member delivered (as acting leader), what we last said
        self._stable_reports: dict[NodeId, dict[NodeId, int]] = {}
        self._stable_said: dict[NodeId, int] | None = None
        self._stable: dict[NodeId, int] = {}
        # counters
        self.views_installed = 0
        self.flushes_coordinated = 0
        self.welcomes_sent = 0

    # -- steps one part of the layer takes and another defines ------------------------------
    @abstractmethod
    def _prior_for(self, coordinator: NodeId) -> int: ...

    @abstractmethod
    def _state(self, target: int, attempt: int, prior: int = 0) -> MState: ...

    @abstractmethod
    def _on_install(self, install: MInstall) -> list[Effect]: ...

    @abstractmethod
    def _adopt(self, view: View) -> list[Effect]: ...

    @abstractmethod
    def _resume(self) -> list[Effect]: ...

    @abstractmethod
    def _unfreeze(self) -> list[Effect]: ...

    @abstractmethod
    def _acting_leader(self, view: View) -> NodeId: ...

    @abstractmethod
    def outcome(self, flush: CoordinatedFlush) -> list[FlushMessage]: ...

    @abstractmethod
    def _change_view(self) -> list[Effect]: ...

    @abstractmethod
    def _depart(self) -> list[Effect]: ...
