"""udp:// options: the URL's query keys (udp.py's module rules say what each does), the
multicast group named by the host or `group=`, and a fresh group for a run (`pick_group`).

Rules: every option is checked when parsed (ConfigError naming it); the options udp://
does not know are left in the URL for the shared TransportOptions.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import secrets
import socket
from dataclasses import dataclass
from typing import Final
from urllib.parse import parse_qsl, urlencode

from abcast.errors import ConfigError
from abcast.transport.base import TransportUrl
from abcast.transport.udp_wire import HEADER_BYTES, MAX_DATAGRAM, MAX_SENDER_BYTES


def pick_group() -> str:
    """A fresh group for one run on this host: a random address in 239.255.0.0/16 (so
    that runs side by side do not hear each other) and a UDP port free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"239.255.{secrets.randbelow(254) + 1}.{secrets.randbelow(254) + 1}:{port}"


@dataclass(frozen=True, slots=True)
class UdpOptions:
    """udp:// options (from the URL's query string; see the module rules)."""

    group: str = ""  # "ip:port" of the multicast group; "" = unicast only
    iface: str = "127.0.0.1"
    ttl: int = 1
    loss: float = 0.0
    datagram_bytes: int = 65_000
    reassembly_timeout_s: float = 2.0
    max_reassemblies: int = 64
    max_sources: int = 1024  # senders kept (udp_sources' rules)
    source_idle_s: float = 60.0  # a sender silent this long is forgotten

    def __post_init__(self) -> None:
        if not 0 <= self.ttl <= 255:
            raise ConfigError(f"udp ttl must be in 0..255, got {self.ttl}")
        if not 0.0 <= self.loss < 1.0:
            raise ConfigError(f"udp loss must be in [0, 1), got {self.loss}")
        low = HEADER_BYTES + MAX_SENDER_BYTES + 64
        if not low <= self.datagram_bytes <= MAX_DATAGRAM:
            raise ConfigError(f"udp datagram_bytes must be in {low}..{MAX_DATAGRAM}, "
                              f"got {self.datagram_bytes}")
        if self.reassembly_timeout_s <= 0 or self.max_reassemblies < 1:
            raise ConfigError("udp reassembly_timeout_s and max_reassemblies must be positive")
        if self.source_idle_s <= 0 or self.max_sources < 1:
            raise ConfigError("udp source_idle_s and max_sources must be positive")
        if self.group:
            group_ip, _ = split_group(self.group)
            if not ipaddress.ip_address(group_ip).is_multicast:
                raise ConfigError(f"udp group {self.group!r} is not a multicast address")


_UDP_KEYS: Final = {f.name: f.type for f in dataclasses.fields(UdpOptions)}


def split_group(group: str) -> tuple[str, int]:
    host, sep, port = group.rpartition(":")
    try:
        ipaddress.ip_address(host)
        number = int(port)
    except ValueError:
        raise ConfigError(f"udp group {group!r} must be ip:port") from None
    if not sep or not 1 <= number <= 65_535:
        raise ConfigError(f"udp group {group!r} must be ip:port with a port in 1..65535")
    return host, number


def split_options(url: TransportUrl) -> tuple[UdpOptions, TransportUrl]:
    """The udp options of the URL, and the URL with only the shared options left."""
    mine: dict[str, str | int | float] = {}
    rest = []
    for key, raw in parse_qsl(url.query, keep_blank_values=True):
        if key not in _UDP_KEYS:
            rest.append((key, raw))
            continue
        kind = _UDP_KEYS[key]
        try:
            mine[key] = int(raw) if kind == "int" else float(raw) if kind == "float" else raw
        except ValueError:
            raise ConfigError(f"udp option {key}={raw!r} is not a number") from None
    if _is_multicast(url.host):
        if url.port == 0:
            raise ConfigError(f"udp group {url.host} needs a port (members must share it)")
        mine["group"] = f"{url.host}:{url.port}"
    options = UdpOptions(**mine)  # type: ignore[arg-type]
    return options, dataclasses.replace(url, query=urlencode(rest))


def _is_multicast(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_multicast
    except ValueError:
        return False
