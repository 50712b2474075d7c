"""Reply voting: a client consolidates the replicas' replies to one request into an Outcome.

Sans-IO and clock-free: a `Ballot` is fed replies, views and the deadline (the caller's
timer) and says when the request is decided. It knows nothing of transports or groups.

The phases (one ballot per request; every terminal phase ignores further input):

    phase    | input                                   | next
    ---------+-----------------------------------------+-------------------------------
    WAITING  | reply from a target, not seen before    | rules below, else WAITING
    WAITING  | reply from a non-target / seen server   | WAITING (counted in `ignored`)
    WAITING  | view(members)                           | targets shrink; rules below
    WAITING  | deadline, no reply                      | TIMEOUT
    WAITING  | deadline, some replies                  | NO_QUORUM
    any end  | anything                                | unchanged (late replies counted)

Rules, checked after every reply and view, first match wins:
1. the consistency rule can no longer hold whatever comes (all_same: two values differ;
   all_different: a value repeats; majority_same: no value can reach a majority of the
   live targets)                                                → INCONSISTENT
2. counted replies ≥ needed and the consistency rule holds       → OK
3. counted replies + live targets not yet heard from < needed, or
   no live target is left                                        → MEMBERS_LOST

`needed` is recomputed from the live targets (the request's targets that the latest view
still holds): first 1, all n, majority n//2+1, quorum(k) k, percent(p) ⌈p·n/100⌉ (at
least 1). A vote relative to n (all, majority, percent) is taken over the live targets
alone: only their replies count toward `needed` (`counted`), so a reply from a server
that left the view — before or after it answered — stands in for no live one, and
percent(100) is all. An absolute vote (first, quorum(k)) counts every target's reply:
k servers answered, whoever has left since. A departed target's reply still shows in
the outcome and still counts for all_same/all_different (it answered before it went),
but not for majority_same: its value must be held by more than half of the live
targets, counting the live targets' replies only (n live: n//2+1 equal replies among
them). The consolidated value: that value for majority_same, otherwise the first counted
reply's.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Final

from abcast.errors import ConfigError
from abcast.ids import NodeId

VOTES: Final = ("first", "all", "majority", "quorum(k)", "percent(p)")
CONSISTENCIES: Final = ("any", "all_same", "majority_same", "all_different")

_PARAM = re.compile(r"^(quorum|percent)\(\s*([0-9.]+)\s*\)$")


class Status(enum.StrEnum):
    WAITING = "WAITING"
    OK = "OK"
    TIMEOUT = "TIMEOUT"
    NO_QUORUM = "NO_QUORUM"
    INCONSISTENT = "INCONSISTENT"
    MEMBERS_LOST = "MEMBERS_LOST"


@dataclass(frozen=True, slots=True)
class Vote:
    """How many replies a request needs: `Vote.parse("quorum(2)")`, or `Vote("quorum", 2)`
    (checked alike: ConfigError)."""

    kind: str  # first | all | majority | quorum | percent
    param: float = 0.0  # k for quorum, p for percent

    def __post_init__(self) -> None:
        if self.kind in ("first", "all", "majority"):
            if self.param != 0:
                raise ConfigError(f"vote {self.kind!r} takes no parameter, got {self.param!r}")
        elif self.kind == "quorum":
            if not (math.isfinite(self.param) and self.param >= 1
                    and self.param == int(self.param)):
                raise ConfigError(f"vote quorum({self.param:g}): quorum(k) needs a whole k >= 1")
        elif self.kind == "percent":
            if not 0 < self.param <= 100:
                raise ConfigError(f"vote percent({self.param:g}): percent(p) needs 0 < p <= 100")
        else:
            raise ConfigError(f"unknown vote {self.kind!r}; choose one of: {', '.join(VOTES)}")

    @classmethod
    def parse(cls, text: str | Vote) -> Vote:
        if isinstance(text, Vote):
            return text
        name = text.strip().lower()
        if name in ("first", "all", "majority"):
            return cls(name)
        match = _PARAM.match(name)
        if match is None:
            raise ConfigError(f"unknown vote {text!r}; choose one of: {', '.join(VOTES)}")
        kind, raw = match.groups()
        try:
            value = float(raw)
        except ValueError:
            raise ConfigError(f"vote {text!r}: {raw!r} is not a number") from None
        return cls(kind, value)

    @property
    def relative(self) -> bool:
        """Whether `needed` depends on n (all, majority, percent): such a vote counts the
        live targets' replies only (abcast.rpc.voting's rules)."""
        return self.kind in ("all", "majority", "percent")

    def needed(self, n: int) -> int:
        """Replies needed out of `n` live targets."""
        if self.kind == "first":
            return 1
        if self.kind == "quorum":
            return int(self.param)
        if self.kind == "majority":
            return n // 2 + 1
        if self.kind == "percent":
            return max(1, math.ceil(self.param * n / 100 - 1e-9))
        return max(1, n)  # all

    def check_targets(self, n: int) -> None:
        """ConfigError if this vote can never be met by `n` servers (the caller's check:
        a ballot whose live targets fell below quorum(k) ends MEMBERS_LOST instead)."""
        if self.kind == "quorum" and int(self.param) > n:
            raise ConfigError(f"quorum({int(self.param)}) needs more servers than the "
                              f"{n} the request goes to")

    def __str__(self) -> str:
        if self.kind == "quorum":
            return f"quorum({int(self.param)})"
        if self.kind == "percent":
            return f"percent({self.param:g})"
        return self.kind


def parse_consistency(text: str) -> str:
    name = text.strip().lower().replace("-", "_")
    if name not in CONSISTENCIES:
        raise ConfigError(f"unknown consistency {text!r}; choose one of: "
                          f"{', '.join(CONSISTENCIES)}")
    return name


@dataclass(frozen=True, slots=True)
class Reply:
    """One server's answer: `ok` False when its handler raised (value: the error text)."""

    server: NodeId
    value: bytes
    ok: bool = True


