"""What one registry holds, waits for and buffers at most, and what it counts.

Rules: a connection that starts a message must finish it within `message_timeout_s`,
and one with nothing to wait for that sends nothing for `idle_timeout_s` is closed
(`stats.timeouts`; a client reconnects and re-asserts what it holds). The registry holds
at most `max_nodes` node ids (registrations parked in the recovery grace counted when
granted) and `max_groups` groups, and one connection may create at most
`max_entries_per_client` of them (each new id a token claims counts); it may have at most
`max_waits_per_client` requests waiting (Lookup, WaitDone, a parked registration). Past a
bound the request is refused with a reason that names it (`stats.refused_full`). A
connection that leaves more than `max_unread_bytes` of replies unread is dropped
(`stats.slow_readers`). `ListGroups` answers a page of at most `list_page` groups.
Tombstones of removed groups are kept for groups the registry held, the newest
`max_groups`; addresses for registered ids only (`max_nodes` bounds them); a secret
group's verifier goes with the group (`max_groups` bounds them).
"""

from __future__ import annotations

from dataclasses import dataclass

from abcast.errors import ConfigError
from abcast.registry.messages import MAX_MESSAGE_BYTES


@dataclass(slots=True)
class RegistryStats:
    connections: int = 0
    requests: int = 0
    bad_messages: int = 0
    timeouts: int = 0  # connections closed idle or inside a message
    refused_full: int = 0  # requests refused by a bound of RegistryLimits
    refused_unauthenticated: int = 0  # secret-group requests without a valid proof
    failed_requests: int = 0  # requests whose serving raised (a registry bug): dropped
    slow_readers: int = 0  # connections dropped with max_unread_bytes of replies unread


@dataclass(frozen=True, slots=True)
class RegistryLimits:
    """What one registry holds and waits for at most (docs/operations.md, "Limits")."""

    max_nodes: int = 100_000  # node ids registered
    max_groups: int = 10_000  # groups (static and dynamic)
    max_entries_per_client: int = 1_024  # node ids and groups one connection may create
    list_page: int = 1_000  # groups per ListGroups reply (64 B each: far below 1 MiB)
    idle_timeout_s: float = 600.0  # a connection with nothing pending and nothing sent
    message_timeout_s: float = 10.0  # a message started must be complete by then
    max_waits_per_client: int = 256  # Lookups/WaitDones one connection may have held
    #: replies written to one connection and not yet read by it (at least one reply)
    max_unread_bytes: int = 8 * MAX_MESSAGE_BYTES

    def __post_init__(self) -> None:
        if min(self.max_nodes, self.max_groups, self.max_entries_per_client,
               self.list_page, self.max_waits_per_client) < 1 or min(
                   self.idle_timeout_s, self.message_timeout_s) <= 0:
            raise ConfigError(f"registry limits must be positive: {self}")
        if self.max_unread_bytes < 2 * MAX_MESSAGE_BYTES:
            raise ConfigError(f"max_unread_bytes below {2 * MAX_MESSAGE_BYTES} would drop "
                              f"a client for reading one reply slowly")
        if self.list_page > 65_536:
            raise ConfigError("list_page above 65536 would not fit a GroupList")
