"""The decoders abcast.testing.fuzz attacks, each with valid inputs made from its types.

Rules: one `Target` per decoder a peer's bytes (or a trace file's) reach: the envelope,
a whole frame through a stack's header decoders, each protocol layer's wire headers
(every `Layer` subclass with a `header_type`, and the membership layer's), the stream
framing, the hello, the link handshake, the UDP datagram, the registry's requests and
replies, the request endpoint, ordered requests, batches, replicated operations and
states, and the trace reader (a node's stream and a Parquet file). Decoders are called
as the runtime calls them, so a decoder's own error conversion is what is tested.
"""

from __future__ import annotations

import importlib
import io
import pickle
import pkgutil
import random
import zlib
from collections.abc import Callable
from functools import cache
from typing import Any

import msgspec

from abcast.batching import pack, unpack
from abcast.codec import FrameCodec, Packet, decode_envelope, encode_frame
from abcast.effects import Deliver, Stage
from abcast.errors import DecodeError
from abcast.layer import Layer
from abcast.membership.wire import MembershipHeader
from abcast.registry import messages as registry
from abcast.replicated._args import decode_invocation, decode_state
from abcast.rpc.wire import REQUEST_MAGIC, Request, RpcFrame, decode_rpc, read_ordered_request
from abcast.security import handshake
from abcast.testing.fuzz import Target, sample, valid_inputs
from abcast.trace.rows import TraceFormatError, events_to_table, table_to_events
from abcast.trace.schema import EVENT_SCHEMA
from abcast.trace.stream import stream_table
from abcast.trace.writer import parquet_table
from abcast.transport import udp_wire
from abcast.transport._framing import encode_frames, split_frames
from abcast.transport._hello import HELLO_MAGIC, Hello, decode_hello, encode_hello

SEEDS = 48  # valid inputs per decoder
_CORES = ("ordering", "reliability", "group", "consensus", "membership")


def layer_header_types() -> dict[str, Any]:
    """name -> wire type of every protocol layer (cores imported so all are found)."""
    for package in _CORES:
        module = importlib.import_module(f"abcast.{package}")
        for info in pkgutil.iter_modules(module.__path__):
            importlib.import_module(f"abcast.{package}.{info.name}")
    found: dict[str, Any] = {"Membership": MembershipHeader}
    stack: list[type[Layer]] = list(Layer.__subclasses__())
    while stack:
        cls = stack.pop()
        stack.extend(cls.__subclasses__())
        header = cls.__dict__.get("header_type")
        if header is not None and not isinstance(header, property):
            found.setdefault(cls.__name__, header)
    return dict(sorted(found.items()))


def _frames(types: list[Any], count: int, seed: int) -> tuple[bytes, ...]:
    """Frames whose headers are valid for a stack of `types` (bottom first)."""
    rng = random.Random(seed)
    infos = [msgspec.inspect.type_info(t) for t in types]
    out: list[bytes] = []
    while len(out) < count:
        depth = rng.randint(1, len(infos))
        headers = tuple(sample(i, rng) for i in infos[:depth])
        out.append(encode_frame(rng.choice(["g", "bank"]), f"n{rng.randint(1, 9)}",
                                Packet(headers, rng.randbytes(rng.randint(0, 24))),
                                control=rng.random() < 0.2))
    codec = FrameCodec({"g": types, "bank": types})
    return tuple(f for f in out if _decodes(codec, f))


def _decodes(codec: FrameCodec, frame: bytes) -> bool:
    try:
        codec.decode(frame)
    except DecodeError:
        return False
    return True


def _stack_target(name: str, types: list[Any]) -> Target:
    codec = FrameCodec({"g": types, "bank": types})
    return Target(name, codec.decode, _frames(types, SEEDS, zlib.crc32(name.encode())))


