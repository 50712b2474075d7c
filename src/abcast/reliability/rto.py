"""Retransmission timeout of one link, estimated from round-trip samples (RFC 6298).

Rules: an `RtoEstimator` turns round-trip samples into the timeout a sender waits before
it retransmits. It keeps the smoothed round-trip time (SRTT) and its mean deviation
(RTTVAR) with the RFC's gains (1/8 and 1/4), and sets

    RTO = SRTT + max(granularity, 4 * RTTVAR), clamped to [min_us, max_us]

Before the first sample the timeout is the configured initial one. A timeout backs off:
`back_off(k)` doubles the base k times (capped at max_us); the backed-off value is what
*new* packets wait too, until the next valid sample resets it (RFC 6298 §5.5 and §5.7) —
otherwise, on a path slower than the timeout, every packet would be retransmitted before
its ack came back, Karn's rule would discard every sample, and the estimate could never
catch up.

What it does not know: packets, acks or which sample is valid. The caller applies Karn's
rule (no sample from a packet that was retransmitted: its ack cannot say which copy it
answers) and decides which packet of an ack to time. Time is an argument in integer
microseconds; nothing here reads a clock. The native lane does `sample`'s arithmetic in C
(src/abcast/_native/lane_steps.c, `rto_sample`): change both, or its differential test
(tests/unit/test_native_lane.py, which compares the estimators) fails.
"""

from __future__ import annotations

from typing import Final

from abcast.errors import ConfigError, LocalProtocolError

#: the clock's granularity (µs): the smallest variance term, so that a perfectly steady
#: path does not get a timeout equal to its round trip. 1 ms: asyncio's epoll loop
#: rounds its timeouts up to whole milliseconds, so a timer cannot be finer than that.
GRANULARITY_US: Final = 1_000
#: doublings beyond this cannot matter (2**40 µs is twelve days): keeps shifts small
_MAX_SHIFT: Final = 40


class RtoEstimator:
    """SRTT/RTTVAR and the current timeout (backoff included) of one directed link."""

    __slots__ = ("backoff", "base", "max_us", "min_us", "rto", "rttvar", "samples", "srtt")

    def __init__(self, initial_us: int, min_us: int, max_us: int) -> None:
        if not 0 < min_us <= initial_us <= max_us:
            raise ConfigError(
                f"need 0 < min_us <= initial_us <= max_us, got {min_us}, {initial_us}, {max_us}"
            )
        self.min_us = min_us
        self.max_us = max_us
        self.srtt: int | None = None  # None until the first sample
        self.rttvar = 0
        self.base = initial_us  # the estimate before backoff
        self.backoff = 0  # doublings applied on top of `base` since the last sample
        self.rto = initial_us  # what a packet sent now waits before it is retransmitted
        self.samples = 0

    def sample(self, rtt_us: int) -> None:
        """Fold one valid round trip in (RFC 6298 §2.2–2.3) and cancel any backoff."""
        # Once per ack on the hot path: plain comparisons rather than min/max/abs calls.
        if rtt_us < 0:
            raise LocalProtocolError(f"negative round trip {rtt_us} us")
        srtt = self.srtt
        if srtt is None:
            srtt = rtt_us
            rttvar = rtt_us >> 1
        else:
            # Integer form of RTTVAR = 3/4 RTTVAR + 1/4 |SRTT - R|, SRTT = 7/8 SRTT + 1/8 R,
            # RTTVAR first (it uses the old SRTT).
            delta = srtt - rtt_us
            rttvar = (3 * self.rttvar + (delta if delta >= 0 else -delta)) >> 2
            srtt = (7 * srtt + rtt_us) >> 3
        self.srtt = srtt
        self.rttvar = rttvar
        self.samples += 1
        spread = rttvar << 2
        base = srtt + (spread if spread > GRANULARITY_US else GRANULARITY_US)
        if base < self.min_us:
            base = self.min_us
        elif base > self.max_us:
            base = self.max_us
        self.base = self.rto = base
        self.backoff = 0

    def back_off(self, doublings: int) -> None:
        """A packet timed out for the `doublings`-th time: the timeout is now at least
        base · 2**doublings (capped). Several packets timing out in the same episode
        raise it once, not once each."""
        if doublings <= self.backoff:
            return
        self.backoff = doublings
        self.rto = min(self.base << min(doublings, _MAX_SHIFT), self.max_us)

    def __repr__(self) -> str:
        return (f"RtoEstimator(srtt={self.srtt}, rttvar={self.rttvar}, rto={self.rto}, "
                f"backoff={self.backoff}, samples={self.samples})")
