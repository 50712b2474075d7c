"""`abcast sim` as a user runs it: exit codes, the JSON line, the files it writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ABCAST = [sys.executable, "-m", "abcast.cli"]


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*ABCAST, *args], capture_output=True, text=True, timeout=300,
                          check=False)


def test_issue_example_delivers_everything_and_writes_the_same_rows_twice(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    args = ["sim", "--ordering", "fifo", "--nodes", "5", "--messages", "2000", "--seed", "3",
            "--faults", "drop=0.1,dup=0.05,delay=1-30ms", "--json"]
    first = _run(*args, "--out", str(tmp_path / "a"))
    second = _run(*args, "--out", str(tmp_path / "b"))
    assert first.returncode == 0, first.stderr
    assert second.returncode == 0, second.stderr
    summary = json.loads(first.stdout.strip().splitlines()[-1])
    assert summary["delivered"] == 10_000 and summary["violations"] == {}
    assert {"run_id", "ordering", "nodes", "messages", "delivered", "violations"} <= set(summary)
    run_id = summary["run_id"]
    for node in ("n1", "n2", "n3", "n4", "n5"):
        a = pq.read_table(tmp_path / "a" / "events" / run_id / f"{node}.parquet")
        b = pq.read_table(tmp_path / "b" / "events" / run_id / f"{node}.parquet")
        assert a.num_rows > 0 and a.equals(b)
    runs = pq.read_table(tmp_path / "a" / "runs.parquet").to_pylist()
    assert [r["guarantees"] for r in runs] == [["integrity", "validity", "agreement", "fifo"]]


def test_violations_exit_1(tmp_path: Path) -> None:
    # n1→n2 is cut past the one-hour virtual limit: n2 never delivers (AGREEMENT).
    proc = _run("sim", "--ordering", "unordered", "--nodes", "2", "--messages", "2",
                "--faults", "partition=n1>n2@0us-7200s", "--out", str(tmp_path), "--json")
    assert proc.returncode == 1, proc.stderr
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    assert summary["violations"].get("AGREEMENT", 0) >= 1


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--faults", "drop=2"], "must be in [0, 1)"),
        (["--faults", "crash=n9@1ms"], "outside n1..n3"),
        (["--nodes", "0"], "'0' is not at least 1"),
        (["--ordering", "nope"], "'nope' is not one of"),
        (["--order-interval-ms", "5"], "no sequencer to time"),
    ],
)
def test_bad_arguments_exit_2_with_one_clear_line(
    tmp_path: Path, args: list[str], message: str
) -> None:
    base = {"--ordering": "fifo", "--nodes": "3", "--messages": "5", "--out": str(tmp_path)}
    for flag, value in zip(args[::2], args[1::2], strict=True):
        base[flag] = value
    proc = _run("sim", *[x for kv in base.items() for x in kv])
    assert proc.returncode == 2
    assert message in proc.stderr
    assert proc.stderr.startswith("abcast: error: ") and proc.stderr.count("\n") == 1


def test_an_order_interval_orders_several_ids_a_packet(tmp_path: Path) -> None:
    """`--order-interval-ms` reaches the sequencer: under load fewer packets a broadcast."""
    base = ["sim", "--ordering", "sequencer", "--nodes", "3", "--messages", "300",
            "--rate", "2000", "--json"]
    ppb = []
    for interval in ("0", "10"):
        proc = _run(*base, "--order-interval-ms", interval, "--out", str(tmp_path / interval))
        assert proc.returncode == 0, proc.stderr
        summary = json.loads(proc.stdout.strip().splitlines()[-1])
        assert summary["violations"] == {}
        ppb.append(summary["packets_per_broadcast"])
    assert ppb[0] > ppb[1], ppb


def test_the_cluster_passes_the_order_interval_to_its_nodes(tmp_path: Path) -> None:
    from abcast.evaluation.cluster import ClusterConfig
    from abcast.evaluation.launcher import node_command
    from abcast.ordering.registry import OrderingOptions

    config = ClusterConfig(nodes=3, ordering="sequencer", transport="tcp", messages=1,
                           out=tmp_path, options=OrderingOptions(order_interval_ms=2.5))
    cmd = node_command(config, "tcp://127.0.0.1:1", "run")
    assert cmd[cmd.index("--order-interval-ms") + 1] == "2.5"
    assert "--order-interval-ms" not in node_command(
        ClusterConfig(nodes=3, ordering="sequencer", transport="tcp", messages=1,
                      out=tmp_path), "tcp://127.0.0.1:1", "run")


@pytest.mark.parametrize(("flags", "label"), [(["--no-opt-compensate"], "optimistic=plain"),
                                              (["--opt-alpha", "0.5"], "optimistic_alpha=0.5")])
def test_the_optimistic_flags_reach_the_run(tmp_path: Path, flags: list[str],
                                            label: str) -> None:
    import pyarrow.parquet as pq

    proc = _run("sim", "--ordering", "optimistic", "--nodes", "3", "--messages", "30",
                *flags, "--out", str(tmp_path), "--json")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout.strip().splitlines()[-1])["violations"] == {}
    runs = pq.read_table(tmp_path / "runs.parquet").to_pylist()
    assert [r["options"] for r in runs] == [label]


@pytest.mark.parametrize("interval_ms", [6000.0, 10_000.0])  # 10 000: the most accepted
def test_any_accepted_order_interval_gives_a_correct_run(interval_ms: float) -> None:
    """The harness settles for the order interval too: a lone broadcast waits out one
    interval before it is ordered, and that is no VALIDITY violation (settle was 5 s)."""
    from abcast.ordering.registry import OrderingOptions
    from abcast.sim.harness import SimConfig, run_simulation

    result = run_simulation(SimConfig(
        "sequencer", nodes=3, messages=1, seed=1,
        options=OrderingOptions(order_interval_ms=interval_ms)))
    assert result.violations == [] and result.delivered == 3
    assert result.quiescent


def test_a_slow_open_loop_is_no_stall(tmp_path: Path) -> None:
    """One broadcast every 50 s is slow, not stuck: the stall covers the rate's gap."""
    done = _run("sim", "--ordering", "fifo", "--nodes", "3", "--messages", "3", "--rate",
                "0.02", "--out", str(tmp_path), "--json")
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    assert summary["quiescent"] and summary["delivered"] == 9


def test_an_unfinished_sim_exits_1_saying_why(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Planted: the harness gives up after 1 s of silence, in a run with 50 s between
    broadcasts. The run is clean so far but not quiescent: exit 1 and one line on stderr
    (the same rule as `abcast cluster`)."""
    from abcast.cli import main
    from abcast.sim.harness import SimConfig

    monkeypatch.setattr(SimConfig, "quiet_us", lambda self: (5_000_000, 1_000_000))
    monkeypatch.setattr(sys, "argv", ["abcast", "sim", "--ordering", "fifo", "--nodes", "3",
                                      "--messages", "3", "--rate", "0.02",
                                      "--out", str(tmp_path), "--json"])
    with pytest.raises(SystemExit) as exit_:
        main()
    out, err = capsys.readouterr()
    assert exit_.value.code == 1
    assert json.loads(out.strip().splitlines()[-1])["quiescent"] is False
    assert err.count("abcast: run incomplete: not quiescent") == 1
