"""The one conformance suite every transport must pass, run over the built-in ones (tcp,
mem, zmq, grpc, pyro, udp), tcp with a group secret (MAC or AEAD frames) and with mutual
TLS, and the others' secured variants; and over the WAN emulator (wan.py) wrapping mem://
and tcp:// with a few ms of delay, skipping with its reason the one check it cannot pass
by design. One test per (check, variant).

The checks ship in abcast.testing.transport_conformance (what each proves is in its
docstring); here each variant only gets its maker.
"""

from __future__ import annotations

import itertools
from typing import Final

import pytest
from transport_harness import SCHEMES, SECURED, bind_url, maker_for

from abcast.testing.transport_conformance import CHECKS, NODE_IDS, Check
from abcast.testing.transport_harness import TransportMaker, UrlMaker
from abcast.transport import Transport
from abcast.transport.wan import LatencyMatrix, WanTransport

pytestmark = pytest.mark.timeout(60)

#: the WAN emulator over these inner schemes
WAN: Final = ("wan-mem", "wan-tcp")
#: two sites 4 ms apart (2 ± 0.5 ms one way), the checks' nodes spread over both
WAN_MATRIX: Final = LatencyMatrix(
    ("east", "west"), ((0.2, 4.0), (4.0, 0.2)), jitter_ms=0.5,
    nodes=tuple((node, ("east", "west")[i % 2]) for i, node in enumerate(NODE_IDS)),
)
#: checks the WAN emulator cannot pass by design, each with the reason
WAN_EXCLUDED: Final = {
    "check_drain_holds_the_sender_at_the_high_water_mark_and_loses_nothing": (
        "by design the WAN emulator's drain() does not wait for its delay line: the line "
        "holds what the link has in flight (rate x latency), which buffered() counts, so "
        "after drain() only the inner transport is at its high-water mark (wan.py)"),
}
_wan_seeds = itertools.count(1)


def _maker(variant: str) -> TransportMaker:
    if variant in WAN:
        inner = variant.removeprefix("wan-")

        def wrap(transport: Transport) -> Transport:
            return WanTransport(transport, WAN_MATRIX, seed=next(_wan_seeds))

        return UrlMaker(bind_url(inner), wrap=wrap)
    return maker_for(variant)


@pytest.mark.parametrize("variant", SCHEMES + SECURED + WAN)
@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__.removeprefix("check_"))
def test_conformance(check: Check, variant: str) -> None:
    if variant in WAN and check.__name__ in WAN_EXCLUDED:
        pytest.skip(WAN_EXCLUDED[check.__name__])
    check(_maker(variant))


@pytest.mark.parametrize("variant", WAN)
@pytest.mark.parametrize("name", sorted(WAN_EXCLUDED))
def test_the_wan_exclusions_are_still_needed(name: str, variant: str) -> None:
    """An exclusion the emulator no longer needs fails here: drop it from WAN_EXCLUDED."""
    check = next(check for check in CHECKS if check.__name__ == name)
    with pytest.raises(AssertionError):
        check(_maker(variant))