@dataclass(frozen=True, slots=True)
class Outcome:
    status: Status
    value: bytes | None
    replies: tuple[Reply, ...]

    @property
    def ok(self) -> bool:
        return self.status is Status.OK

    @property
    def failed(self) -> bool:
        """The consolidated reply is a handler error (status OK, the value its text)."""
        return any(r.value == self.value and not r.ok for r in self.replies)


@dataclass(slots=True)
class Ballot:
    """One request's vote; see the module rules."""

    vote: Vote
    consistency: str
    targets: frozenset[NodeId]
    live: set[NodeId] = field(init=False)
    replies: list[Reply] = field(default_factory=list)
    status: Status = Status.WAITING
    value: bytes | None = None
    ignored_duplicate: int = 0
    ignored_foreign: int = 0
    late: int = 0

    def __post_init__(self) -> None:
        if not self.targets:
            raise ConfigError("a request needs at least one target server")
        self.consistency = parse_consistency(self.consistency)
        self.live = set(self.targets)

    @property
    def decided(self) -> bool:
        return self.status is not Status.WAITING

    @property
    def needed(self) -> int:
        return self.vote.needed(len(self.live))

    def counts(self, reply: Reply) -> bool:
        """Whether `reply` counts toward `needed`: every target's for first and quorum(k),
        only a live target's for all, majority and percent (the vote is over the live)."""
        return not self.vote.relative or reply.server in self.live

    @property
    def counted(self) -> int:
        """The replies that count toward `needed` (`counts`)."""
        return sum(1 for r in self.replies if self.counts(r))

    def outcome(self) -> Outcome:
        return Outcome(self.status, self.value, tuple(self.replies))

    def on_reply(self, reply: Reply) -> Status:
        if self.decided:
            self.late += 1
            return self.status
        if reply.server not in self.targets:
            self.ignored_foreign += 1
            return self.status
        if any(r.server == reply.server for r in self.replies):
            self.ignored_duplicate += 1
            return self.status
        self.replies.append(reply)
        return self._judge()

    def on_view(self, members: Iterable[NodeId]) -> Status:
        if not self.decided:
            self.live = set(self.targets & set(members))
            self._judge()
        return self.status

    def on_deadline(self) -> Status:
        if not self.decided:
            self.status = Status.NO_QUORUM if self.replies else Status.TIMEOUT
        return self.status

    # -- the rules -------------------------------------------------------------------------
    def _judge(self) -> Status:
        holds, broken, value = self._consistency()
        heard = {r.server for r in self.replies}
        counted = self.counted
        if broken:
            self.status = Status.INCONSISTENT
        elif counted >= self.needed and holds:
            self.status, self.value = Status.OK, value
        elif counted + len(self.live - heard) < self.needed or not self.live:
            self.status = Status.MEMBERS_LOST
        return self.status

    def _consistency(self) -> tuple[bool, bool, bytes | None]:
        """(holds now, can never hold, the consolidated value)."""
        values = [(r.ok, r.value) for r in self.replies]
        first = next((r.value for r in self.replies if self.counts(r)), None)
        if self.consistency == "any":
            return True, False, first
        distinct = len(set(values))
        if self.consistency == "all_same":
            return distinct <= 1, distinct > 1, first
        if self.consistency == "all_different":
            return distinct == len(values), distinct < len(values), first
        # majority_same: a value held by a majority of the live targets (their replies only)
        if not self.live:
            return False, False, None  # nobody left to hold it: rule 3
        majority = len(self.live) // 2 + 1
        heard = {r.server for r in self.replies}
        remaining = len(self.live - heard)
        counts: dict[tuple[bool, bytes], int] = {}
        for r in self.replies:
            if r.server in self.live:
                counts[r.ok, r.value] = counts.get((r.ok, r.value), 0) + 1
        best, top = max(counts.items(), key=lambda kv: kv[1], default=((True, b""), 0))
        return top >= majority, top + remaining < majority, best[1] if top else None
