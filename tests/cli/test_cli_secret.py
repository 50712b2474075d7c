"""`abcast group …` with a group secret: from $ABCAST_SECRET or --secret-file, never from
the command line. Holders create, join and remove; a terminal without the secret (or
with another) is refused in one line with exit 2, and the group goes on; a secret that
cannot be one is refused while the arguments are parsed."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli_groups import Terminal, _run, registry  # noqa: F401  (the fixture)

pytestmark = pytest.mark.timeout(90)

SECRET = "chat-room-secret"


def test_holders_chat_and_strangers_are_refused_in_one_line(
    registry: str, tmp_path: Path,  # noqa: F811  (the fixture)
) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")  # the trailing newline of an editor is dropped
    one = Terminal("group", "create", "room", "--registry", registry, "--ordering",
                   "sequencer", env={"ABCAST_SECRET": SECRET})
    two: Terminal | None = None
    try:
        one.expect("created room as n1")
        two = Terminal("group", "join", "room", "--registry", registry,
                       "--secret-file", str(secret_file))
        two.expect("joined room as n2")
        one.expect("* view 2: n1 n2")
        stranger = _run("group", "join", "room", "--registry", registry)
        assert (stranger.returncode, stranger.stderr) == (
            2, "abcast: error: group 'room' is a secret group: its members admit only holders "
               "of its secret (secret=, ABCAST_SECRET or --secret-file)\n")
        # another secret passes the registry's read, then fails every link's handshake
        guesser = _run("group", "join", "room", "--registry", registry, "--timeout", "5",
                       env={"ABCAST_SECRET": "not-the-secret"})
        assert guesser.returncode == 2
        assert "does not hold the group secret" in guesser.stderr
        for env in ({}, {"ABCAST_SECRET": "not-the-secret"}):
            removal = _run("group", "remove", "room", "--registry", registry, env=env)
            assert removal.returncode == 2 and "refused" in removal.stderr
        one.type("still private")
        assert one.expect("> ") == two.expect("> ") == "n1> still private"
        removed = _run("group", "remove", "room", "--registry", registry,
                       "--secret-file", str(secret_file))
        assert (removed.returncode, removed.stdout) == (0, "removed room\n")
    finally:
        one.kill()
        if two is not None:
            two.kill()


def test_a_secret_that_cannot_be_one_is_refused_up_front(tmp_path: Path) -> None:
    short = tmp_path / "short"
    short.write_text("abc")
    for args, env in (
        (["--secret-file", str(short)], {}),
        (["--secret-file", str(tmp_path / "missing")], {}),
        ([], {"ABCAST_SECRET": "abc"}),
    ):
        result = _run("group", "join", "g", "--registry", "tcp://127.0.0.1:9", *args, env=env)
        assert result.returncode == 2
        assert result.stderr.startswith("abcast: error: ") and result.stderr.count("\n") == 1
        assert "secret" in result.stderr
