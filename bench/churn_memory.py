"""What a long-lived member keeps across view changes (issue #21), in the simulator: three
anchors stay for the whole run while members come and go around them (each cycle one
joins, one leaves gracefully, one crashes), under steady load. After every few cycles it
prints the retained size of an anchor's stack, per layer (abcast.evaluation.retained): a
layer whose size grows with the cycles keeps per-view or per-peer state it never drops.

    .venv/bin/python bench/churn_memory.py --ordering sequencer --cycles 40
"""

from __future__ import annotations

import argparse
import sys

from abcast.evaluation.retained import churn_sizes


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ordering", default="sequencer")
    parser.add_argument("--cycles", type=int, default=40)
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    sizes = churn_sizes(args.ordering, cycles=args.cycles, every=args.every, seed=args.seed)
    names = list(sizes[0][1])
    print("| cycles | " + " | ".join(names) + " |")
    print("|---" * (len(names) + 1) + "|")
    for cycles, per_layer in sizes:
        print(f"| {cycles} | " + " | ".join(str(per_layer[n]) for n in names) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
