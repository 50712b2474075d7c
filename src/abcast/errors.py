"""The exceptions abcast raises.

Rules: `LocalProtocolError` means the caller misused an API (a bug on this side);
`RemoteProtocolError` and `DecodeError` mean a peer sent something we cannot accept (the
driver logs it, drops that connection and keeps running); `Backpressure` means a
non-waiting call found a bound full (wait, or try again later). Nothing else escapes a
core.
"""

from __future__ import annotations


class AbcastError(Exception):
    """Base of every error abcast raises on purpose."""


class LocalProtocolError(AbcastError):
    """This side asked for something the protocol does not allow (API misuse)."""


class RemoteProtocolError(AbcastError):
    """A peer sent a well-formed frame whose content breaks the protocol."""


class DecodeError(RemoteProtocolError):
    """Bytes that are not a valid frame."""


class ConfigError(AbcastError):
    """A run or group was configured with values that cannot work together."""


class Backpressure(AbcastError):  # noqa: N818 -- the name the API promises (issue #21)
    """A call that does not wait found its queue past its bound (`Group.broadcast_nowait`
    past the channel's `max_waiting`): await the waiting call (`broadcast`) or retry."""
