"""The C codec of the steady frames (abcast._steady_codec) against msgspec, its oracle.

What is proven, all differentially against the Python path (abcast.codec.decode_envelope
and the headers decoded by a sequencer stack's own `stack.codec`, as Stack.receive
decodes them; abcast.codec.encode_frame for the bytes):

- valid steady frames, generated from their value ranges, parse to the values msgspec
  decodes, and the C encoders write the bytes encode_frame writes;
- on any bytes at all — random, the shared fuzzer's mutations of valid frames
  (abcast.testing.fuzz), and steady frames damaged field by field (a bound crossed, a
  tag changed, a wrong type, invalid UTF-8, an element dropped or added) and then encoded
  with any of msgpack's encodings of each value — `parse` never raises and returns either
  None or exactly what msgspec decodes; and it returns None for a frame msgspec accepts in
  a steady shape only for the reasons it documents (extra trailing elements, an SOrder's
  bodies), so it takes every steady frame a node sends;
- the encoders refuse (ValueError/TypeError) the values a peer's decoder would refuse.

Skipped, saying so, where the extension is not built (`bench/build_native.py` builds it
for a checkout); a build older than its C sources fails here rather than test old code.
"""

from __future__ import annotations

import copy
import os
import random
import struct
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from abcast.codec import Packet, decode_envelope, encode_frame
from abcast.errors import DecodeError
from abcast.group.failure_detector import FD, Fd
from abcast.ids import View
from abcast.native_sources import source_hash
from abcast.ordering.registry import build_stack
from abcast.ordering.sequencer_wire import MAX_ORDER_IDS, SData, SOrder
from abcast.reliability.channel_wire import RData
from abcast.testing.fuzz import Target, mutate

sc = pytest.importorskip(
    "abcast._steady_codec",
    reason="the optional C extension abcast._steady_codec is not built (no C compiler or "
           "Python headers when abcast was installed?); build it with: python "
           "bench/build_native.py",
)

ROOT = Path(__file__).resolve().parents[2]
#: the default runtime's stack for a sequencer group: its header decoders are the oracle
STACK = build_stack("n1", "g", "sequencer", View(1, ("n1", "n2", "n3")))
SEQ_MAX = 2**62
FAST = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
#: examples of each hostile-input test: a few hundred here (seconds); more for a long run
#: under the sanitizers (bench/build_native.py --sanitize prints the command)
HOSTILE = int(os.environ.get("ABCAST_STEADY_FUZZ_EXAMPLES", "0")) or None


