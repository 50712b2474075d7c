"""One member process of the churn test (test_runtime_churn.py): creates or joins a
dynamic group holding a replicated hash-chained log (an ordering that claims total
order) or the set of the messages delivered (fifo, causal, unordered: no common order to
chain), writes to it in a closed loop, and obeys lines on stdin:

    stop    stop writing            leave   leave the group gracefully
    report  print the log's state   exit    close and exit

It prints one JSON object per line on stdout (`ready`, `report`, `left`). Every trace row
goes to <out>/<pid>.rows as a JSON line the moment it is recorded (an unbuffered write,
so the rows survive a SIGKILL: the `send` row of a message is on disk before its frame
can leave this process)."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
from pathlib import Path

import msgspec

from abcast import Group, View
from abcast.effects import Deliver
from abcast.evaluation.soak_member import ChainLog, stdin_commands
from abcast.ordering.registry import get_ordering
from abcast.replicated import ReplicatedHandle
from abcast.trace.recorder import TraceRecorder
from abcast.trace.rows import EventRow


class DeliveredSet:
    """The messages delivered, as a set (a joiner gets it as its state): equal digests
    mean the same messages were delivered, in whatever order."""

    def __init__(self) -> None:
        self.items: set[str] = set()

    def on_deliver(self, delivery: Deliver) -> None:
        self.items.add(delivery.payload.decode())

    def get_state(self) -> bytes:
        return json.dumps(sorted(self.items)).encode()

    def set_state(self, state: bytes) -> None:
        self.items = set(json.loads(state))

    def bind(self, group: object) -> None:
        pass

    def state(self) -> tuple[str, int]:
        joined = "\n".join(sorted(self.items))
        return hashlib.sha256(joined.encode()).hexdigest(), len(self.items)


def emit(**fields: object) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


class RowFile:
    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self._encode = msgspec.json.Encoder().encode

    def __call__(self, row: EventRow) -> None:
        os.write(self._fd, self._encode(row) + b"\n")


async def main(args: argparse.Namespace) -> None:
    recorder = TraceRecorder(args.run_id, sink=RowFile(Path(args.out) / f"{os.getpid()}.rows"),
                             keep_rows=False)
    total = "total" in get_ordering(args.ordering).guarantees
    handle = ReplicatedHandle(ChainLog())
    delivered = DeliveredSet()
    views: list[View] = []
    common = {"registry": args.registry, "transport": "tcp://127.0.0.1:0",
              "app": handle if total else delivered,
              "recorder": recorder, "on_view": views.append, "recheck_s": 0.2}
    if args.create:
        group = await Group.create(args.group, ordering=args.ordering, **common)
    else:
        group = await Group.join(args.group, **common)
    emit(event="ready", node=group.node, members=list(group.members))
    lines = await stdin_commands()
    writing = True

    async def write_loop() -> None:
        k = 0
        while writing and group.active:
            k += 1
            if total:
                await handle.append(f"{group.node}:{k}")
            else:
                await group.broadcast(f"{group.node}:{k}".encode())
            await asyncio.sleep(args.pause)

    writer = asyncio.create_task(write_loop())
    while True:
        command = (await lines.get()).strip()
        if command in ("stop", "leave", ""):
            writing = False
            await asyncio.gather(writer, return_exceptions=True)
        if command == "leave":
            await group.leave()
            emit(event="left", node=group.node, graceful=group.removed_view is not None)
        elif command == "report":
            digest, count = ((handle.local.digest, handle.local.count) if total
                             else delivered.state())
            emit(event="report", node=group.node, digest=digest, count=count,
                 members=list(views[-1].members) if views else [], active=group.active)
        elif command in ("exit", ""):
            break
    if total:
        await handle.close()
    await group.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--registry", required=True)
    parser.add_argument("--group", default="churn")
    parser.add_argument("--ordering", default="matrix")
    parser.add_argument("--create", action="store_true")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--pause", type=float, default=0.03)
    asyncio.run(main(parser.parse_args()))
