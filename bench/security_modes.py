"""Benchmark: what link security costs — plaintext, MAC-only (a group secret), AEAD (a
secret, frames encrypted) and TLS (mutual, tcps://) — for a sequencer group of n = 3 real
node processes on tcp over loopback, tracing off.

Rules: every round runs every mode (the order rotates per round, so each mode sees the
same machine), twice: closed loop with many messages in flight (`throughput`, messages
per second, and `cpu`: CPU µs the node and registry processes spent per message, which
other load on the machine disturbs far less than wall time) and `--serial`, one message
in flight (`lone p50`, µs). The secret reaches
the node processes and the registry as a person would give it, through $ABCAST_SECRET;
TLS uses a throwaway CA and certificate (abcast.testing.pki) made for this run. Prints
every run, then per mode the median over rounds and its ratio to plaintext's median
of the same run. A benchmark, not a test: it asserts nothing about time.

    .venv/bin/python bench/security_modes.py [--rounds 3] [--messages 20000]
        [--serial-messages 2000] [--json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import statistics
import tempfile
from pathlib import Path
from urllib.parse import urlencode

from abcast.evaluation.cluster import ClusterConfig
from abcast.evaluation.launcher import run_cluster
from abcast.testing.pki import make_pki

MODES = ("plaintext", "mac", "aead", "tls")
SECRET = "bench-security-modes-secret"


def mode_config(mode: str, pki_dir: Path) -> tuple[str, str, dict[str, str]]:
    """(scheme, transport options, environment) of one mode."""
    if mode == "mac":
        return "tcp", "", {"ABCAST_SECRET": SECRET}
    if mode == "aead":
        return "tcp", "aead=1", {"ABCAST_SECRET": SECRET}
    if mode == "tls":
        pki = make_pki(pki_dir)
        return "tcps", urlencode({"tls_cert": pki.cert, "tls_key": pki.key,
                                  "tls_ca": pki.ca}), {}
    return "tcp", "", {}


def run_one(mode: str, serial: bool, messages: int, out: Path, pki_dir: Path) -> dict[str, object]:
    scheme, options, env = mode_config(mode, pki_dir)
    config = ClusterConfig(nodes=3, ordering="sequencer", transport=scheme, messages=messages,
                           out=out, serial=serial, trace=False, transport_options=options,
                           timeout_s=300.0)
    saved = os.environ.pop("ABCAST_SECRET", None)
    os.environ.update(env)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    try:
        result = asyncio.run(run_cluster(config))
        after = resource.getrusage(resource.RUSAGE_CHILDREN)  # the children are reaped
    finally:
        os.environ.pop("ABCAST_SECRET", None)
        if saved is not None:
            os.environ["ABCAST_SECRET"] = saved
    summary = result.summary()
    if not result.complete:
        raise SystemExit(f"{mode} run incomplete: {summary}")
    cpu_s = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    summary["cpu_us_per_msg"] = round(cpu_s / messages * 1e6, 1) if messages else None
    return summary


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--serial-messages", type=int, default=2_000)
    parser.add_argument("--json", action="store_true", help="One JSON object at the end.")
    args = parser.parse_args()
    throughput: dict[str, list[float]] = {m: [] for m in MODES}
    lone_p50: dict[str, list[float]] = {m: [] for m in MODES}
    cpu: dict[str, list[float]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory(prefix="abcast-secbench-") as tmp:
        out, pki_dir = Path(tmp) / "out", Path(tmp) / "pki"
        for r in range(args.rounds):
            order = MODES[r % len(MODES):] + MODES[: r % len(MODES)]
            for mode in order:
                closed = run_one(mode, False, args.messages, out, pki_dir)
                lone = run_one(mode, True, args.serial_messages, out, pki_dir)
                tput = float(closed["throughput_msgs_per_s"] or 0.0)  # type: ignore[arg-type]
                p50 = float(lone["latency_p50_us"] or 0.0)  # type: ignore[arg-type]
                per_msg = float(closed["cpu_us_per_msg"] or 0.0)  # type: ignore[arg-type]
                throughput[mode].append(tput)
                lone_p50[mode].append(p50)
                cpu[mode].append(per_msg)
                print(f"round {r + 1} {mode:9s} throughput {tput:9.1f} msg/s   "
                      f"cpu {per_msg:7.1f} µs/msg   lone p50 {p50:8.1f} µs", flush=True)
    base_t = statistics.median(throughput["plaintext"])
    base_p = statistics.median(lone_p50["plaintext"])
    base_c = statistics.median(cpu["plaintext"])
    table = {}
    print(f"\nmedians over {args.rounds} rounds (n=3, sequencer, tcp loopback, "
          f"{args.messages} msgs closed loop, {args.serial_messages} serial)")
    for mode in MODES:
        t, p = statistics.median(throughput[mode]), statistics.median(lone_p50[mode])
        c = statistics.median(cpu[mode])
        table[mode] = {"throughput_msgs_per_s": t, "lone_p50_us": p, "cpu_us_per_msg": c,
                       "throughput_ratio": round(t / base_t, 3) if base_t else None,
                       "p50_ratio": round(p / base_p, 3) if base_p else None,
                       "cpu_ratio": round(c / base_c, 3) if base_c else None,
                       "throughput_runs": throughput[mode], "p50_runs": lone_p50[mode],
                       "cpu_runs": cpu[mode]}
        print(f"{mode:9s} throughput {t:9.1f} msg/s (x{t / base_t:.2f})   "
              f"cpu {c:7.1f} µs/msg (x{c / base_c:.2f})   "
              f"lone p50 {p:8.1f} µs (x{p / base_p:.2f})")
    if args.json:
        print(json.dumps(table))


if __name__ == "__main__":
    main()
