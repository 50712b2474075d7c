"""One member process of the fragmentation test (test_runtime_fragments.py): creates or
joins a sequencer group over tcp whose transport refuses frames above --max-frame bytes,
holding a state (--state bytes, seeded) far larger than that; obeys lines on stdin:

    send N SIZE   broadcast N messages of SIZE bytes (each larger than a frame, say)
    report        print what it holds        exit   close and exit

and prints one JSON object per line on stdout (`ready`, `sent`, `report`)."""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import random

from abcast import Group
from abcast.effects import Deliver
from abcast.evaluation.soak_member import stdin_commands


class BigState:
    """A blob of --state bytes plus the digests of what was delivered, in order."""

    def __init__(self, size: int) -> None:
        self.blob = random.Random(7).randbytes(size)
        self.log: list[str] = []
        self.installed = 0  # bytes of the state this member was given at its join

    def on_deliver(self, delivery: Deliver) -> None:
        self.log.append(hashlib.sha256(delivery.payload).hexdigest()[:16])

    def get_state(self) -> bytes:
        return json.dumps(self.log).encode() + b"\n" + self.blob

    def set_state(self, state: bytes) -> None:
        self.installed = len(state)
        log, _, self.blob = state.partition(b"\n")
        self.log = json.loads(log)

    def report(self) -> dict[str, object]:
        chain = hashlib.sha256("".join(self.log).encode()).hexdigest()
        return {"event": "report", "count": len(self.log), "chain": chain,
                "blob": hashlib.sha256(self.blob).hexdigest(), "installed": self.installed}


async def main(args: argparse.Namespace) -> None:
    state = BigState(args.state if args.create else 0)
    transport = f"tcp://127.0.0.1:0?max_frame_bytes={args.max_frame}"
    common = {"registry": args.registry, "transport": transport,
              "on_deliver": state.on_deliver, "get_state": state.get_state,
              "set_state": state.set_state}
    group = (await Group.create("big", ordering="sequencer", **common) if args.create
             else await Group.join("big", **common))
    print(json.dumps({"event": "ready", "node": group.host.id}), flush=True)
    commands = await stdin_commands()
    rng = random.Random(group.host.id)
    while (line := await commands.get()) not in ("", "exit"):
        words = line.split()
        if words[0] == "send":
            for _ in range(int(words[1])):
                await group.broadcast(rng.randbytes(int(words[2])))
            print(json.dumps({"event": "sent"}), flush=True)
        else:
            print(json.dumps(state.report()), flush=True)
    await group.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--registry", required=True)
    parser.add_argument("--create", action="store_true")
    parser.add_argument("--max-frame", type=int, required=True)
    parser.add_argument("--state", type=int, default=0)
    asyncio.run(main(parser.parse_args()))
