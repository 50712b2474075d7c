"""Every decoder of a peer's bytes (or a trace file's) raises only what it declares —
DecodeError / RemoteProtocolError (TraceFormatError for the trace reader) — on hostile
input: valid inputs mutated structure-aware (a field of the wrong type, a boundary
integer, deep nesting, an element dropped or added) and byte-wise (flipped bits,
truncation, a 4 GiB length prefix, garbage). A short run per decoder here; the
100,000-case run is bench/fuzz_decoders.py. The regressions below are what the fuzzer
found."""

from __future__ import annotations

import io
import pickle
import random

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from abcast.codec import Packet, decode_envelope, encode_frame
from abcast.errors import DecodeError, RemoteProtocolError
from abcast.replicated._args import decode_invocation
from abcast.testing.fuzz import Target, case, run_case
from abcast.testing.fuzz_targets import targets
from abcast.trace.rows import EventRow, TraceFormatError, events_to_table, table_to_events
from abcast.trace.writer import parquet_table
from abcast.transport._hello import HELLO_MAGIC, decode_hello

TARGETS = {t.name: t for t in targets()}


def test_every_decoder_is_a_target_with_valid_inputs() -> None:
    names = set(TARGETS)
    assert {"codec.envelope", "codec.frame(stack)", "transport.framing", "transport.hello",
            "transport.udp", "registry.request", "registry.reply", "rpc.frame",
            "trace.stream", "trace.parquet"} <= names
    layers = {n for n in names if n.startswith("wire.")}
    assert {"wire.Sequencer", "wire.Skeen", "wire.ChandraToueg", "wire.Matrix",
            "wire.Membership", "wire.ReliableChannel", "wire.FailureDetectorLayer"} <= layers
    for target in TARGETS.values():
        for seed in target.seeds:  # the valid inputs decode
            target.decode(seed)


@pytest.mark.parametrize("name", sorted(TARGETS))
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(seed=st.integers(0, 2**32 - 1), raw=st.binary(max_size=96), use_raw=st.booleans())
def test_hostile_input_raises_only_what_the_decoder_declares(
    name: str, seed: int, raw: bytes, use_raw: bool,
) -> None:
    target = TARGETS[name]
    data = raw if use_raw else case(target, random.Random(seed))
    escaped = run_case(target, data)
    assert escaped is None, f"{name}: {type(escaped).__name__}: {escaped} on {data[:120]!r}"


def test_deep_nesting_is_a_decode_error_not_a_recursion_error() -> None:
    frame = encode_frame("g", "n1", Packet((), b"x"))
    deep = frame[:-3] + b"\x91" * 100_000 + b"\xc0" + frame[-3:]
    with pytest.raises(DecodeError):
        decode_envelope(b"\x96\x01\xa1g\xa2n1\x00\x91" + b"\x91" * 100_000 + b"\xc0\xc4\x00")
    with pytest.raises(DecodeError):
        decode_envelope(deep)


def test_a_hello_with_invalid_utf8_is_a_decode_error() -> None:
    with pytest.raises(DecodeError):
        decode_hello(HELLO_MAGIC + b"\x93\xa2\xff\xfe\x01\x01")


def test_a_pickle_naming_a_huge_memo_index_is_refused_before_it_allocates() -> None:
    # 36 bytes that made the C unpickler grow its memo to 10^9 entries (8 GB, 40+ s)
    data = b")r\xef\x15M;*\xfaH\x04\xe8\x01\xfbM\x9f/R\x9e\xfd\xb45\x7f\x84\xe5\x0b"
    with pytest.raises(RemoteProtocolError, match="memo index"):
        decode_invocation(data)
    ok = pickle.dumps(("Cls", "m", (1, "a"), {}), protocol=5)
    assert decode_invocation(ok).method == "m"


def test_a_parquet_trace_with_invalid_utf8_is_a_trace_format_error() -> None:
    row = EventRow("r", "n1", "send", "n1", 1, "g", 1, 1)
    table = events_to_table([row])
    bad = b"\xff\xfe"  # a string column whose bytes are not UTF-8 (Parquet keeps them)
    offsets = pa.py_buffer(np.array([0, len(bad)], dtype=np.int32).tobytes())
    node = pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(bad)])
    table = table.set_column(table.schema.get_field_index("node"), "node", node)
    buf = io.BytesIO()
    pq.write_table(table, buf)
    with pytest.raises(TraceFormatError, match="do not decode"):
        table_to_events(parquet_table(io.BytesIO(buf.getvalue()), "t"), "t")


def test_run_case_reports_an_undeclared_exception() -> None:
    def broken(data: bytes) -> object:
        return data[0]  # IndexError on b""

    target = Target("planted", broken, (b"x",))
    assert isinstance(run_case(target, b""), IndexError)
    assert run_case(target, b"x") is None
