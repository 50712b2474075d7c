"""`abcast demo chat`'s options: the transport is spelled as on every other command (a URL
or a bare scheme), checked before anything starts."""

from __future__ import annotations

import click
import pytest

from abcast.apps.chat import chat


@pytest.mark.parametrize(("given", "url"), [
    ("tcp", "tcp://127.0.0.1:0"),
    ("tcp://127.0.0.1:0", "tcp://127.0.0.1:0"),
    ("tcp://[::1]:7000", "tcp://[::1]:7000"),
])
def test_a_transport_is_a_url_or_a_bare_scheme(given: str, url: str) -> None:
    ctx = chat.make_context("chat", ["--transport", given])
    assert ctx.params["transport"] == url


def test_an_unknown_transport_is_refused_before_anything_starts() -> None:
    with pytest.raises(click.BadParameter, match="is not a transport"):
        chat.make_context("chat", ["--transport", "carrier-pigeon"])
