"""One node of a peer system, run as its own process: PySyncObj (Raft) or Redis Streams.

Rules: the same workload as abcast's nodes (abcast.workload.RoundRobin over nodes
n1…nN; closed loop, or open loop at `rate` broadcasts/s over the group) and the same
payloads (the send time stamped into the first 8 bytes, so latency is a delivery's time
minus its stamp, at every node, as abcast's untraced runs measure it). A node has
"delivered" a message when it applies it: PySyncObj calls the `@replicated` method on
every node in log order; with Redis, every node XREADs (blocking) the one stream that all
XADD to — the server is the sequencer. Messages are identified by (origin, seq), and a
repeated one (a PySyncObj command retried after a failure callback) is applied once.

The open loop sends on schedule but keeps at most `WINDOW` of its own messages
unapplied: a system past saturation then runs at its capacity instead of queueing
without bound (PySyncObj drops commands once its queue is full).

Control, as abcast's node processes: one JSON line `{"ready": …}` on stdout, `go` on
stdin, `{"done": …}` once all M are applied, `stop` (or EOF) on stdin, then one
`{"result": …}` line. Entry point: `python -m abcast.evaluation.peer_worker …`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import threading
import time
from array import array
from collections.abc import Callable
from typing import Any, Final

from abcast.ids import NodeId
from abcast.workload import RoundRobin

STAMP_BYTES: Final = 8
WINDOW: Final = 2000
STREAM: Final = "abcast-bench"
XREAD_COUNT: Final = 2000
XADD_BATCH: Final = 500
RETRY_S: Final = 0.01
RESUBMIT_AFTER_S: Final = 5.0


def emit(kind: str, **fields: Any) -> None:
    sys.stdout.write(json.dumps({kind: fields}) + "\n")
    sys.stdout.flush()


class Bookkeeping:
    """The workload on this node: what to send next, what was applied, the latencies.

    Called from one thread at a time (PySyncObj's apply thread or the asyncio loop) except
    `in_flight`, which is a read."""

    def __init__(self, me: NodeId, nodes: tuple[NodeId, ...], messages: int, payload: int,
                 rate: float | None) -> None:
        self.me = me
        self.workload = RoundRobin(nodes, messages)
        self.messages = messages
        self.payload_size = max(payload, STAMP_BYTES)
        self.rate = rate
        self.applied: set[tuple[str, int]] = set()
        self.own_applied = 0
        # own messages submitted but not yet applied here: seq → (message, submitted at)
        self.unapplied: dict[int, tuple[tuple[str, int, bytes], float]] = {}
        self.latencies = array("q")
        self.go_ns = 0
        self.last_ns = 0
        self.finished = threading.Event()
        # PySyncObj applies on its own thread while the open loop sends from the main one
        self._lock = threading.Lock()
        if messages == 0:
            self.finished.set()

    def next_message(self) -> tuple[str, int, bytes] | None:
        w = self.workload
        with self._lock:
            if w.sent_by(self.me) >= w.total_of(self.me):
                return None
            w.note_sent(self.me)
            seq = w.sent_by(self.me)
        stamp = time.time_ns().to_bytes(STAMP_BYTES, "big")
        return self.me, seq, stamp + bytes(self.payload_size - STAMP_BYTES)

    def in_flight(self) -> int:
        return self.workload.sent_by(self.me) - self.own_applied

    def on_apply(self, origin: str, seq: int, payload: bytes) -> bool:
        """Note one applied message; True when the closed loop may send its next one."""
        key = (origin, seq)
        with self._lock:
            if key in self.applied:
                return False
            self.applied.add(key)
            ready = self.workload.on_deliver(self.me, NodeId(origin), seq)
        now = time.time_ns()
        self.last_ns = now
        self.latencies.append(now - int.from_bytes(payload[:STAMP_BYTES], "big"))
        if origin == self.me:
            self.own_applied += 1
            self.unapplied.pop(seq, None)
        if len(self.applied) >= self.messages:
            self.finished.set()
        return self.rate is None and ready

    def result(self) -> dict[str, Any]:
        return {"node": self.me, "delivered": len(self.applied), "go_ns": self.go_ns,
                "last_ns": self.last_ns, "complete": len(self.applied) >= self.messages,
                "latencies_ns": list(self.latencies)}


def _schedule(book: Bookkeeping, index: int, size: int) -> list[float]:
    """Offsets (s) from go at which this node's open-loop messages are due."""
    assert book.rate is not None
    return [k / book.rate for k in range(index, book.messages, size)]


# ---------------------------------------------------------------- PySyncObj


def run_pysyncobj(book: Bookkeeping, index: int, addresses: list[str], tuned: bool,
                  commands: Callable[[], str]) -> None:
    from pysyncobj import FAIL_REASON, SyncObj, SyncObjConf, replicated

    conf = (SyncObjConf(appendEntriesPeriod=0.005, autoTickPeriod=0.005) if tuned
            else SyncObjConf())
    conf.commandsQueueSize = max(conf.commandsQueueSize, 4 * WINDOW * len(addresses))
    # No log compaction: a follower catching up from a snapshot never calls the
    # @replicated method for the compacted entries, so it would never count them applied.
    conf.logCompactionMinEntries = conf.logCompactionMinTime = 10**9

    class ReplicatedLog(SyncObj):  # type: ignore[misc]
        def __init__(self) -> None:
            me = addresses[index]
            super().__init__(me, [a for a in addresses if a != me], conf)

        @replicated  # type: ignore[untyped-decorator]
        def append(self, origin: str, seq: int, payload: bytes) -> None:
            if book.on_apply(origin, seq, payload):
                submit_next()

    log = ReplicatedLog()

    def submit(message: tuple[str, int, bytes]) -> None:
        def retry_on_failure(_result: object, error: int) -> None:
            if error != FAIL_REASON.SUCCESS and (message[0], message[1]) not in book.applied:
                threading.Timer(RETRY_S, submit, args=(message,)).start()

        book.unapplied[message[1]] = (message, time.monotonic())
        log.append(*message, callback=retry_on_failure)

    def resubmit_forgotten() -> None:
        # A command forwarded to a leader that then lost it gets no callback at all.
        while not book.finished.wait(RESUBMIT_AFTER_S / 2):
            now = time.monotonic()
            for message, since in list(book.unapplied.values()):
                if now - since > RESUBMIT_AFTER_S and message[1] in book.unapplied:
                    submit(message)

    def submit_next() -> None:
        message = book.next_message()
        if message is not None:
            submit(message)

    while log._getLeader() is None:  # PySyncObj's only leader query
        time.sleep(0.01)
    emit("ready", node=book.me)
    if commands() != "go":
        log.destroy()
        return
    book.go_ns = time.time_ns()
    threading.Thread(target=resubmit_forgotten, daemon=True).start()
    if book.rate is None:
        if book.me in book.workload.initial():
            submit_next()
    else:
        start = time.monotonic()
        for due in _schedule(book, index, len(addresses)):
            while book.in_flight() >= WINDOW:
                time.sleep(0.0005)
            delay = start + due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            submit_next()
    book.finished.wait()
    emit("done", node=book.me)
    commands()  # stop
    emit("result", **book.result())
    log.destroy()


# ---------------------------------------------------------------- Redis Streams


async def run_redis(book: Bookkeeping, index: int, nodes: int, port: int,
                    commands: Callable[[], str]) -> None:
    import redis.asyncio as aioredis

    reader = aioredis.Redis(host="127.0.0.1", port=port)
    writer = aioredis.Redis(host="127.0.0.1", port=port)
    wake = asyncio.Event()  # the closed loop may send

    async def read_stream() -> None:
        last = "0-0"
        while not book.finished.is_set():
            reply: Any = await reader.xread({STREAM: last}, count=XREAD_COUNT, block=1000)
            for _stream, entries in reply or ():
                for entry_id, fields in entries:
                    last = entry_id
                    if book.on_apply(fields[b"o"].decode(), int(fields[b"s"]), fields[b"p"]):
                        wake.set()

    async def send(batch: list[tuple[str, int, bytes]]) -> None:
        async with writer.pipeline(transaction=False) as pipe:
            for origin, seq, payload in batch:
                pipe.xadd(STREAM, {"o": origin, "s": seq, "p": payload})
            await pipe.execute()

    async def closed_loop() -> None:
        if book.me in book.workload.initial():
            wake.set()
        while not book.finished.is_set():
            await wake.wait()
            wake.clear()
            message = book.next_message()
            if message is not None:
                await send([message])

    async def open_loop() -> None:
        loop = asyncio.get_running_loop()
        start = loop.time()
        pending = _schedule(book, index, nodes)
        i = 0
        while i < len(pending):
            delay = start + pending[i] - loop.time()
            if delay > 0 or book.in_flight() >= WINDOW:
                await asyncio.sleep(max(delay, 0.0005))
                continue
            due = 0
            while (i + due < len(pending) and due < XADD_BATCH
                   and start + pending[i + due] <= loop.time()):
                due += 1
            batch = [m for _ in range(due) if (m := book.next_message()) is not None]
            i += due
            await send(batch)

    await reader.ping()
    emit("ready", node=book.me)
    if await asyncio.to_thread(commands) != "go":
        return
    book.go_ns = time.time_ns()
    tasks = [asyncio.create_task(read_stream()),
             asyncio.create_task(closed_loop() if book.rate is None else open_loop())]
    await asyncio.to_thread(book.finished.wait)
    emit("done", node=book.me)
    await asyncio.to_thread(commands)  # stop
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    emit("result", **book.result())
    await reader.aclose()
    await writer.aclose()


# ---------------------------------------------------------------- entry point


def _read_command() -> str:
    line = sys.stdin.readline()
    return line.strip() or "stop"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="one node of a bench peer")
    parser.add_argument("--peer", required=True,
                        choices=["pysyncobj-default", "pysyncobj-tuned", "redis"])
    parser.add_argument("--index", type=int, required=True)
    parser.add_argument("--nodes", type=int, required=True)
    parser.add_argument("--messages", type=int, required=True)
    parser.add_argument("--payload", type=int, default=64)
    parser.add_argument("--rate", type=float, default=None)
    parser.add_argument("--addresses", default="", help="PySyncObj: host:port,… of all nodes")
    parser.add_argument("--redis-port", type=int, default=0)
    args = parser.parse_args(argv)
    nodes = tuple(NodeId(f"n{i + 1}") for i in range(args.nodes))
    book = Bookkeeping(nodes[args.index], nodes, args.messages, args.payload, args.rate)
    if args.peer == "redis":
        asyncio.run(run_redis(book, args.index, args.nodes, args.redis_port, _read_command))
    else:
        run_pysyncobj(book, args.index, args.addresses.split(","),
                      args.peer == "pysyncobj-tuned", _read_command)
    return 0


if __name__ == "__main__":
    sys.exit(main())
