"""Transport micro-benchmark: frames/s from one sender to one receiver, per transport.

Usage: .venv/bin/python bench/transport_micro.py [--frames N] [--size 64]
           [--schemes tcp,mem,zmq,grpc,pyro] [--split] [--uvloop]

Each run starts a receiver and a sender on 127.0.0.1 (port 0), sends N frames of
`size` bytes as fast as `send` + `drain` allow (writes coalesce once per loop turn),
and times from the first send until the receiver has counted every frame
(time.monotonic, which one process can compare with another's on Linux). By default
both ends share one process and one event loop (one core does all the work); --split
runs the receiver in a child process (the mem transport is in-process only and is
skipped then). Prints one line per transport; nothing is asserted.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import sys
import time
from collections.abc import Coroutine
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from abcast.transport import Link, Transport, transport_from_url

T = TypeVar("T")

DEFAULT_FRAMES = {"tcp": 300_000, "mem": 300_000, "zmq": 300_000, "grpc": 300_000, "pyro": 100_000}
CHUNK = 2000  # frames queued between two drain() calls


def bind_url(scheme: str) -> str:
    return "mem://" if scheme == "mem" else f"{scheme}://127.0.0.1:0"


class Counter:
    """on_frame that notes the first arrival and resolves `done` at the last one."""

    def __init__(self, target: int) -> None:
        self.count = 0
        self.target = target
        self.first = 0.0
        self.done: asyncio.Future[float] = asyncio.get_running_loop().create_future()

    def __call__(self, link: Link, frame: bytes) -> None:
        if self.count == 0:
            self.first = time.monotonic()
        self.count += 1
        if self.count == self.target and not self.done.done():
            self.done.set_result(time.monotonic())


async def send_all(sender: Transport, frames: int, size: int) -> float:
    """Queue `frames` frames for node "r", draining every CHUNK; returns the start time."""
    payload = bytes(size)
    started = time.monotonic()
    for start in range(0, frames, CHUNK):
        for _ in range(min(CHUNK, frames - start)):
            sender.send("r", payload)
        await sender.drain()
    return started


async def start_sender(scheme: str, address: str) -> Transport:
    sender = transport_from_url(bind_url(scheme))
    await sender.start("s", lambda link, frame: None)
    sender.add_peer("r", address)
    return sender


async def one_process(scheme: str, frames: int, size: int) -> float:
    counter = Counter(frames)
    receiver = transport_from_url(bind_url(scheme))
    address = await receiver.start("r", counter)
    sender = await start_sender(scheme, address)
    try:
        started = await send_all(sender, frames, size)
        finished = await asyncio.wait_for(counter.done, 120)
    finally:
        await sender.close()
        await receiver.close()
    return frames / (finished - started)


def _receiver_process(scheme: str, frames: int, conn: Connection, use_uvloop: bool) -> None:
    async def main() -> None:
        counter = Counter(frames)
        receiver = transport_from_url(bind_url(scheme))
        conn.send(await receiver.start("r", counter))
        try:
            conn.send(await asyncio.wait_for(counter.done, 120))
        finally:
            await receiver.close()

    _run(main(), use_uvloop)


async def split_process(scheme: str, frames: int, size: int, use_uvloop: bool) -> float:
    """From the first send to the last arrival (time.monotonic is system-wide on Linux)."""
    ctx = multiprocessing.get_context("spawn")
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_receiver_process, args=(scheme, frames, child, use_uvloop))
    proc.start()
    sender: Transport | None = None
    try:
        address = await asyncio.to_thread(parent.recv)
        sender = await start_sender(scheme, address)
        started = await send_all(sender, frames, size)
        finished: float = await asyncio.to_thread(parent.recv)
    finally:
        if sender is not None:
            await sender.close()
        await asyncio.to_thread(proc.join, 30)
    return frames / (finished - started)


def _run(coro: Coroutine[Any, Any, T], use_uvloop: bool) -> T:
    if use_uvloop:
        import uvloop

        return uvloop.run(coro)
    return asyncio.run(coro)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--frames", type=int, default=0, help="frames per transport")
    parser.add_argument("--size", type=int, default=64, help="frame size in bytes")
    parser.add_argument("--schemes", default="tcp,mem,zmq,grpc,pyro")
    parser.add_argument("--split", action="store_true", help="receiver in another process")
    parser.add_argument("--uvloop", action="store_true", help="run the loops on uvloop")
    args = parser.parse_args(argv)
    mode = "2 processes" if args.split else "1 process"
    loop_name = "uvloop" if args.uvloop else "asyncio"
    print(f"transport micro-benchmark: {args.size}-byte frames, 1 sender -> 1 receiver, "
          f"{mode}, {loop_name}")
    for scheme in args.schemes.split(","):
        if args.split and scheme == "mem":
            continue
        frames = args.frames or DEFAULT_FRAMES[scheme]
        if args.split:
            rate = _run(split_process(scheme, frames, args.size, args.uvloop), args.uvloop)
        else:
            rate = _run(one_process(scheme, frames, args.size), args.uvloop)
        print(f"  {scheme:5} {frames:>8} frames  {rate:>12,.0f} frames/s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
