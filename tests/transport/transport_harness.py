"""The transport tests' scaffolding: the schemes and secured variants the conformance
suite runs over, a maker per variant (`maker_for`), and a node set started by scheme
name. The pieces themselves (numbered frames, Inbox, the bounded waits, the leak
check) ship in abcast.testing.transport_harness, their one home; they are re-exported
here for the transport tests.

Rules: no wall-clock assertions. Waiting is bounded (WAIT_S) and a timeout fails with a
summary of what did arrive; everything binds 127.0.0.1 with port 0.
"""

from __future__ import annotations

import dataclasses
from typing import Final

from abcast.testing import transport_harness as shipped
from abcast.testing.transport_harness import (
    WAIT_S,
    Inbox,
    UrlMaker,
    intact,
    number_of,
    numbered,
    run,
    strictly_increasing,
)
from abcast.transport import Transport, TransportOptions

__all__ = [
    "SCHEMES",
    "SECURED",
    "TEST_SECRET",
    "WAIT_S",
    "Inbox",
    "Nodes",
    "bind_url",
    "intact",
    "maker_for",
    "number_of",
    "numbered",
    "options_for",
    "run",
    "strictly_increasing",
]

SCHEMES: Final = ("tcp", "mem", "zmq", "grpc", "pyro", "udp")
#: secured variants that must pass the conformance suite too (see options_for)
SECURED: Final = ("tcp-secret", "tcp-aead", "tcps", "grpc-tls", "zmq-secret",
                   "udp-secret")
TEST_SECRET: Final = b"conformance-suite-secret"


def bind_url(scheme: str) -> str:
    scheme = scheme.split("-", maxsplit=1)[0]
    return "mem://" if scheme == "mem" else f"{scheme}://127.0.0.1:0"


def options_for(scheme: str, options: TransportOptions | None = None) -> TransportOptions:
    """`options` (or the defaults) plus what the variant `scheme` names: a group secret
    (tcp-secret: MAC; tcp-aead, zmq-secret and udp-secret: encrypted), or mutual TLS with a
    throwaway CA (tcps, grpc-tls)."""
    options = options or TransportOptions()
    if scheme.endswith("-secret"):
        return dataclasses.replace(options, secret=TEST_SECRET)
    if scheme.endswith("-aead"):
        return dataclasses.replace(options, secret=TEST_SECRET, aead=1)
    if scheme in ("tcps", "grpc-tls"):
        from abcast.testing.pki import shared_pki

        pki = shared_pki()
        return dataclasses.replace(options, tls_cert=pki.cert, tls_key=pki.key, tls_ca=pki.ca,
                                   tls=int(scheme == "grpc-tls"))
    return options


def maker_for(scheme: str) -> UrlMaker:
    """The conformance suite's maker for a scheme or secured variant of SCHEMES/SECURED."""
    return UrlMaker(bind_url(scheme), adjust=lambda options: options_for(scheme, options))


class Nodes(shipped.Nodes):
    """The shipped node set, started by scheme name: `start(scheme, node, inbox, …)`."""

    async def start(  # type: ignore[override]  # the transport tests' spelling
        self,
        scheme: str,
        node: str,
        inbox: Inbox,
        options: TransportOptions | None = None,
        url: str | None = None,
    ) -> Transport:
        transport = maker_for(scheme).make(url, options)
        return await self.start_transport(transport, node, inbox)
