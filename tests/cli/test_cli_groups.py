"""`abcast group …` as a person runs it (docs/groups.md): a registry, one terminal creates
a group, another joins, both send lines and see both in the same order, one leaves, the
group is listed and removed — plus the one-line errors and exit codes."""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(90)

ABCAST = [sys.executable, "-m", "abcast.cli"]


class Terminal:
    """A command with its stdin and stdout in reach, read line by line with a deadline."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [*ABCAST, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, env={**os.environ, "ABCAST_LOOP": "asyncio", **(env or {})})
        self.seen: list[str] = []
        self._buffer = b""

    def type(self, line: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(line.encode() + b"\n")
        self.proc.stdin.flush()

    def expect(self, text: str, timeout_s: float = 30.0) -> str:
        """The first new line containing `text` (lines before it are kept in `seen`)."""
        assert self.proc.stdout is not None
        fd = self.proc.stdout.fileno()
        deadline = time.monotonic() + timeout_s
        while True:
            while b"\n" in self._buffer:
                raw, self._buffer = self._buffer.split(b"\n", 1)
                line = raw.decode()
                self.seen.append(line)
                if text in line:
                    return line
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise AssertionError(f"no line with {text!r}; saw {self.seen}")
            chunk = os.read(fd, 65536)
            if not chunk:
                err = self.proc.stderr.read().decode() if self.proc.stderr else ""
                raise AssertionError(f"exited before {text!r}; saw {self.seen}; {err}")
            self._buffer += chunk

    def wait(self, timeout_s: float = 30.0) -> int:
        return self.proc.wait(timeout_s)

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ABCAST, *args], capture_output=True, text=True, timeout=60,
                          check=False, env={**os.environ, **(env or {})})


@pytest.fixture()
def registry() -> Iterator[str]:
    term = Terminal("registry", "--listen", "tcp://127.0.0.1:0", "--json",
                    "--recovery-grace", "0")
    try:
        yield json.loads(term.expect("url"))["url"]
    finally:
        term.kill()


def test_the_two_terminal_walk_through(registry: str) -> None:
    one = Terminal("group", "create", "chat", "--registry", registry, "--ordering", "matrix")
    two: Terminal | None = None
    try:
        assert one.expect("created chat as") == (
            "created chat as n1 (ordering matrix); type lines to send, /leave to leave")
        two = Terminal("group", "join", "chat", "--registry", registry)
        assert two.expect("joined chat as").startswith("joined chat as n2")
        one.expect("* view 2: n1 n2")
        one.type("hello from terminal 1")
        two.type("hi from terminal 2")
        got_one = [one.expect("> "), one.expect("> ")]
        got_two = [two.expect("> "), two.expect("> ")]
        assert got_one == got_two  # total order: the same sequence on both sides
        assert sorted(got_one) == ["n1> hello from terminal 1", "n2> hi from terminal 2"]

        listed = _run("group", "list", "--registry", registry, "--json")
        assert listed.returncode == 0, listed.stderr
        assert json.loads(listed.stdout) == {"group": "chat", "ordering": "matrix",
                                             "view_id": 2, "leader": "n1", "members": 2}
        members = _run("group", "members", "chat", "--registry", registry)
        assert members.returncode == 0
        assert members.stdout.splitlines()[0] == "chat: ordering=matrix view=2 leader=n1"

        two.type("/leave")
        assert two.expect("left chat") == "left chat"
        assert two.wait() == 0
        one.expect("* view 3: n1")
        one.type("still here")
        assert one.expect("> ") == "n1> still here"
        deadline = time.monotonic() + 10
        while json.loads(_run("group", "members", "chat", "--registry", registry,
                              "--json").stdout)["view_id"] != 3:
            assert time.monotonic() < deadline, "the leader did not register view 3"
            time.sleep(0.1)

        removed = _run("group", "remove", "chat", "--registry", registry)
        assert (removed.returncode, removed.stdout) == (0, "removed chat\n")
        assert _run("group", "list", "--registry", registry).stdout == "no groups\n"
        assert one.proc.stdin is not None
        one.proc.stdin.close()  # Ctrl-D leaves too
        assert one.expect("left chat") == "left chat"
        assert one.wait() == 0
    finally:
        one.kill()
        if two is not None:
            two.kill()


@pytest.mark.parametrize("ordering", ["fifo", "causal"])
def test_a_group_of_a_non_total_ordering_can_be_joined(registry: str, ordering: str) -> None:
    one = Terminal("group", "create", "notes", "--registry", registry, "--ordering", ordering)
    two: Terminal | None = None
    try:
        one.expect("created notes as n1")
        two = Terminal("group", "join", "notes", "--registry", registry)
        assert two.expect("joined notes as").startswith("joined notes as n2")
        one.expect("* view 2: n1 n2")
        one.type("first")
        one.type("second")
        two.type("reply")
        assert {two.expect("> "), two.expect("> "), two.expect("> ")} == {
            "n1> first", "n1> second", "n2> reply"}
        assert two.seen.index("n1> first") < two.seen.index("n1> second")  # fifo
        assert {one.expect("> "), one.expect("> "), one.expect("> ")} == {
            "n1> first", "n1> second", "n2> reply"}
        two.type("/leave")
        assert two.expect("left notes") == "left notes"
        assert two.wait() == 0
        one.expect("* view 3: n1")
    finally:
        one.kill()
        if two is not None:
            two.kill()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_leaves_gracefully_and_exits_0(registry: str, sig: signal.Signals) -> None:
    one = Terminal("group", "create", "sig", "--registry", registry, "--ordering", "matrix")
    two: Terminal | None = None
    try:
        one.expect("created sig")
        two = Terminal("group", "join", "sig", "--registry", registry)
        two.expect("joined sig as n2")
        two.proc.send_signal(sig)
        assert two.expect("left sig") == "left sig"
        assert two.wait() == 0
        one.expect("* view 3: n1")  # the group installed the view without n2
    finally:
        one.kill()
        if two is not None:
            two.kill()


def test_a_member_the_group_removed_says_so_and_exits_1(registry: str) -> None:
    """n3 stops (SIGSTOP) until n1 and n2 go on without it; resumed, it learns it was
    removed: the session, awaiting its group's end (`Group.ended()`), prints it and exits
    1 instead of reading lines for a group it is no longer in."""
    terms: list[Terminal] = []
    try:
        one = Terminal("group", "create", "rm", "--registry", registry,
                       "--ordering", "sequencer", "--suspect-after", "300")
        terms.append(one)
        one.expect("created rm as n1")
        for n in ("n2", "n3"):
            terms.append(Terminal("group", "join", "rm", "--registry", registry))
            terms[-1].expect(f"joined rm as {n}")
        three = terms[2]
        one.expect("* view 3: n1 n2 n3")
        three.proc.send_signal(signal.SIGSTOP)
        one.expect("* view 4: n1 n2")
        three.proc.send_signal(signal.SIGCONT)
        assert three.expect("* removed from rm") == "* removed from rm"
        assert three.wait() == 1
    finally:
        for term in terms:
            if term.proc.poll() is None:
                term.proc.send_signal(signal.SIGCONT)
            term.kill()


def test_refusals_are_one_line_and_exit_2(registry: str) -> None:
    unknown = _run("group", "join", "nope", "--registry", registry)
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == ("abcast: error: the registry has no group 'nope' "
                                      "(create it first)")
    members = _run("group", "members", "nope", "--registry", registry)
    assert (members.returncode, members.stderr) == (
        2, "abcast: error: the registry has no group 'nope'\n")
    removed = _run("group", "remove", "nope", "--registry", registry)
    assert removed.returncode == 2
    bad = _run("group", "list", "--registry", "http://x")
    assert bad.returncode == 2 and "tcp://127.0.0.1:7400" in bad.stderr
    one = Terminal("group", "create", "taken", "--registry", registry, "--ordering", "fifo")
    try:
        one.expect("created taken")
        again = _run("group", "create", "taken", "--registry", registry, "--ordering", "fifo")
        assert again.returncode == 2 and "already exists" in again.stderr
    finally:
        one.kill()


@pytest.mark.parametrize("source", ["devnull", "file"])
def test_a_session_reads_stdin_from_a_file_and_leaves_no_record(
    registry: str, source: str, tmp_path: Path
) -> None:
    """`abcast group create NAME < file` (or < /dev/null): the lines are sent, end of file
    leaves, and the registry forgets the group (its last member took it out)."""
    lines = tmp_path / "lines.txt"
    lines.write_text("first line\nsecond line\n")
    with open(os.devnull if source == "devnull" else lines, "rb") as stdin:
        done = subprocess.run([*ABCAST, "group", "create", "batch", "--registry", registry,
                               "--ordering", "sequencer"], stdin=stdin, capture_output=True,
                              text=True, timeout=60, check=False)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    out = done.stdout.splitlines()
    assert out[0] == "* view 1: n1" and out[-1] == "left batch"
    if source == "file":
        assert [line for line in out if "> " in line] == ["n1> first line", "n1> second line"]
    assert _run("group", "list", "--registry", registry).stdout == "no groups\n"


def test_create_takes_the_ordering_options_sim_takes(registry: str) -> None:
    """--multicast, --partitions, --relay, --safe: the same declarations as sim and
    cluster; one an ordering cannot honour is refused before anything starts."""
    with open(os.devnull, "rb") as stdin:
        done = subprocess.run([*ABCAST, "group", "create", "opts", "--registry", registry,
                               "--ordering", "sequencer", "--multicast", "basic",
                               "--partitions", "evs", "--relay"], stdin=stdin,
                              capture_output=True, text=True, timeout=60, check=False)
    assert (done.returncode, done.stderr) == (0, ""), done.stderr
    refused = _run("group", "create", "opts", "--registry", registry, "--ordering", "matrix",
                   "--partitions", "evs")
    assert refused.returncode == 2 and "cannot run partitions='evs'" in refused.stderr


def test_a_refused_create_prints_only_its_error(registry: str) -> None:
    one = Terminal("group", "create", "once", "--registry", registry, "--ordering", "fifo")
    try:
        one.expect("created once")
        again = _run("group", "create", "once", "--registry", registry, "--ordering", "fifo")
        assert (again.returncode, again.stdout) == (2, "")
        assert again.stderr.count("\n") == 1 and "already exists" in again.stderr
    finally:
        one.kill()


def test_a_registry_that_does_not_answer_times_out_with_exit_2() -> None:
    silent = _run("group", "list", "--registry", "tcp://127.0.0.1:9", "--timeout", "0.5")
    assert silent.returncode == 2 and "timed out" in silent.stderr


def test_a_join_nobody_admits_says_so_not_that_the_registry_is_away(registry: str) -> None:
    """The runtime's deadline names the step it waited for; main printed one generic
    line for every timeout ("… or the group's members (is the registry running there?)")
    even when the registry had answered and only the members were silent."""
    one = Terminal("group", "create", "held", "--registry", registry, "--ordering", "sequencer")
    try:
        one.expect("created held")
        os.kill(one.proc.pid, signal.SIGSTOP)  # a member that never answers
        join = _run("group", "join", "held", "--registry", registry, "--timeout", "1")
        assert join.returncode == 2
        assert join.stderr.strip() == ("abcast: error: timed out: the members of 'held' asked "
                                       "(n1) did not admit n2 within 1 s (join_timeout_s)")
    finally:
        one.kill()


@pytest.mark.parametrize("command", [["group", "create", "x", "--ordering", "fifo"],
                                     ["serve", "kv"]])
def test_a_silent_registry_is_named_with_its_deadline(command: list[str]) -> None:
    """A registry that takes the connection and never answers (a hung one)."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        url = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
        done = _run(*command, "--registry", url, "--timeout", "0.5")
    assert done.returncode == 2
    assert done.stderr.strip() == (f"abcast: error: registry {url} did not answer within "
                                   "0.5 s (is it running there?)")
