"""A fresh loopback multicast group per test, and a skip (with the reason) where the
kernel refuses multicast. Only 127.0.0.1 and 239.0.0.0/8 with TTL 0/1 are used."""

from __future__ import annotations

import socket
import struct

import pytest

from abcast.transport.udp import pick_group


def fresh_group() -> str:
    return pick_group()


def require_multicast() -> None:
    """Skip the test, saying why, unless a datagram sent to a group on 127.0.0.1 comes back."""
    ip, port = fresh_group().split(":")
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as rx, \
                socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as tx:
            rx.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            rx.bind((ip, int(port)))
            mreq = struct.pack("4s4s", socket.inet_aton(ip), socket.inet_aton("127.0.0.1"))
            rx.setsockopt(socket.IPPROTO_IP, socket.IP_ADD_MEMBERSHIP, mreq)
            rx.settimeout(2.0)
            tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_IF,
                          socket.inet_aton("127.0.0.1"))
            tx.setsockopt(socket.IPPROTO_IP, socket.IP_MULTICAST_TTL, 0)
            tx.sendto(b"probe", (ip, int(port)))
            if rx.recv(16) != b"probe":
                pytest.skip("multicast on 127.0.0.1 delivered something else")
    except OSError as exc:
        pytest.skip(f"the kernel refuses IP multicast on 127.0.0.1: {exc}")
