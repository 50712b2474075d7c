"""The exceptions abcast raises.

Rules: `LocalProtocolError` means the caller misused an API (a bug on this side);
`RemoteProtocolError` and `DecodeError` mean a peer sent something we cannot accept (the
driver logs it, drops that connection and keeps running). Nothing else escapes a core.
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
