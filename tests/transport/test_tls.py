"""tcps:// (and grpc://…?tls=1) with mutual TLS: a node whose certificate another CA
signed, and a node speaking plain tcp://, get no frame in, while members' traffic goes
on in order; the listener demands a client certificate from its own CA (an intruder
that trusts that CA but holds another's certificate is refused); missing or unreadable
certificate files are ConfigErrors naming the file.
"""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path

import pytest
from transport_harness import Inbox, Nodes, numbered, run

from abcast.errors import ConfigError
from abcast.testing.pki import make_pki, shared_pki
from abcast.transport import TransportOptions, transport_from_url

pytestmark = pytest.mark.timeout(60)


def _options(scheme: str, pki_dir: Path | None = None) -> TransportOptions:
    pki = make_pki(pki_dir, ca_name="another CA") if pki_dir is not None else shared_pki()
    return TransportOptions(tls_cert=pki.cert, tls_key=pki.key, tls_ca=pki.ca,
                            tls=int(scheme == "grpc"), reconnect_initial_s=0.2,
                            reconnect_max_s=0.5)


@pytest.mark.parametrize("scheme", ["tcps", "grpc"])
@pytest.mark.parametrize("intruder", ["other-ca", "plaintext"])
def test_a_node_outside_the_pki_gets_nothing_in(
    scheme: str, intruder: str, tmp_path: Path,
) -> None:
    async def main() -> None:
        inbox = Inbox()
        async with Nodes() as nodes:
            member = _options(scheme)
            a = await nodes.start("as-given", "a", Inbox(), member, url=f"{scheme}://127.0.0.1:0")
            b = await nodes.start("as-given", "b", inbox, member, url=f"{scheme}://127.0.0.1:0")
            a.add_peer("b", b.address)
            if intruder == "other-ca":
                x = await nodes.start("as-given", "x", Inbox(), _options(scheme, tmp_path),
                                      url=f"{scheme}://127.0.0.1:0")
                x.add_peer("b", b.address)
            else:
                plain = "grpc" if scheme == "grpc" else "tcp"
                x = await nodes.start("as-given", "x", Inbox(), url=f"{plain}://127.0.0.1:0")
                port = b.address.rsplit(":", 1)[1]
                x.add_peer("b", f"{plain}://127.0.0.1:{port}")
            for seq in range(20):
                x.send("b", numbered(10_000 + seq))
                a.send("b", numbered(seq))
            await inbox.wait_until(lambda: len(inbox.got("a")) >= 20, "a's frames")
            await asyncio.sleep(0.5)  # x keeps trying meanwhile
            assert inbox.got("a") == list(range(20))
            assert inbox.got("x") == []

    run(main)


def test_missing_certificate_files_are_config_errors(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.pem")
    with pytest.raises(ConfigError, match=r"nope\.pem"):
        transport_from_url("tcps://127.0.0.1:0",
                           TransportOptions(tls_cert=missing, tls_key=missing))
    with pytest.raises(ConfigError, match="tls_cert and tls_key"):
        transport_from_url("tcps://127.0.0.1:0")
    with pytest.raises(ConfigError, match=r"nope\.pem"):
        transport_from_url("grpc://127.0.0.1:0", dataclasses.replace(
            _options("grpc"), tls_ca=missing))
    with pytest.raises(ConfigError, match="no TLS option"):
        transport_from_url("zmq://127.0.0.1:0?tls=1")
    with pytest.raises(ConfigError, match="never goes in a URL"):
        transport_from_url("tcp://127.0.0.1:0?secret=hunter22")


def test_the_listener_demands_a_client_certificate_from_its_own_ca(tmp_path: Path) -> None:
    """An intruder that trusts the members' CA (so its own side of TLS is satisfied) but
    presents a certificate another CA signed: the listener must refuse it, so its
    connections keep failing and none of its frames arrives (found by the security
    review: with the listener's CERT_REQUIRED dropped, the test above still passed)."""

    async def main() -> None:
        pki, other = shared_pki(), make_pki(tmp_path, ca_name="another CA")
        member = _options("tcps")
        intruder = dataclasses.replace(member, tls_cert=other.cert, tls_key=other.key)
        inbox = Inbox()
        async with Nodes() as nodes:
            a = await nodes.start("as-given", "a", Inbox(), member, url="tcps://127.0.0.1:0")
            b = await nodes.start("as-given", "b", inbox, member, url="tcps://127.0.0.1:0")
            x = await nodes.start("as-given", "x", Inbox(), intruder, url="tcps://127.0.0.1:0")
            assert intruder.tls_ca == pki.ca
            a.add_peer("b", b.address)
            x.add_peer("b", b.address)
            for seq in range(20):
                x.send("b", numbered(10_000 + seq))
                a.send("b", numbered(seq))
            await inbox.wait_until(lambda: len(inbox.got("a")) >= 20, "a's frames")
            # Refused connections end; an admitted one would last (and carry x's frames).
            await inbox.wait_until(lambda: x.stats.lost_connections >= 2,
                                   "x's connections refused twice")
            assert inbox.got("a") == list(range(20))
            assert inbox.got("x") == []

    run(main)


def test_a_connection_that_never_starts_tls_is_dropped_after_io_timeout_s() -> None:
    """tcps://'s listener gives the TLS handshake io_timeout_s, as it gives the hello
    (asyncio's own default was 60 s: a silent connection held a socket six times as long)."""

    async def main() -> None:
        async with Nodes() as nodes:
            options = dataclasses.replace(_options("tcps"), io_timeout_s=0.2)
            b = await nodes.start("as-given", "b", Inbox(), options, url="tcps://127.0.0.1:0")
            port = int(b.address.rsplit(":", 1)[1])
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            try:
                async with asyncio.timeout(10):
                    assert await reader.read() == b""  # closed by b
            except ConnectionResetError:
                pass  # aborted by b
            finally:
                writer.close()

    run(main)