def _trace_seeds() -> tuple[tuple[bytes, ...], tuple[bytes, ...]]:
    """(stream files, Parquet files) of a small run, whole and torn."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from abcast.testing.builders import TraceBuilder

    b = TraceBuilder("fuzz")
    for n in ("n1", "n2"):
        b.view(n, 1, ("n1", "n2"))
    m = b.send("n1", deps={"n2": 0})
    for n in ("n1", "n2"):
        b.deliver(n, m[1], m[2])
    b.recorder.record("n1", "net_send", 1, peer="n2", size=64, group="g")
    table = events_to_table(b.rows())
    streams, parquets = [], []
    for compression in (None, "lz4"):
        buf = io.BytesIO()
        options = pa.ipc.IpcWriteOptions(compression=compression)
        with pa.ipc.new_stream(buf, EVENT_SCHEMA, options=options) as w:
            w.write_table(table.slice(0, 3))
            w.write_table(table.slice(3))
        streams.append(buf.getvalue())
        streams.append(buf.getvalue()[:-8])  # never closed
    buf = io.BytesIO()
    pq.write_table(table, buf, compression="zstd")
    parquets.append(buf.getvalue())
    return tuple(streams), tuple(parquets)


class _Obj:
    def __init__(self) -> None:
        self.count = 0


def _state(data: bytes) -> None:
    decode_state(_Obj(), data)


def _batch(data: bytes) -> object:
    return unpack(Deliver("n1", 1, data, Stage.FINAL))


def _udp(data: bytes) -> object:
    return udp_wire.decode(data, 65_536)


def _udp_seeds(count: int) -> tuple[bytes, ...]:
    rng = random.Random(7)
    out = []
    for _ in range(count):
        body = rng.randbytes(rng.randint(0, 40))
        frags = rng.choice([1, 1, 3])
        frag = rng.randrange(frags)
        size = len(body) if frags == 1 else len(body) + rng.randint(0, 100)
        out.append(udp_wire.encode(
            rng.choice(list(udp_wire.PacketType)), rng.randint(0, 3), frags, rng.randint(1, 9),
            rng.randint(1, 9), rng.randint(1, 9), rng.randint(1, 2**40), frag, size,
            f"n{rng.randint(1, 99)}".encode(), body))
    return tuple(out)


def _pickles(count: int, state: bool) -> tuple[bytes, ...]:
    rng = random.Random(11)
    out = []
    for _ in range(count):
        plain = [rng.randint(-9, 2**40), "x" * rng.randint(0, 9), b"\x00", None, 1.5]
        args = tuple(rng.choice(plain) for _ in range(rng.randint(0, 3)))
        if state:
            out.append(b"P" + pickle.dumps({"count": rng.randint(0, 9), "items": list(args)}))
        else:
            out.append(pickle.dumps(("Cls", "method", args, {"k": rng.randint(0, 9)})))
    return tuple(out)


def _trace(reader: Callable[[io.BytesIO, str], Any]) -> Callable[[bytes], object]:
    return lambda data: table_to_events(reader(io.BytesIO(data), "fuzz"), "fuzz")


@cache
def targets() -> tuple[Target, ...]:
    """Every decoder a peer's (or a trace file's) bytes reach, with its valid inputs."""
    layers = layer_header_types()
    streams, parquets = _trace_seeds()
    frames = [p for t in layers.values() for p in _frames([t], 4, 3)]
    targets = [
        Target("codec.envelope", decode_envelope, tuple(frames)),
        _stack_target("codec.frame(stack)", [layers["ReliableChannel"],
                                            layers["FailureDetectorLayer"], layers["Sequencer"]]),
        *[_stack_target(f"wire.{name}", [t]) for name, t in layers.items()],
        Target("transport.framing", lambda d: split_frames(d, 1 << 20),
               tuple(encode_frames(frames[i:i + 3]) for i in range(0, SEEDS)), msgpack=False),
        Target("transport.hello", decode_hello, tuple(encode_hello(h) for h in _hellos()),
               prefix=HELLO_MAGIC),
        Target("transport.udp", _udp, _udp_seeds(SEEDS), msgpack=False),
        Target("security.handshake", handshake.decode,
               tuple(handshake.MAGIC + d for d in valid_inputs(handshake.AuthMessage, SEEDS)),
               prefix=handshake.MAGIC),
        Target("registry.request", registry.decode_request,
               valid_inputs(registry.Request, SEEDS)),
        Target("registry.reply", registry.decode_reply, valid_inputs(registry.Reply, SEEDS)),
        Target("rpc.frame", decode_rpc, valid_inputs(RpcFrame, SEEDS)),
        Target("rpc.ordered_request", read_ordered_request,
               tuple(REQUEST_MAGIC + d for d in valid_inputs(Request, SEEDS)),
               prefix=REQUEST_MAGIC),
        Target("batching.batch", _batch, tuple(
            pack(i + 1, [bytes([i]) * i for _ in range(i % 5 + 1)]) for i in range(SEEDS))),
        Target("replicated.operation", decode_invocation, _pickles(SEEDS, False),
               msgpack=False),
        Target("replicated.state", _state, _pickles(SEEDS, True), msgpack=False),
        Target("trace.stream", _trace(stream_table), streams, declared=(TraceFormatError,),
               msgpack=False),
        Target("trace.parquet", _trace(parquet_table), parquets, declared=(TraceFormatError,),
               msgpack=False),
    ]
    return tuple(t for t in targets if t.seeds)


def _hellos() -> list[Hello]:
    rng = random.Random(5)
    return [sample(msgspec.inspect.type_info(Hello), rng) for _ in range(SEEDS)]
