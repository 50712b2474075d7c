"""A group across real network stacks: five nodes, each in a Linux network namespace of
its own with its own interface and address, joined by veth pairs to a bridge (as hosts on
one switch would be); a real partition — one node's link set down at the bridge — and
its heal; the trace checked for what the ordering claims.

Everything lives in namespaces this test makes (a private 10.77.0.0/24 on its own
bridge: no packet leaves the machine) and goes in its teardown, failure or not. Skips,
with the reason, where namespaces cannot be made (not root, no `ip`, no permission).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from abcast.evaluation.worker import Finished, Ready, Result, decode_report
from abcast.ordering.registry import get_ordering
from abcast.testing import check_events
from abcast.trace.writer import read_events

pytestmark = [pytest.mark.cluster, pytest.mark.timeout(240)]

SUBNET = "10.77.0"
HUB_IP = f"{SUBNET}.1"
REGISTRY_PORT = 7400
NODE_PORT = 7500
NODES = 5
CUT_S = 2.5


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["ip", *args], capture_output=True, text=True, check=check)


@dataclass(frozen=True)
class Lan:
    """The namespaces of one test: a hub holding the bridge (and the registry), and one
    per node; `uplink[i]` is node i's veth end on the bridge (down = cut off)."""

    hub: str
    nodes: tuple[str, ...]
    uplinks: tuple[str, ...]

    def address(self, i: int) -> str:
        return f"{SUBNET}.{11 + i}"

    def exec(self, ns: str) -> list[str]:
        return ["ip", "netns", "exec", ns]

    def set_link(self, i: int, state: str) -> None:
        _ip("-n", self.hub, "link", "set", self.uplinks[i], state)


def _skip_reason() -> str | None:
    if sys.platform != "linux":
        return "network namespaces are Linux only"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    if os.geteuid() != 0:
        return "making network namespaces needs root"
    return None


@pytest.fixture
def lan() -> Iterator[Lan]:
    reason = _skip_reason()
    if reason is not None:
        pytest.skip(reason)
    tag = f"abx{os.getpid() % 100_000}"
    hub = f"{tag}-hub"
    nodes = tuple(f"{tag}-n{i + 1}" for i in range(NODES))
    uplinks = tuple(f"{tag}h{i + 1}" for i in range(NODES))
    made: list[str] = []
    try:
        probe = _ip("netns", "add", hub, check=False)
        if probe.returncode != 0:
            pytest.skip(f"cannot make a network namespace: {probe.stderr.strip()}")
        made.append(hub)
        _ip("-n", hub, "link", "set", "lo", "up")
        _ip("-n", hub, "link", "add", "br0", "type", "bridge")
        _ip("-n", hub, "addr", "add", f"{HUB_IP}/24", "dev", "br0")
        _ip("-n", hub, "link", "set", "br0", "up")
        for i, (ns, uplink) in enumerate(zip(nodes, uplinks, strict=True)):
            _ip("netns", "add", ns)
            made.append(ns)
            _ip("-n", hub, "link", "add", uplink, "type", "veth", "peer", "name", "eth0",
                "netns", ns)
            _ip("-n", hub, "link", "set", uplink, "master", "br0")
            _ip("-n", hub, "link", "set", uplink, "up")
            _ip("-n", ns, "addr", "add", f"{SUBNET}.{11 + i}/24", "dev", "eth0")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("-n", ns, "link", "set", "lo", "up")
        yield Lan(hub, nodes, uplinks)
    finally:
        for ns in reversed(made):  # the veth pairs go with their namespaces
            _ip("netns", "del", ns, check=False)


def _spawn(cmd: list[str], **kw: object) -> subprocess.Popen[bytes]:
    return subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,  # type: ignore[call-overload]
                            stderr=subprocess.PIPE, **kw)


def _read_until(proc: subprocess.Popen[bytes], kind: type, timeout_s: float) -> object:
    """The node's next report of `kind` (earlier ones are skipped)."""
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            err = proc.stderr.read().decode() if proc.stderr else ""
            raise AssertionError(f"node exited ({proc.wait()}): {err[-2000:]}")
        report = decode_report(line)
        if isinstance(report, kind):
            return report
    raise AssertionError(f"no {kind.__name__} within {timeout_s} s")


def test_five_namespaces_partitioned_at_the_bridge_and_healed_check_clean(
    lan: Lan, tmp_path: Path,
) -> None:
    out = tmp_path / "trace"
    run_id = "netns-sequencer"
    ordering = "sequencer"
    python = [sys.executable, "-m", "abcast.cli"]
    procs: list[subprocess.Popen[bytes]] = []
    try:
        registry = _spawn([*lan.exec(lan.hub), *python, "registry", "--listen",
                           f"tcp://{HUB_IP}:{REGISTRY_PORT}", "--json", "--stop-on-eof"])
        procs.append(registry)
        assert registry.stdout is not None
        assert json.loads(registry.stdout.readline())["url"]
        nodes = []
        for i, ns in enumerate(lan.nodes):
            nodes.append(_spawn([
                *lan.exec(ns), *python, "node", "--registry", f"tcp://{HUB_IP}:{REGISTRY_PORT}",
                "--group", "g", "--ordering", ordering, "--node", f"n{i + 1}",
                "--transport", f"tcp://{lan.address(i)}:{NODE_PORT}", "--size", str(NODES),
                "--messages", "2000", "--rate", "400", "--run-id", run_id, "--out", str(out),
                "--suspect-after", "20000", "--control", "pipe", "--no-probe"]))
        procs.extend(nodes)
        ready = [_read_until(p, Ready, 60) for p in nodes]
        assert sorted(r.address for r in ready) == sorted(  # type: ignore[attr-defined]
            f"tcp://{lan.address(i)}:{NODE_PORT}" for i in range(NODES))
        for p in nodes:
            assert p.stdin is not None
            p.stdin.write(b"go\n")
            p.stdin.flush()
        # A real partition: the last node's cable pulled at the switch, then plugged in.
        time.sleep(1.0)
        cut_at = time.time_ns()
        lan.set_link(NODES - 1, "down")
        time.sleep(CUT_S)
        healed_at = time.time_ns()
        lan.set_link(NODES - 1, "up")
        for p in nodes:
            _read_until(p, Finished, 120)
        for p in nodes:
            assert p.stdin is not None
            p.stdin.write(b"stop\n")
            p.stdin.flush()
        results = [_read_until(p, Result, 60) for p in nodes]
        assert all(r.outcome.complete for r in results)  # type: ignore[attr-defined]
    finally:
        for p in procs:
            if p.poll() is None:
                with contextlib.suppress(OSError):
                    p.stdin.close()  # type: ignore[union-attr]
                with contextlib.suppress(subprocess.TimeoutExpired):
                    p.wait(10)
            if p.poll() is None:
                p.kill()
                p.wait()
    rows = read_events(out, run_id)
    assert check_events(rows, get_ordering(ordering).guarantees, run_id) == []
    delivered = {f"n{i + 1}": [r.t_ns for r in rows if r.node == f"n{i + 1}"
                               and r.kind == "deliver"] for i in range(NODES)}
    assert all(len(ts) == 2000 for ts in delivered.values())
    # The cut was real: the cut-off node delivered nothing while it lasted (allowing for
    # the ~1 s the others take to notice), while the others went on delivering.
    cut_node = delivered[f"n{NODES}"]
    during = [t for t in cut_node if cut_at + 500_000_000 < t < healed_at]
    others = [t for t in delivered["n1"] if cut_at + 500_000_000 < t < healed_at]
    assert during == [] and others, (len(during), len(others))