def hostile(examples: int) -> settings:
    return settings(max_examples=HOSTILE or examples, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


def test_the_build_is_of_the_checked_out_sources() -> None:
    expected = source_hash()
    assert expected == sc.SOURCE_HASH, (
        f"abcast._steady_codec was built from other sources ({sc.SOURCE_HASH}, these are "
        f"{expected}): rebuild it with python bench/build_native.py")


# ------------------------------------------------------------------------ the oracle


def steady_values(headers: tuple[Any, ...], env: Any) -> tuple[Any, ...] | None:
    """The values `parse` returns for decoded headers of a steady shape (None: other)."""
    if len(headers) != 3 or type(headers[0]) is not Fd or type(headers[1]) is not RData:
        return None
    rdata, top = headers[1], headers[2]
    if type(top) is SData:
        body: Any = top.seq
        kind = sc.KIND_DATA
    elif type(top) is SOrder and not top.bodies:
        body = (top.first, tuple((node, seq) for node, seq in top.ids))
        kind = sc.KIND_ORDER
    else:
        return None
    return (env.group, env.sender, env.flags, kind, rdata.seq, rdata.ack, body, env.payload)


def msgspec_decode(frame: bytes) -> tuple[Any, ...] | DecodeError | None:
    """The Python path: the steady values, None for another valid shape, or the
    DecodeError it refuses the frame with."""
    try:
        env = decode_envelope(frame)
        headers = STACK.codec.headers(env)
    except DecodeError as exc:
        return exc
    return steady_values(headers, env)


def has_documented_extras(frame: bytes) -> bool:
    """The frame (which msgspec decodes to a steady shape) has what `parse` leaves to the
    Python path: extra trailing elements in the envelope or a header, or SOrder bodies."""
    try:
        tree = msgspec.msgpack.decode(frame)
    except (msgspec.MsgspecError, ValueError, RecursionError):
        return True  # only extras are unchecked by the typed decoders (invalid UTF-8 ...)
    fd, rdata, top = tree[4]
    longest = {"SData": 2, "SOrder": 4}[top[0]]
    return (len(tree) > 6 or len(fd) > 1 or len(rdata) > 3 or len(top) > longest
            or (top[0] == "SOrder" and len(top) == 4 and len(top[3]) > 0))


def check_against_msgspec(frame: bytes) -> None:
    parsed = sc.parse(frame)  # must not raise, whatever the bytes
    oracle = msgspec_decode(frame)
    if parsed is not None:
        assert not isinstance(oracle, DecodeError), f"parse took what msgspec refuses: {oracle}"
        assert parsed == oracle
        assert [type(v) for v in parsed] == [type(v) for v in oracle]  # type: ignore[union-attr]
    elif isinstance(oracle, tuple):
        assert has_documented_extras(frame), f"parse refused a steady frame: {oracle}"


# ------------------------------------------------------------------ valid values

seqs = st.one_of(
    st.integers(1, 300),
    st.integers(1, SEQ_MAX),
    st.sampled_from([1, 127, 128, 255, 256, 65535, 65536, 2**32 - 1, 2**32, SEQ_MAX]),
)
counts = st.one_of(st.just(0), seqs)
# every code point but the surrogates (Python strs that UTF-8 cannot encode)
chars = st.characters(exclude_categories=["Cs"])
nodes = st.one_of(st.text(chars, min_size=1, max_size=64),
                  st.sampled_from(["n1", "x" * 64, "\u00e9" * 64, "\U0001f600" * 64]))
groups = st.one_of(st.text(chars, min_size=1, max_size=128),
                   st.sampled_from(["g", "y" * 31, "y" * 32, "\u00e9" * 128]))
payloads = st.one_of(st.binary(max_size=300),
                     st.sampled_from([b"", b"p" * 255, b"p" * 256, b"p" * 65536]))
id_lists = st.one_of(st.lists(st.tuples(nodes, seqs), max_size=20),
                     st.integers(15, 17).map(lambda n: [("n2", i + 1) for i in range(n)]))


@FAST
@given(group=groups, sender=nodes, flags=st.integers(0, 255), rseq=seqs, rack=counts,
       seq=seqs, payload=payloads)
def test_a_valid_data_frame_parses_to_its_values_and_encodes_as_msgspec(
    group: str, sender: str, flags: int, rseq: int, rack: int, seq: int, payload: bytes,
) -> None:
    packet = Packet((FD, RData(rseq, rack), SData(seq)), payload)
    frame = encode_frame(group, sender, packet)
    assert sc.encode_data_frame(group, sender, rseq, rack, seq, payload) == frame
    expected = (group, sender, 0, sc.KIND_DATA, rseq, rack, seq, payload)
    assert sc.parse(frame) == expected == msgspec_decode(frame)
    # any flags (encode_frame writes 0 or FLAG_CONTROL; a peer may send any byte)
    frame = msgspec.msgpack.encode((1, group, sender, flags, packet.headers, payload))
    assert sc.parse(frame) == (group, sender, flags, *expected[3:]) == msgspec_decode(frame)


@FAST
@given(group=groups, sender=nodes, rseq=seqs, rack=counts, first=seqs, ids=id_lists,
       payload=payloads, control=st.booleans())
def test_a_valid_order_frame_parses_to_its_values_and_encodes_as_msgspec(
    group: str, sender: str, rseq: int, rack: int, first: int, ids: list[tuple[str, int]],
    payload: bytes, control: bool,
) -> None:
    packet = Packet((FD, RData(rseq, rack), SOrder(first, ids)), payload)
    frame = encode_frame(group, sender, packet)
    assert sc.encode_order_frame(group, sender, rseq, rack, first, ids, payload) == frame
    assert sc.encode_order_frame(group, sender, rseq, rack, first, tuple(ids), payload) == frame
    expected = (group, sender, 0, sc.KIND_ORDER, rseq, rack, (first, tuple(ids)), payload)
    assert sc.parse(frame) == expected == msgspec_decode(frame)
    controlled = encode_frame(group, sender, packet, control=control)
    assert sc.parse(controlled) == (group, sender, int(control), *expected[3:])


def test_the_largest_order_is_taken_and_one_id_more_refused_by_both() -> None:
    for count, accepted in ((MAX_ORDER_IDS, True), (MAX_ORDER_IDS + 1, False)):
        ids = [(f"n{i % 7}", i + 1) for i in range(count)]
        frame = encode_frame("g", "n1", Packet((FD, RData(1), SOrder(1, ids)), b"x"))
        assert (sc.parse(frame) is not None) is accepted
        assert isinstance(msgspec_decode(frame), tuple) is accepted
        check_against_msgspec(frame)
    with pytest.raises(ValueError, match="at most"):
        sc.encode_order_frame("g", "n1", 1, 0, 1, ids, b"x")


def test_parse_reads_any_bytes_like_and_returns_fresh_objects() -> None:
    frame = sc.encode_order_frame("g", "n1", 2, 1, 5, [("n2", 3)], b"body")
    parsed = sc.parse(frame)
    assert parsed == ("g", "n1", 0, sc.KIND_ORDER, 2, 1, (5, (("n2", 3),)), b"body")
    assert sc.parse(bytearray(frame)) == parsed == sc.parse(memoryview(frame))
    with pytest.raises(TypeError):
        sc.parse("not bytes")  # API misuse, not a peer's bytes


# ------------------------------------------------- hand-written frames, one rule each


def _env(*headers: Any, payload: Any = b"p", group: Any = "g", sender: Any = "n1",
         version: Any = 1, flags: Any = 0, extra: tuple[Any, ...] = ()) -> bytes:
    return msgspec.msgpack.encode([version, group, sender, flags, list(headers), payload,
                                   *extra])


F, R, S = ["Fd"], ["RData", 5, 2], ["SData", 3]
DATA = ("g", "n1", 0, 1, 5, 2, 3, b"p")
_HEAD = b"\x96\x01\xa1g\xa2n1\x00\x93\x91\xa2Fd"  # [1, "g", "n1", 0, [["Fd"], ...
_RDATA = msgspec.msgpack.encode(R)
_SDATA = msgspec.msgpack.encode(S)
#: (frame, what parse returns, whether msgspec takes it)
RULES: dict[str, tuple[bytes, tuple[Any, ...] | None, bool]] = {
    "data": (_env(F, R, S), DATA, True),
    "order without bodies": (_env(F, R, ["SOrder", 3, [["n2", 4]]]),
                             ("g", "n1", 0, 2, 5, 2, (3, (("n2", 4),)), b"p"), True),
    "RData without its ack": (_env(F, ["RData", 5], S), (*DATA[:5], 0, *DATA[6:]), True),
    "version 1 as uint64": (b"\x96\xcf" + b"\0" * 7 + b"\x01" + _env(F, R, S)[2:], DATA, True),
    "version 2": (_env(F, R, S, version=2), None, False),
    "flags 256": (_env(F, R, S, flags=256), None, False),
    "ack 2**62 + 1": (_env(F, ["RData", 5, SEQ_MAX + 1], S), None, False),
    "seq 0": (_env(F, R, ["SData", 0]), None, False),
    "negative seq": (_env(F, R, ["SData", -3]), None, False),
    "seq as a float": (_env(F, R, ["SData", 3.0]), None, False),
    "seq as a bool": (_env(F, R, ["SData", True]), None, False),
    "sender of 65 characters": (_env(F, R, S, sender="\u00e9" * 65), None, False),
    "empty group": (_env(F, R, S, group=""), None, False),
    "group as bin": (_env(F, R, S, group=b"g"), None, False),
    "payload as str": (_env(F, R, S, payload="p"), None, False),
    "sender with a surrogate": (_env(F, R, S)[:4] + b"\xa3\xed\xa0\x80"
                                + _env(F, R, S)[7:], None, False),
    "tag as bin": (_env([b"Fd"], R, S), None, False),
    "unknown tag": (_env(F, ["RDatum", 5, 2], S), None, False),
    "a RAck where RData goes": (_env(F, ["RAck", 5, []], S), None, True),
    "a heartbeat": (_env(["Heartbeat"]), None, True),
    "id of three elements": (_env(F, R, ["SOrder", 3, [["n2", 4, 5]], []]), None, False),
    "trailing byte": (_env(F, R, S) + b"\x00", None, False),
    # a header claiming more elements than it has would swallow what follows it, were it
    # read as one of its known length (the envelope claims its three headers)
    "RData claiming four": (_HEAD + b"\x94\xa5RData\x05" + _SDATA + b"\xc4\x01p", None, False),
    "envelope claiming seven": (b"\x97" + _env(F, R, S)[1:], None, False),
    "headers claiming four": (_HEAD.replace(b"\x93", b"\x94") + _RDATA + _SDATA + b"\xc4\x01p",
                              None, False),
    "SOrder claiming five": (_HEAD + _RDATA + b"\x95\xa6SOrder\x03\x90\xc4\x01p", None, False),
    # msgspec takes these; parse leaves them to the Python path (no node sends them)
    "extra envelope element": (_env(F, R, S, extra=(7,)), None, True),
    "extra header field": (_env(["Fd", 1], R, S), None, True),
    "order with bodies (relay)": (_env(F, R, ["SOrder", 3, [["n2", 4]], [b"b"]]), None, True),
}


@pytest.mark.parametrize("name", sorted(RULES))
def test_each_rule_as_msgspec_has_it(name: str) -> None:
    frame, parsed, msgspec_takes = RULES[name]
    assert sc.parse(frame) == parsed
    assert (not isinstance(msgspec_decode(frame), DecodeError)) is msgspec_takes
    check_against_msgspec(frame)


#: strict UTF-8 at its edges, one code point each (U+0080, U+07FF, U+0800, U+D7FF,
#: U+E000, U+FFFF, U+10000, U+10FFFF)
EDGE_UTF8 = (b"\xc2\x80", b"\xdf\xbf", b"\xe0\xa0\x80", b"\xed\x9f\xbf", b"\xee\x80\x80",
             b"\xef\xbf\xbf", b"\xf0\x90\x80\x80", b"\xf4\x8f\xbf\xbf")
#: not strict UTF-8: a stray or missing continuation, overlongs, surrogates, > U+10FFFF,
#: bytes never used
BAD_UTF8 = (b"\xff", b"\x80", b"\xc0\xaf", b"\xc1\xbf", b"\xe2\x82", b"ab\xc3",
            b"\xe0\x9f\xbf", b"\xed\xa0\x80", b"\xed\xbf\xbf", b"\xf0\x8f\xbf\xbf",
            b"\xf4\x90\x80\x80", b"\xf5\x80\x80\x80", b"\xf8\x88\x80\x80\x80",
            b"\xc2\xc2\x80", b"\xe1\x80\xc0")


def _with_text(where: int, raw: bytes) -> bytes:
    """An order frame whose group (0), sender (1) or id node (2) is `raw` as a str."""
    frame = msgspec.msgpack.encode([1, "G", "S", 0, [F, R, ["SOrder", 1, [["N", 1]], []]],
                                    b""])
    mark = (b"\xa1G", b"\xa1S", b"\xa1N")[where]
    assert frame.count(mark) == 1
    return frame.replace(mark, bytes([0xa0 | len(raw)]) + raw)


@pytest.mark.parametrize("where", [0, 1, 2])
def test_utf8_is_as_strict_as_cpythons_decoder(where: int) -> None:
    for raw in EDGE_UTF8:
        frame = _with_text(where, raw)
        assert sc.parse(frame) is not None, raw
        check_against_msgspec(frame)
    for raw in BAD_UTF8:
        frame = _with_text(where, raw)
        assert sc.parse(frame) is None, raw
        assert isinstance(msgspec_decode(frame), DecodeError), raw


# ------------------------------------------------------------ hostile frames

SEEDS = (
    encode_frame("g", "n1", Packet((FD, RData(5, 2), SData(3)), b"payload")),
    encode_frame("bank", "n2", Packet((FD, RData(1), SData(2**40)), b"")),
    encode_frame("g", "\u00e9t\u00e9", Packet((FD, RData(300, 70_000), SOrder(
        9, [("n1", 1), ("n3", 2**33)])), b"x" * 40)),
    encode_frame("g", "n1", Packet((FD, RData(2), SOrder(1, [])), b""), control=True),
)
STEADY = Target("steady", msgspec_decode, SEEDS)


@hostile(150)
@given(data=st.binary(max_size=120))
@example(data=b"")
@example(data=SEEDS[0][:-1])
def test_random_bytes_are_refused_or_read_as_msgspec_reads_them(data: bytes) -> None:
    check_against_msgspec(data)


@hostile(400)
@given(seed=st.integers(0, 2**32 - 1))
def test_fuzzed_frames_are_refused_or_read_as_msgspec_reads_them(seed: int) -> None:
    # abcast.testing.fuzz's mutations: tree (wrong types, boundary ints, deep nesting,
    # elements dropped or added) and bytes (flips, truncation, 4 GiB length claims)
    rng = random.Random(seed)
    check_against_msgspec(mutate(STEADY, rng.choice(SEEDS), rng))


class Utf8(bytes):
    """A msgpack str whose bytes are given as they are (perhaps not UTF-8)."""


INTS = (0, 1, 127, 128, 255, 256, 2**16, 2**32, SEQ_MAX - 1, SEQ_MAX, SEQ_MAX + 1,
        2**63 - 1, 2**63, 2**64 - 1, -1, -32, -33, -(2**63))
TEXTS = ("", "a", "a" * 64, "a" * 65, "\u00e9" * 64, "\u00e9" * 65, "a" * 128, "a" * 129,
         "\U0001f600" * 64, "\U0001f600" * 65, "Fd", "RData", "SData", "SOrder", "RAck")
WRONG: tuple[Any, ...] = (None, True, False, 1.5, b"", b"x", "x", [], [0], {}, {"a": 1})


def _paths(tree: Any, path: tuple[int, ...] = ()) -> list[tuple[int, ...]]:
    out = [path]
    if isinstance(tree, list):
        for i, item in enumerate(tree):
            out += _paths(item, (*path, i))
    return out


def _damage(tree: Any, rng: random.Random) -> Any:
    """One field of a steady frame's tree crossed over a bound, retyped, or reshaped."""
    path = rng.choice(_paths(tree))
    parent: Any = None
    node = tree
    for i in path:
        parent, node = node, node[i]
    roll = rng.random()
    if isinstance(node, int) and roll < 0.5:
        new: Any = rng.choice(INTS)
    elif isinstance(node, str) and roll < 0.4:
        new = rng.choice(TEXTS)
    elif isinstance(node, str) and roll < 0.6:
        new = Utf8(node.encode()[: rng.randint(0, 3)] + rng.choice(BAD_UTF8))
    elif isinstance(node, list) and roll < 0.6:
        new = list(node)
        if new and rng.random() < 0.5:
            new.pop(rng.randrange(len(new)))
        else:
            new.insert(rng.randint(0, len(new)),
                       copy.deepcopy(rng.choice((*WRONG, *INTS[:4], ["n2", 1]))))
    elif roll < 0.8:
        new = copy.deepcopy(rng.choice(WRONG))  # the tree is damaged in place
    else:
        new = rng.choice((*INTS, *TEXTS))
    if parent is None:
        return new
    parent[path[-1]] = new
    return tree


def _width(rng: random.Random, n: int, widths: tuple[tuple[int, int], ...]) -> int:
    """A length-prefix width (bytes) that holds n: the smallest, or any larger one."""
    fits = [w for w, limit in widths if n < limit]
    return fits[0] if rng.random() < 0.6 else rng.choice(fits)


def pack_any(obj: Any, rng: random.Random) -> bytes:
    """msgpack for `obj`, each value in a random one of the encodings that hold it (the
    smallest most often): what another msgpack writer, or a hostile one, could send."""
    if obj is None:
        return b"\xc0"
    if obj is True or obj is False:
        return b"\xc3" if obj else b"\xc2"
    if isinstance(obj, int):
        options = []
        if 0 <= obj < 128 or -32 <= obj < 0:
            options.append(struct.pack(">b", obj) if obj < 0 else bytes([obj]))
        for code, fmt, lo, hi in ((0xcc, ">B", 0, 2**8), (0xcd, ">H", 0, 2**16),
                                  (0xce, ">I", 0, 2**32), (0xcf, ">Q", 0, 2**64),
                                  (0xd0, ">b", -(2**7), 2**7), (0xd1, ">h", -(2**15), 2**15),
                                  (0xd2, ">i", -(2**31), 2**31),
                                  (0xd3, ">q", -(2**63), 2**63)):
            if lo <= obj < hi:
                options.append(bytes([code]) + struct.pack(fmt, obj))
        return options[0] if rng.random() < 0.6 else rng.choice(options)
    if isinstance(obj, float):
        return b"\xcb" + struct.pack(">d", obj)
    if isinstance(obj, Utf8 | str):
        raw = bytes(obj) if isinstance(obj, Utf8) else obj.encode()
        w = _width(rng, len(raw), ((0, 32), (1, 2**8), (2, 2**16), (4, 2**32)))
        head = bytes([0xa0 | len(raw)]) if w == 0 else (
            bytes([{1: 0xd9, 2: 0xda, 4: 0xdb}[w]]) + len(raw).to_bytes(w, "big"))
        return head + raw
    if isinstance(obj, bytes):
        w = _width(rng, len(obj), ((1, 2**8), (2, 2**16), (4, 2**32)))
        return bytes([{1: 0xc4, 2: 0xc5, 4: 0xc6}[w]]) + len(obj).to_bytes(w, "big") + obj
    if isinstance(obj, list):
        w = _width(rng, len(obj), ((0, 16), (2, 2**16), (4, 2**32)))
        head = bytes([0x90 | len(obj)]) if w == 0 else (
            bytes([{2: 0xdc, 4: 0xdd}[w]]) + len(obj).to_bytes(w, "big"))
        return head + b"".join(pack_any(item, rng) for item in obj)
    assert isinstance(obj, dict)
    return bytes([0x80 | len(obj)]) + b"".join(
        pack_any(k, rng) + pack_any(v, rng) for k, v in obj.items())


@hostile(600)
@given(seed=st.integers(0, 2**32 - 1), damages=st.integers(0, 3),
       truncate=st.booleans())
def test_steady_frames_damaged_and_reencoded_are_refused_or_read_as_msgspec_reads_them(
    seed: int, damages: int, truncate: bool,
) -> None:
    rng = random.Random(seed)
    tree = msgspec.msgpack.decode(rng.choice(SEEDS))
    for _ in range(damages):
        tree = _damage(tree, rng)
    frame = pack_any(tree, rng)
    if truncate:
        frame = frame[: rng.randrange(len(frame) + 1)]
    check_against_msgspec(frame)


def test_every_encoding_of_a_valid_frame_is_read_as_msgspec_reads_it() -> None:
    # undamaged frames, re-encoded with non-minimal widths: both take every one of them
    rng = random.Random(1)
    for i in range(300):
        frame = pack_any(msgspec.msgpack.decode(SEEDS[i % len(SEEDS)]), rng)
        assert sc.parse(frame) is not None
        check_against_msgspec(frame)


# ------------------------------------------------------------------ the encoders

GOOD = ("g", "n1", 1, 0, 1)


@pytest.mark.parametrize(("index", "value", "error"), [
    (0, "", ValueError), (0, "g" * 129, ValueError), (0, b"g", TypeError),
    (1, "", ValueError), (1, "\u00e9" * 65, ValueError), (1, "\ud800", UnicodeEncodeError),
    (2, 0, ValueError), (2, SEQ_MAX + 1, ValueError), (2, True, TypeError),
    (2, 1.0, TypeError), (3, -1, ValueError), (3, 2**64, ValueError),
    (4, 0, ValueError), (4, "1", TypeError),
])
def test_the_encoders_refuse_what_a_peer_would_refuse(
    index: int, value: Any, error: type[Exception],
) -> None:
    args = list(GOOD)
    args[index] = value
    with pytest.raises(error):
        sc.encode_data_frame(*args, b"")
    with pytest.raises(error):
        sc.encode_order_frame(*args, [], b"")


@pytest.mark.parametrize(("ids", "error"), [
    ([("", 1)], ValueError), ([("n2", 0)], ValueError), ([("n2",)], TypeError),
    ([("n2", 1, 2)], TypeError), (["n2"], TypeError), (5, TypeError),
])
def test_the_order_encoder_refuses_a_bad_id(ids: Any, error: type[Exception]) -> None:
    with pytest.raises(error):
        sc.encode_order_frame(*GOOD, ids, b"")
    with pytest.raises(TypeError):
        sc.encode_data_frame(*GOOD, "payload")
