"""`abcast serve` and `abcast call` as the README's three-terminal walk-through runs them:
a registry, two `serve --kv` replicas, calls that write, read and vote — plus the one-line
errors and exit codes (a bad vote name, an impossible quorum, a servers' error reply)."""

from __future__ import annotations

import json

import pytest
from test_cli_groups import Terminal, _run, registry  # noqa: F401  (the fixture)

pytestmark = pytest.mark.timeout(90)


def test_serve_serve_call(registry: str) -> None:  # noqa: F811
    first = Terminal("serve", "kv", "--registry", registry)
    second = None
    try:
        first.expect("serving kv (kv) as n")
        second = Terminal("serve", "kv", "--registry", registry)
        second.expect("serving kv (kv) as n")
        first.expect("* view 2:")
        put = _run("call", "kv", "put x 42", "--registry", registry)
        assert put.returncode == 0 and put.stdout.startswith("OK"), put
        got = _run("call", "kv", "get x", "--registry", registry, "--vote", "all",
                   "--consistency", "all_same", "--path", "direct", "--json")
        outcome = json.loads(got.stdout.splitlines()[-1])
        assert outcome["status"] == "OK" and outcome["value"] == "42"
        assert len(outcome["replies"]) == 2
        bad = _run("call", "kv", "get x", "--registry", registry, "--vote", "most")
        assert bad.returncode == 2
        assert "choose one of: first, all, majority, quorum(k), percent(p)" in bad.stderr
        big = _run("call", "kv", "get x", "--registry", registry, "--vote", "quorum(3)")
        assert big.returncode == 2 and "quorum(3) needs more servers" in big.stderr
        oops = _run("call", "kv", "frobnicate", "--registry", registry)
        assert oops.returncode == 1 and oops.stdout.startswith("error: ValueError")
        second.proc.send_signal(2)  # Ctrl-C: a graceful leave
        second.expect("left kv")
        assert second.wait() == 0
        first.expect("* view 3:")
        after = _run("call", "kv", "get x", "--registry", registry, "--vote", "all")
        assert after.returncode == 0 and after.stdout.startswith("42"), after
    finally:
        first.kill()
        if second is not None:
            second.kill()
