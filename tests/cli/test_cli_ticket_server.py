"""`abcast ticket-server` restarted on the same registry: with the token it held (its
--token-file) it reclaims node id `ticket`; with another token it is refused, as a
second server for the same groups must be."""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from abcast.apps.ticket_server import TicketService, _token
from abcast.errors import ConfigError
from abcast.registry.server import RegistryServer

pytestmark = pytest.mark.timeout(60)


def test_a_restart_with_the_same_token_reclaims_the_id() -> None:
    async def main() -> None:
        async with RegistryServer() as registry:
            token = "ab" * 16
            async with TicketService(["a"], registry=registry.url, token=token):
                pass
            async with TicketService(["b"], registry=registry.url, token=token) as again:
                assert again.node.id == "ticket"
            with pytest.raises(ConfigError, match="'ticket' is taken"):
                async with TicketService(["c"], registry=registry.url):
                    pass

    asyncio.run(main())


def test_the_token_file_is_made_once_and_kept(tmp_path: Path) -> None:
    path = tmp_path / "token"
    first = _token(path)
    assert _token(path) == first and path.stat().st_mode & 0o777 == 0o600


@pytest.mark.parametrize("content", ["", "not a token", "AB" * 16, "ab" * 17])
def test_a_token_file_that_holds_no_token_is_refused_in_one_line(
    content: str, tmp_path: Path, capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from abcast.cli import main

    path = tmp_path / "token"
    path.write_text(content)
    monkeypatch.setattr(sys, "argv", ["abcast", "ticket-server", "--registry",
                                      "tcp://127.0.0.1:9", "--group", "g",
                                      "--token-file", str(path)])
    with pytest.raises(SystemExit) as exit_:
        main()
    err = capsys.readouterr().err
    assert exit_.value.code == 2 and err.startswith("abcast: error: --token-file")
    assert err.count("\n") == 1
