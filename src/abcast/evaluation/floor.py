"""The floor: a do-nothing sequencer, measured exactly as `abcast cluster` measures abcast.

Rules. What the floor does: each node is one process on one asyncio (or uvloop) loop
with one TCP connection to every peer on loopback, read and written through asyncio
`Protocol`s; the lowest member is the sequencer. A node's broadcasts of one loop turn
leave as one data frame (first sequence number + payloads) to every other member; the
sequencer gives each data frame the next number as one unit and announces the numbers of
one loop turn in one order frame; every node delivers frames in number order once it
holds number and body, handing the application one `Deliver` per message. The message
pattern is the sequencer's (data to all, then numbered ids: 2(n−1) packets a batch).

What it does not do: no reliable channel (TCP's order and retransmission are all there
is), no failure detector, no membership, views, flush or fail-over, no tracing, no
checks, no protocol layers or effects, no bad-input handling beyond refusing a frame
that does not decode. It is not a protocol anyone should use: it is what the machine and
the interpreter allow for this pattern, the bound abcast's figures are divided by.

What it shares with abcast's bench, so the ratio measures only the difference: the
workload and its measurement (abcast.evaluation.worker's `_Run`: round robin, open loop,
closed loop or serial, latency from the send time stamped into the payload), the node
processes' start-up and handshake (abcast.evaluation.launcher: registry, `ready`, `go`,
`done`, `stop`, the result line) and the event-loop choice (`run_async`).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
from collections.abc import Callable
from typing import Any, Final, cast

import msgspec

from abcast.effects import Deliver
from abcast.errors import AbcastError, RemoteProtocolError
from abcast.evaluation.worker import (
    Control,
    Failed,
    Result,
    StoppedError,
    WorkerConfig,
    WorkerOutcome,
    _Run,
    emit,
    run_pipe_node,
)
from abcast.ids import NodeId, sorted_nodes
from abcast.registry.client import RegistryClient
from abcast.runtime.loop import run_async

log: Final = logging.getLogger(__name__)

MODULE: Final = "abcast.evaluation.floor"
_LENGTH: Final = 4  # frame length prefix, big endian
_DATA, _ORDER, _HELLO = 0, 1, 2  # frame kinds: [kind, ...] msgpack arrays
#: the pacer waits while a peer's socket buffer holds more than this (backpressure)
HIGH_WATER_BYTES: Final = 4 * 1024 * 1024

_encode = msgspec.msgpack.Encoder().encode
_decode = msgspec.msgpack.Decoder().decode


def _frame(message: list[Any]) -> bytes:
    body = _encode(message)
    return len(body).to_bytes(_LENGTH, "big") + body


def _no_application(delivery: Deliver) -> None:
    pass


class _Link(asyncio.Protocol):
    """One TCP connection, either way: frames in to the node, writes out with pausing."""

    def __init__(self, node: FloorNode) -> None:
        self.node = node
        self.peer: NodeId | None = None  # known from its hello (inbound) or dialled
        self.transport: asyncio.Transport | None = None
        self._buffer = bytearray()
        self.resumed = asyncio.Event()
        self.resumed.set()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.transport.set_write_buffer_limits(high=HIGH_WATER_BYTES)

    def data_received(self, data: bytes) -> None:
        buffer = self._buffer
        buffer += data
        at, end = 0, len(buffer)
        node = self.node
        while end - at >= _LENGTH:
            size = int.from_bytes(buffer[at:at + _LENGTH], "big")
            if end - at - _LENGTH < size:
                break
            start = at + _LENGTH
            at = start + size
            try:
                node.on_frame(self, _decode(buffer[start:at]))
            except (msgspec.DecodeError, RemoteProtocolError, LookupError, ValueError,
                    TypeError) as exc:
                log.error("floor %s: dropping the link from %s: %s", node.id, self.peer, exc)
                if self.transport is not None:
                    self.transport.close()
                return
        del buffer[:at]
        node.send_orders()

    def pause_writing(self) -> None:
        self.resumed.clear()

    def resume_writing(self) -> None:
        self.resumed.set()


class FloorNode:
    """One node of the floor (see the module rules); also the workload's group."""

    def __init__(self, config: WorkerConfig) -> None:
        self.config = config
        #: the application's delivery callback (the workload's `_Run.on_deliver`)
        self.on_deliver: Callable[[Deliver], None] = _no_application
        self.registry = RegistryClient(config.registry)
        self.address = ""
        self.id: NodeId = ""  # the registry's name for it, once started
        self.members: tuple[NodeId, ...] = ()
        self.leader: NodeId | None = None
        self._out: dict[NodeId, _Link] = {}
        self._server: asyncio.Server | None = None
        # this node's broadcasts waiting for the end of the loop turn
        self._queued: list[bytes] = []
        self._next_seq = 1
        self._flush_scheduled = False
        # ordering: numbered (origin, first) not delivered yet, bodies held, and the
        # sequencer's numbers of this loop turn not yet announced
        self._numbers: dict[int, tuple[NodeId, int]] = {}
        self._bodies: dict[tuple[NodeId, int], list[bytes]] = {}
        self._next_delivery = 1
        self._next_number = 1
        self._announce: list[list[Any]] = []
        self._announce_first = 1
        self.broadcasts = 0
        self.frames_out = 0
        self.bytes_out = 0
        self.bad_frames = 0

    # -- what the workload sees (WorkloadNode and WorkloadGroup) --------------------------
    @property
    def transport(self) -> FloorNode:
        return self  # drain() is here

    async def drain(self) -> None:
        for link in self._out.values():
            if not link.resumed.is_set():
                await link.resumed.wait()

    def broadcast_nowait(self, payload: bytes) -> int:
        self._queued.append(payload)
        self.broadcasts += 1
        if not self._flush_scheduled:
            self._flush_scheduled = True
            asyncio.get_running_loop().call_soon(self._end_of_turn)
        return self._next_seq + len(self._queued) - 1

    def send_queued(self) -> None:
        self._send_burst()
        self.send_orders()

    # -- start-up -----------------------------------------------------------------------
    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        self._server = await loop.create_server(lambda: _Link(self), "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.address = f"tcp://127.0.0.1:{port}"
        self.id = await self.registry.register(address=self.address)
        info = await self.registry.join(self.config.group, self.address, self.config.size)
        if len(info.members) < self.config.size:
            info = await self.registry.wait_members(self.config.group, self.config.size)
        self.members = sorted_nodes(tuple(info.members))
        self.leader = self.members[0]
        for peer, url in info.members.items():
            if peer == self.id:
                continue
            host, _, port_text = url.removeprefix("tcp://").rpartition(":")
            _, link = await loop.create_connection(lambda: _Link(self), host, int(port_text))
            link.peer = peer
            self._out[peer] = link
            self._write(link, _frame([_HELLO, self.id]))

    async def close(self) -> None:
        for link in self._out.values():
            if link.transport is not None:
                link.transport.close()
        if self._server is not None:
            self._server.close()
        await self.registry.close()

    # -- the protocol ---------------------------------------------------------------------
    def _end_of_turn(self) -> None:
        self._flush_scheduled = False
        self._send_burst()
        self.send_orders()

    def _send_burst(self) -> None:
        payloads, self._queued = self._queued, []
        if not payloads:
            return
        first = self._next_seq
        self._next_seq = first + len(payloads)
        me = self.id
        self._bodies[(me, first)] = payloads
        if len(self._out):
            frame = _frame([_DATA, first, payloads])
            for link in self._out.values():
                self._write(link, frame)
        if me == self.leader:
            self._number(me, first)
            self._deliver_ready()

    def _number(self, origin: NodeId, first: int) -> None:
        """Sequencer: the next number for this batch, announced once the frames at hand
        are handled (`send_orders`: one order frame for all of them)."""
        if not self._announce:
            self._announce_first = self._next_number
        self._numbers[self._next_number] = (origin, first)
        self._announce.append([origin, first])
        self._next_number += 1

    def send_orders(self) -> None:
        if not self._announce:
            return
        frame = _frame([_ORDER, self._announce_first, self._announce])
        self._announce = []
        for link in self._out.values():
            self._write(link, frame)

    def on_frame(self, link: _Link, message: list[Any]) -> None:
        kind = message[0]
        sender = link.peer
        if kind == _DATA and sender is not None:
            first = message[1]
            self._bodies[(sender, first)] = message[2]
            if self.id == self.leader:
                self._number(sender, first)
            self._deliver_ready()
        elif kind == _ORDER and sender is not None and sender == self.leader:
            at = message[1]
            numbers = self._numbers
            for origin, first in message[2]:
                numbers[at] = (origin, first)
                at += 1
            self._deliver_ready()
        elif kind == _HELLO and sender is None:
            link.peer = message[1]
        else:
            self.bad_frames += 1
            raise RemoteProtocolError(f"unexpected frame {message[:2]!r}")

    def _deliver_ready(self) -> None:
        numbers, bodies, on_deliver = self._numbers, self._bodies, self.on_deliver
        at = self._next_delivery
        while (batch := numbers.get(at)) is not None and batch in bodies:
            del numbers[at]
            origin, first = batch
            for seq, payload in enumerate(bodies.pop(batch), first):
                on_deliver(Deliver(origin, seq, payload))
            at += 1
        self._next_delivery = at

    def _write(self, link: _Link, frame: bytes) -> None:
        if link.transport is not None and not link.transport.is_closing():
            link.transport.write(frame)
            self.frames_out += 1
            self.bytes_out += len(frame)

    def counters(self) -> dict[str, int]:
        return {"broadcasts": self.broadcasts, "protocol_packets": self.frames_out,
                "control_packets": 0, "retransmissions": 0, "bad_frames": self.bad_frames,
                "transport_bad_frames": 0, "bytes_out": self.bytes_out}


async def run_floor_worker(config: WorkerConfig, control: Control) -> WorkerOutcome:
    """One floor node through the same workload and handshake as an abcast node."""
    node = FloorNode(config)
    run = _Run(config, node)
    node.on_deliver = run.on_deliver
    try:
        await node.start()
        run.group = node
        await run.run_to_stop(control, node.address)
        return run.outcome(list(node.members), **node.counters())
    finally:
        await node.close()


def floor_command(registry_url: str, group: str, size: int, messages: int, payload: int,
                  run_id: str, rate: float | None, serial: bool) -> list[str]:
    """The floor node process the launcher starts (in place of `abcast node`)."""
    cmd = [sys.executable, "-m", MODULE, "--registry", registry_url, "--group", group,
           "--size", str(size), "--messages", str(messages), "--payload", str(payload),
           "--run-id", run_id]
    if rate is not None:
        cmd += ["--rate", repr(rate)]
    if serial:
        cmd.append("--serial")
    return cmd


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__)
    parser.add_argument("--registry", required=True)
    parser.add_argument("--group", required=True)
    parser.add_argument("--size", type=int, required=True)
    parser.add_argument("--messages", type=int, required=True)
    parser.add_argument("--payload", type=int, default=64)
    parser.add_argument("--run-id", default="floor")
    parser.add_argument("--rate", type=float, default=None)
    parser.add_argument("--serial", action="store_true")
    args = parser.parse_args(argv)
    config = WorkerConfig(group=args.group, ordering="floor", transport="tcp://127.0.0.1:0",
                          size=args.size, messages=args.messages, registry=args.registry,
                          run_id=args.run_id, payload=args.payload, rate=args.rate,
                          serial=args.serial)

    async def pipe_node() -> WorkerOutcome:
        return await run_pipe_node(config, run_floor_worker)

    try:
        outcome = run_async(pipe_node())
    except StoppedError:
        sys.exit(1)
    except AbcastError as exc:
        emit(Failed(str(exc)))
        sys.exit(1)
    emit(Result(outcome))
    sys.exit(0 if outcome.complete else 1)


__all__ = ["FloorNode", "floor_command", "run_floor_worker"]

if __name__ == "__main__":
    main()
