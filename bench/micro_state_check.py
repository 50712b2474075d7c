"""What a replica's state check costs a write: `Replica.apply` of one @write on an object
holding N entries (plus the ten keys the writes put), for a class without state hooks
(its whole state checked, and kept for the undo, after every write:
abcast.replicated.replica) and for `ReplicatedDict` (its own hooks and key check: no
state check), beside a bare call of the method. Prints µs per write, the best of
`--repeat` runs, in this process's CPU time (other load on the machine disturbs it less
than wall time). A benchmark, not a test.

    .venv/bin/python bench/micro_state_check.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from abcast.replicated import Replica, ReplicatedDict, replicated, write

WRITES = 300


@replicated
class PlainDict:
    """A dictionary without hooks: its whole state is checked after every write."""

    def __init__(self) -> None:
        self.data: dict[str, Any] = {}

    @write
    def put(self, key: str, value: Any) -> None:
        self.data[key] = value


def per_write(cls: type, entries: int, value: str, replica: bool) -> float:
    obj = cls()
    obj.data.update({f"k{i}": ([i, "v"] if value == "[int, str]" else i)
                     for i in range(entries)})
    copy = Replica(obj, "n1")
    calls = [copy.invocation("put", (f"w{i % 10}", i)) for i in range(WRITES)]
    start = time.process_time()
    if replica:
        for seq, call in enumerate(calls, 1):
            copy.apply("n2", seq, call)
    else:
        for i in range(WRITES):
            obj.put(f"w{i % 10}", i)
    return (time.process_time() - start) / WRITES * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    print(f"{'class':<15} {'entries':>7} {'values':<10} {'bare call':>10} {'apply':>10}  µs/write")
    for cls in (PlainDict, ReplicatedDict):
        for entries in (10, 1_000, 10_000):
            for value in ("int", "[int, str]"):
                bare = min(per_write(cls, entries, value, False) for _ in range(args.repeat))
                applied = min(per_write(cls, entries, value, True) for _ in range(args.repeat))
                print(f"{cls.__name__:<15} {entries:>7} {value:<10} {bare:>10.1f} "
                      f"{applied:>10.1f}")


if __name__ == "__main__":
    main()
