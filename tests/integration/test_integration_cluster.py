"""Real clusters on 127.0.0.1: `abcast cluster` over every transport, hostile bytes at a
running node, the registry dying mid-run, and nodes started by hand.

Each run is small (hundreds of messages, not the issue's 20000) to keep the suite fast;
the full-size figures are measured by hand (see the runtime report)."""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import socket
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from abcast.codec import Packet
from abcast.evaluation.cluster import ClusterConfig
from abcast.evaluation.launcher import ClusterHandle, run_cluster
from abcast.ordering.registry import ORDERINGS
from abcast.testing import check_traces
from abcast.trace.writer import read_runs, read_traces

ABCAST = [sys.executable, "-m", "abcast.cli"]


def _cluster(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    # --timeout: a stuck run ends as a failed summary well before pytest's own timeout
    return subprocess.run([*ABCAST, "cluster", *args, "--json", "--timeout", "30"],
                          check=False, capture_output=True, text=True, timeout=timeout)


def _summary(proc: subprocess.CompletedProcess[str]) -> dict[str, object]:
    assert proc.stdout.strip(), proc.stderr
    summary: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return summary


RUNS = [("sequencer", t) for t in ("tcp", "zmq", "grpc", "pyro", "mem")]
RUNS += [("skeen", "tcp"), ("causal", "tcp")]


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("ordering", "transport"), RUNS, ids=[f"{o}-{t}" for o, t in RUNS])
def test_cluster_delivers_everything_with_zero_violations(
    ordering: str, transport: str, tmp_path: Path,
) -> None:
    if ordering not in ORDERINGS:
        pytest.skip(f"ordering {ordering!r} is not registered yet")
    messages = 300
    proc = _cluster("--nodes", "5", "--ordering", ordering, "--transport", transport,
                    "--messages", str(messages), "--out", str(tmp_path))
    summary = _summary(proc)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert summary["delivered"] == 5 * messages
    assert summary["violations"] == {} and summary["quiescent"] is True
    assert summary["latency_p50_us"] is not None and summary["throughput_msgs_per_s"]
    runs, events = read_traces(tmp_path)
    assert [(r.transport, r.ordering, r.nodes) for r in runs] == [(transport, ordering, 5)]
    assert {e.node for e in events} == {"n1", "n2", "n3", "n4", "n5"}
    assert check_traces(runs, events) == {runs[0].run_id: []}  # the written trace agrees


@pytest.mark.timeout(60)
def test_trace_off_writes_nothing_but_still_reports_latency(tmp_path: Path) -> None:
    proc = _cluster("--nodes", "3", "--ordering", "fifo", "--transport", "mem",
                    "--messages", "300", "--trace", "off", "--out", str(tmp_path / "out"))
    summary = _summary(proc)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert summary["delivered"] == 900 and summary["traced"] is False
    assert isinstance(summary["latency_p99_us"], float)
    assert summary["latency_p50_us"] <= summary["latency_p99_us"]  # type: ignore[operator]
    assert not (tmp_path / "out" / "runs.parquet").exists()


@pytest.mark.timeout(60)
def test_open_loop_sends_on_schedule_and_still_delivers_everything(tmp_path: Path) -> None:
    proc = _cluster("--nodes", "3", "--ordering", "fifo", "--transport", "mem",
                    "--messages", "200", "--rate", "1000", "--out", str(tmp_path))
    summary = _summary(proc)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert summary["delivered"] == 600 and summary["violations"] == {}
    assert [r.workload for r in read_runs(tmp_path)] == ["open-1000/s"]


def _send_and_deliver_times(out: Path) -> tuple[
    list[str], dict[tuple[str, int], int], dict[tuple[str, str, int], int],
]:
    """Members in workload order, send t_ns per (origin, seq), deliver t_ns per (node,
    origin, seq), from the one run in `out`."""
    runs, events = read_traces(out)
    assert len(runs) == 1
    sends = {(e.node, e.seq or 0): e.t_ns for e in events if e.kind == "send"}
    delivers = {(e.node, e.origin or "", e.seq or 0): e.t_ns
                for e in events if e.kind == "deliver"}
    members = sorted({e.node for e in events}, key=lambda n: int(n.removeprefix("n")))
    return members, sends, delivers


