"""When a `matrix` member sends a NOPE heartbeat: the fixed period and the adaptive one.

Rules: pure bookkeeping over times and stamps given by the caller (abcast.ordering.
matrix); it never sends anything itself, it says *whether* to send a NOPE now and *when*
to look again. Why heartbeats exist: a member executes an operation only once every
member's stream has passed its stamp, so a member that has nothing to write must still
say "my clock is past that" now and then.

- Fixed (`adaptive=False`, the thesis): a NOPE after each `period_us` of silence.
- Adaptive (the thesis's future work): faster when others are writing and this node is
  not — having received an operation stamped above the last stamp it sent, it owes the
  others a stamp, and sends one `fast_us` later unless a write of its own carried it
  first; slower when idle — keep-alive NOPEs whose period doubles from `period_us` up to
  `idle_max_us` and falls back to `period_us` at the next sign of activity.
"""

from __future__ import annotations

from dataclasses import dataclass

from abcast.errors import ConfigError


@dataclass(frozen=True, slots=True)
class MatrixConfig:
    """Heartbeat knobs of the matrix ordering, in microseconds (joins and leaves are the
    membership layer's: abcast.membership.MembershipConfig)."""

    period_us: int = 300_000  # fixed: NOPE after this much silence; adaptive: idle start
    adaptive: bool = True
    fast_us: int = 1_000  # adaptive: delay of a NOPE others are waiting for
    idle_max_us: int = 2_400_000  # adaptive: the idle period doubles up to this

    def __post_init__(self) -> None:
        if min(self.period_us, self.fast_us) <= 0:
            raise ConfigError(f"matrix heartbeat knobs must be positive: {self}")
        if self.idle_max_us < self.period_us:
            raise ConfigError("idle_max_us must be at least period_us")


class Heartbeat:
    """One member's heartbeat state. The caller reports what it sent (`sent`) and which
    operation stamps it received (`saw`), and asks `due` when its timer fires."""

    __slots__ = ("_idle_period", "_keep_alive", "armed_at", "config", "last_sent_at",
                 "last_sent_ts", "max_seen_ts")

    def __init__(self, config: MatrixConfig) -> None:
        self.config = config
        self.last_sent_ts = -1  # the stamp of the last stream packet sent
        self.last_sent_at = 0
        self.max_seen_ts = -1  # the highest stamp of an operation received from others
        self._idle_period = config.period_us
        self._keep_alive = False  # the NOPE `due` asked for is a keep-alive
        self.armed_at: int | None = None

    def sent(self, ts: int, now: int) -> None:
        """A stream packet went out. Activity resets the idle period; a keep-alive does
        not (that is what makes idle heartbeats slow down)."""
        self.last_sent_ts = ts
        self.last_sent_at = now
        if not self._keep_alive:
            self._idle_period = self.config.period_us
        self._keep_alive = False

    def saw(self, ts: int) -> None:
        self.max_seen_ts = max(self.max_seen_ts, ts)

    def waited_on(self) -> bool:
        """Others may be waiting for a stamp of ours: we received an operation stamped
        above the last stamp we sent."""
        return self.max_seen_ts > self.last_sent_ts

    def arm(self, at: int) -> bool:
        """Wake up at `at` unless already due sooner; True if the timer must be (re)set."""
        if self.armed_at is not None and self.armed_at <= at:
            return False
        self.armed_at = at
        return True

    def urgent_at(self, now: int) -> int | None:
        """Adaptive: when to send the NOPE owed after a receipt (None: none owed)."""
        if self.config.adaptive and self.waited_on():
            return now + self.config.fast_us
        return None

    def due(self, now: int) -> tuple[bool, int]:
        """The timer fired: (send a NOPE now?, when to look again). After a True the
        caller sends the NOPE, which calls `sent`."""
        self.armed_at = None
        cfg = self.config
        silent = now - self.last_sent_at
        if not cfg.adaptive:
            if silent >= cfg.period_us:
                return True, now + cfg.period_us
            return False, self.last_sent_at + cfg.period_us
        if self.waited_on():
            return True, now + cfg.period_us
        if silent >= self._idle_period:
            self._idle_period = min(2 * self._idle_period, cfg.idle_max_us)
            self._keep_alive = True
            return True, now + self._idle_period
        return False, max(now + 1, self.last_sent_at + self._idle_period)

    @property
    def idle_period(self) -> int:
        return self._idle_period
