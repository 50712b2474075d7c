"""Fuzz every decoder of a peer's bytes (and the trace reader) with `--cases` inputs
each (abcast.testing.fuzz: valid inputs mutated structure-aware and byte-wise), and
print per decoder the cases run, how many were accepted (decoded to a value), refused
with the declared exception, escaped with another exception, or hung (no answer within
`--hang-s`, caught by SIGALRM). Escapes are written to `--out` as reproducers. Exits 1
on any escape or hang.

    .venv/bin/python bench/fuzz_decoders.py [--cases 100000] [--seed 1] [--only wire.]
"""

from __future__ import annotations

import argparse
import random
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from types import FrameType

from rich.console import Console
from rich.progress import track

from abcast.testing.fuzz import Target, case
from abcast.testing.fuzz_targets import targets

_STDERR = Console(stderr=True)


class _HangError(Exception):
    pass


def _alarm(_signum: int, _frame: FrameType | None) -> None:
    raise _HangError


def fuzz(target: Target, cases: int, seed: int, hang_s: float, out: Path) -> Counter[str]:
    rng = random.Random(f"{seed}:{target.name}")
    counts: Counter[str] = Counter()
    for i in track(range(cases), description=f"{target.name:28}", transient=True,
                   console=_STDERR, update_period=0.5):
        data = case(target, rng)
        signal.setitimer(signal.ITIMER_REAL, hang_s)
        try:
            target.decode(data)
            counts["accepted"] += 1
        except _HangError:
            counts["hung"] += 1
            (out / f"{target.name}-hang-{i}.bin").write_bytes(data)
        except target.declared:
            counts["refused"] += 1
        except Exception as exc:  # what we are looking for
            counts["escaped"] += 1
            counts[f"escaped {type(exc).__name__}"] += 1
            if counts[f"escaped {type(exc).__name__}"] <= 3:
                (out / f"{target.name}-{type(exc).__name__}-{i}.bin").write_bytes(data)
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0)
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--cases", type=int, default=100_000, help="per decoder")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--only", default="", help="decoders whose name contains this")
    parser.add_argument("--hang-s", type=float, default=5.0)
    parser.add_argument("--out", type=Path, default=Path("out/fuzz"))
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    signal.signal(signal.SIGALRM, _alarm)
    chosen = [t for t in targets() if args.only in t.name]
    print(f"{'decoder':28} {'cases':>8} {'accepted':>9} {'refused':>9} {'escaped':>8} "
          f"{'hung':>5} {'s':>7}  declared")
    bad = 0
    total = 0
    for target in chosen:
        start = time.monotonic()
        counts = fuzz(target, args.cases, args.seed, args.hang_s, args.out)
        took = time.monotonic() - start
        total += args.cases
        bad += counts["escaped"] + counts["hung"]
        declared = ", ".join(e.__name__ for e in target.declared)
        kinds = " ".join(f"{k[8:]}={v}" for k, v in counts.items() if k.startswith("escaped "))
        print(f"{target.name:28} {args.cases:>8,} {counts['accepted']:>9,} "
              f"{counts['refused']:>9,} {counts['escaped']:>8,} {counts['hung']:>5,} "
              f"{took:>7.1f}  {declared}{'  ' + kinds if kinds else ''}", flush=True)
    print(f"{len(chosen)} decoders, {total:,} cases, {bad:,} escaped or hung")
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