@pytest.mark.timeout(90)
def test_serial_keeps_one_message_in_flight(tmp_path: Path) -> None:
    messages = 60
    proc = _cluster("--nodes", "3", "--ordering", "sequencer", "--transport", "tcp",
                    "--messages", str(messages), "--serial", "--out", str(tmp_path))
    summary = _summary(proc)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert summary["delivered"] == 3 * messages and summary["violations"] == {}
    assert [r.workload for r in read_runs(tmp_path)] == ["serial-round-robin"]
    members, sends, delivers = _send_and_deliver_times(tmp_path)
    n = len(members)
    for k in range(1, messages):  # message k leaves after its sender delivered k-1
        origin, before = members[k % n], members[(k - 1) % n]
        sent = sends[(origin, k // n + 1)]
        assert sent >= delivers[(origin, before, (k - 1) // n + 1)], k


@pytest.mark.timeout(60)
def test_wan_emulation_delays_links_without_breaking_anything(tmp_path: Path) -> None:
    from abcast.transport.wan import EXAMPLE_MATRIX

    proc = _cluster("--nodes", "5", "--ordering", "fifo", "--transport", "mem",
                    "--messages", "50", "--wan", str(EXAMPLE_MATRIX), "--out", str(tmp_path))
    summary = _summary(proc)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert summary["delivered"] == 250 and summary["violations"] == {}
    assert [r.faults for r in read_runs(tmp_path)] == [f"wan={EXAMPLE_MATRIX.name}"]


@pytest.mark.parametrize("transport", ["mem", "tcp"])
def test_basic_multicast_and_relay_run_and_are_recorded(tmp_path: Path, transport: str) -> None:
    """--multicast and the other ordering options work on cluster as on sim: the run
    claims what a best-effort group claims, and runs.parquet records the options."""
    proc = _cluster("--nodes", "3", "--ordering", "sequencer", "--transport", transport,
                    "--messages", "30", "--multicast", "basic", "--relay",
                    "--out", str(tmp_path))
    summary = _summary(proc)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert summary["delivered"] == 90 and summary["violations"] == {}
    (run,) = read_runs(tmp_path)
    assert run.options == "relay multicast=basic"
    assert "validity" not in run.guarantees and "total" in run.guarantees


@pytest.mark.timeout(60)
@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--transport", "carrier-pigeon"], "'carrier-pigeon' is not a transport"),
        (["--rate", "0"], "'0' is not greater than 0"),
        (["--wan", "/nonexistent/wan.toml"], "does not exist"),
        (["--nodes", "0"], "'0' is not at least 1"),
        (["--ordering", "nope"], "'nope' is not one of"),
        (["--serial", "", "--rate", "10"], "--serial is a closed loop"),
    ],
)
def test_bad_arguments_exit_2_with_one_clear_line(
    args: list[str], message: str, tmp_path: Path,
) -> None:
    base = {"--ordering": "fifo", "--nodes": "3", "--messages": "5", "--transport": "mem",
            "--out": str(tmp_path)}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    argv = [x for kv in base.items() for x in kv if x]  # "": a flag without a value
    proc = subprocess.run([*ABCAST, "cluster", *argv],
                          check=False, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert message in proc.stderr
    assert proc.stderr.startswith("abcast: error: ") and proc.stderr.count("\n") == 1


# ---------------------------------------------------------------- hostile input


def _host_port(url: str) -> tuple[str, int]:
    host, port = url.removeprefix("tcp://").rsplit(":", 1)
    return host, int(port)


def _throw(address: str, data: bytes) -> None:
    with socket.create_connection(_host_port(address), timeout=5) as sock:
        sock.sendall(data)
        sock.shutdown(socket.SHUT_WR)
        sock.settimeout(5)
        try:
            while sock.recv(4096):  # until the node hangs up on us
                pass
        except ConnectionResetError:
            pass  # it may hang up hard (RST)


@pytest.mark.timeout(90)
def test_random_bytes_and_an_oversize_length_prefix_are_refused_and_the_run_ends_clean(
    tmp_path: Path,
) -> None:
    from abcast.codec import encode_frame
    from abcast.transport._framing import encode_frames
    from abcast.transport._hello import Hello, encode_hello

    rng = random.Random(5)

    def hello(k: int) -> bytes:
        return encode_frames([encode_hello(Hello("intruder", 1, k))])

    attacks = [
        bytes(rng.randrange(256) for _ in range(4096)),  # random bytes
        struct.pack(">I", 2**31 - 1) + b"\x00" * 64,  # length prefix above the maximum
        hello(1) + struct.pack(">I", 2**31 - 1),  # the same, after a valid hello
        hello(2) + encode_frames([bytes(rng.randrange(256) for _ in range(200))]),  # not a frame
        hello(3) + encode_frames([encode_frame("not-our-group", "intruder", _packet())]),
        hello(4) + struct.pack(">I", 1000) + b"truncated",
    ]

    async def attack(handle: ClusterHandle) -> None:
        targets = sorted(handle.addresses.values())
        for i, data in enumerate(attacks):
            await asyncio.to_thread(_throw, targets[i % len(targets)], data)

    config = ClusterConfig(nodes=3, ordering="fifo", transport="tcp", messages=600,
                           out=tmp_path, timeout_s=30)
    result = asyncio.run(run_cluster(config, on_go=attack))
    summary = result.summary()
    assert result.clean, summary
    assert summary["delivered"] == 1800
    # one dropped connection per attack but the frame for another group: well-formed, it
    # is dropped as a frame and its connection kept (abcast.runtime.node's rules)
    assert summary["bad_frames"] == len(attacks) - 1
    assert summary["refused_frames"] == 1  # the one the runtime itself had to refuse


def _packet() -> Packet:
    from abcast.ordering.unordered import UData
    from abcast.reliability.channel import RData

    return Packet((RData(1), UData(1)), b"x")


# ---------------------------------------------------------------- the registry


@pytest.mark.timeout(90)
@pytest.mark.parametrize("transport", ["tcp", "mem"])
def test_killing_the_registry_mid_run_does_not_stop_the_run(
    transport: str, tmp_path: Path,
) -> None:
    killed_while_running = []

    async def kill(handle: ClusterHandle) -> None:
        killed_while_running.append(len(handle.finished) < 3)
        await handle.kill_registry()

    config = ClusterConfig(nodes=3, ordering="fifo", transport=transport, messages=900,
                           out=tmp_path, timeout_s=30)
    result = asyncio.run(run_cluster(config, on_go=kill))
    assert result.clean, result.summary()
    assert killed_while_running == [True]
    assert result.delivered == 2700
    assert [r.transport for r in read_runs(tmp_path)] == [transport]


@pytest.mark.timeout(90)
def test_nodes_started_by_hand_meet_through_the_registry_and_finish_together(
    tmp_path: Path,
) -> None:
    registry = subprocess.Popen(
        [*ABCAST, "registry", "--listen", "tcp://127.0.0.1:0", "--json",
         "--recovery-grace", "0"],
        stdout=subprocess.PIPE, text=True,
    )
    nodes: list[subprocess.Popen[str]] = []
    try:
        assert registry.stdout is not None
        url = json.loads(registry.stdout.readline())["url"]
        for _ in range(3):
            nodes.append(subprocess.Popen(
                [*ABCAST, "node", "--registry", url, "--group", "manual", "--ordering",
                 "fifo", "--size", "3", "--messages", "150", "--run-id", "by-hand",
                 "--out", str(tmp_path)],
                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            ))
        results = []
        for proc in nodes:
            out, err = proc.communicate(timeout=40)
            assert proc.returncode == 0, err[-3000:]
            lines = [json.loads(line) for line in out.splitlines()]
            assert [line["type"] for line in lines] == ["ready", "done", "result"]
            results.append(lines[-1]["outcome"])
        assert sorted(r["node"] for r in results) == ["n1", "n2", "n3"]
        assert all(r["delivered"] == 150 and r["complete"] for r in results)
        runs, events = read_traces(tmp_path)  # the leader committed the run
        assert [r.run_id for r in runs] == ["by-hand"]
        assert check_traces(runs, events) == {"by-hand": []}
    finally:
        for proc in [*nodes, registry]:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            for stream in (proc.stdout, proc.stderr):
                if stream is not None:
                    stream.close()


@pytest.mark.timeout(30)
def test_the_registry_command_exits_cleanly_on_sigterm() -> None:
    proc = subprocess.Popen([*ABCAST, "registry", "--listen", "tcp://127.0.0.1:0"],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        assert proc.stdout.readline().startswith("registry listening on tcp://127.0.0.1:")
        os.kill(proc.pid, signal.SIGTERM)
        assert proc.wait(timeout=20) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()
