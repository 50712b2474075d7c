"""The one conformance suite every transport must pass, run over the built-in ones (tcp,
mem, zmq, grpc, pyro, udp), tcp with a group secret (MAC or AEAD frames) and with mutual
TLS, and the others' secured variants. One test per (check, variant).

The checks ship in abcast.testing.transport_conformance (what each proves is in its
docstring); here each variant only gets its maker.
"""

from __future__ import annotations

import pytest
from transport_harness import SCHEMES, SECURED, maker_for

from abcast.testing.transport_conformance import CHECKS, Check

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("variant", SCHEMES + SECURED)
@pytest.mark.parametrize("check", CHECKS, ids=lambda check: check.__name__.removeprefix("check_"))
def test_conformance(check: Check, variant: str) -> None:
    check(maker_for(variant))
