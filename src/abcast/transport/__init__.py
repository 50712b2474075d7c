"""Transports: move opaque frames between nodes. See base.py for the contract."""

from __future__ import annotations

from abcast.transport.base import (
    FrameHandler,
    Link,
    Transport,
    TransportOptions,
    TransportStats,
    TransportUrl,
    known_schemes,
    parse_url,
    register_scheme,
    transport_from_url,
)

__all__ = [
    "FrameHandler",
    "Link",
    "Transport",
    "TransportOptions",
    "TransportStats",
    "TransportUrl",
    "known_schemes",
    "parse_url",
    "register_scheme",
    "transport_from_url",
]
