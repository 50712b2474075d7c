"""Transport URLs and the scheme registry: every scheme builds its transport, port 0
and `mem://` pick a free address that start() reports, query strings set options, and
unknown schemes, malformed URLs, bad options and busy addresses are ConfigErrors that
say what is wrong.
"""

from __future__ import annotations

import pytest
from transport_harness import SCHEMES, Inbox, bind_url, run

from abcast.errors import ConfigError
from abcast.transport import (
    TransportOptions,
    known_schemes,
    parse_url,
    register_scheme,
    transport_from_url,
)
from abcast.transport.memory import MemoryTransport

pytestmark = pytest.mark.timeout(60)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_each_scheme_starts_on_a_free_address_and_reports_it(scheme: str) -> None:
    async def main() -> None:
        transport = transport_from_url(bind_url(scheme))
        assert transport.scheme == scheme
        try:
            address = await transport.start("n1", Inbox())
            parsed = parse_url(address)
            assert parsed.scheme == scheme
            if scheme == "mem":
                assert parsed.name
            else:
                assert parsed.host == "127.0.0.1" and parsed.port > 0
            assert transport.address == address and transport.node == "n1"
        finally:
            await transport.close()

    run(main)


@pytest.mark.parametrize("scheme", SCHEMES)
def test_a_busy_address_is_a_config_error(scheme: str) -> None:
    async def main() -> None:
        first = transport_from_url(bind_url(scheme))
        try:
            address = await first.start("n1", Inbox())
            second = transport_from_url(address)
            with pytest.raises(ConfigError, match=r"already|cannot listen"):
                await second.start("n2", Inbox())
            await second.close()
        finally:
            await first.close()

    run(main)


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("sctp://127.0.0.1:7000", "unknown transport scheme 'sctp'"),
        ("tcp://127.0.0.1", "needs host:port"),
        ("tcp://127.0.0.1:99999", "bad port"),
        ("tcp://:7000", "needs host:port"),
        ("tcp://127.0.0.1:0/path", "path"),
        ("127.0.0.1:7000", "not a URL"),
        ("mem://a/b", "path"),
        ("tcp://127.0.0.1:0?high_water=5", "unknown transport option 'high_water'"),
        ("tcp://127.0.0.1:0?high_water_bytes=lots", "not a number"),
        ("tcp://127.0.0.1:0?high_water_bytes=0", "high_water_bytes must be >= 1"),
    ],
)
def test_bad_urls_are_config_errors(url: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message.replace("(", r"\(")):
        transport_from_url(url)


def test_query_string_sets_options() -> None:
    transport = transport_from_url("mem://x?high_water_bytes=1024&reconnect_max_s=0.5")
    assert isinstance(transport, MemoryTransport)
    assert transport.options.high_water_bytes == 1024
    assert transport.options.reconnect_max_s == 0.5
    base = TransportOptions(max_frame_bytes=4096)
    other = transport_from_url("mem://y?batch_bytes=10", base)
    assert isinstance(other, MemoryTransport)
    assert other.options == TransportOptions(max_frame_bytes=4096, batch_bytes=10)


def test_registered_schemes_are_built_by_their_factory() -> None:
    made: list[str] = []

    def factory(url: str, options: TransportOptions | None) -> MemoryTransport:
        made.append(url)
        return MemoryTransport("mem://" + parse_url(url).name, options)

    register_scheme("loop", factory, form="name")
    assert "loop" in known_schemes()
    assert isinstance(transport_from_url("loop://q"), MemoryTransport)
    assert made == ["loop://q"]
    with pytest.raises(ConfigError):
        register_scheme("no good", factory)
