"""WAN emulation: matrices parse and validate; delays are drawn per link inside the
configured range, reproducibly, and never reorder a link (checked on a fake clock);
wrapped around a real transport, frames keep per-link order and none arrives earlier
than its link's minimum one-way delay (a lower bound only: no wall-clock ceilings).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from transport_harness import Inbox, number_of, numbered, run

from abcast.errors import ConfigError, LocalProtocolError
from abcast.transport import Link, transport_from_url
from abcast.transport.wan import (
    EXAMPLE_MATRIX,
    DelayLine,
    LatencyMatrix,
    WanTransport,
    link_latency_us,
    load_matrix,
    matrix_from_csv,
    matrix_from_json,
)

pytestmark = pytest.mark.timeout(60)

CSV = """# three sites
site,east,west,asia
east,0.2,60,150
west,60,0.2,100
asia,150,100,0.2
jitter_ms,2
node,c1,asia
"""


def test_example_matrix_loads_and_gives_simulator_ranges() -> None:
    matrix = load_matrix(EXAMPLE_MATRIX)
    assert len(matrix.sites) == 5
    assert matrix.site_of("n1") == "virginia" and matrix.site_of("n7") == "oregon"
    lo, hi = link_latency_us(matrix, "virginia", "tokyo")
    assert (lo, hi) == (72_000, 74_000)  # RTT 146 ms / 2 ± 1 ms jitter
    assert link_latency_us(matrix, "tokyo", "virginia") == (lo, hi)
    lo_local, _ = link_latency_us(matrix, "oregon", "oregon")
    assert lo_local == 0  # a LAN's 0.2 ms one-way minus jitter is clamped at 0


def test_csv_and_json_describe_the_same_matrix(tmp_path: Path) -> None:
    from_csv = matrix_from_csv(CSV)
    as_json = (
        '{"sites": ["east", "west", "asia"], "rtt_ms": [[0.2, 60, 150], [60, 0.2, 100], '
        '[150, 100, 0.2]], "jitter_ms": 2, "nodes": {"c1": "asia"}}'
    )
    assert matrix_from_json(as_json) == from_csv
    path = tmp_path / "m.csv"
    path.write_text(CSV)
    assert load_matrix(path) == from_csv
    assert from_csv.site_of("c1") == "asia" and from_csv.site_of("n2") == "west"


@pytest.mark.parametrize(
    "text",
    [
        '{"sites": ["a", "b"], "rtt_ms": [[0, 10], [20, 0]]}',  # not symmetric
        '{"sites": ["a", "b"], "rtt_ms": [[0, 10]]}',  # not square
        '{"sites": ["a", "a"], "rtt_ms": [[0, 1], [1, 0]]}',  # duplicate site
        '{"sites": ["a"], "rtt_ms": [[-1]]}',  # negative
        '{"sites": ["a"], "rtt_ms": [[1]], "nodes": {"n1": "mars"}}',  # unknown site
        '{"sites": ["a"], "rtt_ms": [[1]], "jitter_ms": -2}',
        "not json",
    ],
)
def test_bad_matrices_are_config_errors(text: str) -> None:
    with pytest.raises(ConfigError):
        matrix_from_json(text)


def test_a_node_without_a_site_is_a_config_error() -> None:
    matrix = matrix_from_csv(CSV)
    with pytest.raises(ConfigError, match="no site"):
        matrix.site_of("coordinator")
    with pytest.raises(ConfigError):
        load_matrix("/nonexistent/matrix.json")


def test_delays_stay_in_range_keep_fifo_and_replay_by_seed() -> None:
    # Jitter as large as the delay itself: independent draws would reorder constantly.
    matrix = LatencyMatrix(("x", "y"), ((1.0, 40.0), (40.0, 1.0)), jitter_ms=20.0)
    line = DelayLine(matrix, "n1", seed=3)
    lo, hi = matrix.one_way_range_ms("x", "y")
    now = 100.0
    dues: list[float] = []
    raw_reordered = 0
    previous_raw = 0.0
    for step in range(2000):
        now += 0.0001 * (step % 3)  # a fake clock: several frames per tick
        delay = line.delay_s("n2")
        raw_reordered += now + delay < previous_raw
        previous_raw = now + delay
        assert lo / 1000 <= delay <= hi / 1000
        due = line.due("n2", now)
        assert due >= now + lo / 1000
        dues.append(due)
    assert raw_reordered > 100  # the planted hazard is real...
    assert dues == sorted(dues)  # ...and the delay line never lets it reorder a link
    replay = DelayLine(matrix, "n1", seed=3)
    again = DelayLine(matrix, "n1", seed=3)
    assert [replay.delay_s("n2") for _ in range(50)] == [again.delay_s("n2") for _ in range(50)]
    other = DelayLine(matrix, "n1", seed=4)
    assert [replay.delay_s("n2") for _ in range(5)] != [other.delay_s("n2") for _ in range(5)]


def test_links_are_delayed_independently_on_a_fake_clock() -> None:
    matrix = matrix_from_csv(CSV)  # n1 east, n2 west, n3 asia
    line = DelayLine(matrix, "n1", seed=0)
    far = line.due("n3", 0.0)  # 75 ± 2 ms
    near = line.due("n2", 0.0)  # 30 ± 2 ms
    assert 0.073 <= far <= 0.077 and 0.028 <= near <= 0.032
    # a frame queued behind a far one on another link is not held back by it
    assert line.due("n2", 0.001) < far


@pytest.mark.parametrize("scheme", ["mem", "tcp"])
def test_wrapped_transport_keeps_order_and_the_minimum_delay(scheme: str) -> None:
    matrix = LatencyMatrix(
        ("east", "west"), ((0.2, 30.0), (30.0, 0.2)), jitter_ms=5.0,
        nodes=(("a", "east"), ("b", "west"), ("c", "east")),
    )
    lo_s = matrix.one_way_range_ms("east", "west")[0] / 1000  # 10 ms
    count = 300

    async def main() -> None:
        loop = asyncio.get_running_loop()
        sent_at: dict[int, float] = {}
        arrived_at: dict[int, float] = {}  # at b, the far end
        inbox_b, inbox_c = Inbox(), Inbox()
        url = "mem://" if scheme == "mem" else "tcp://127.0.0.1:0"

        def stamp(link: Link, frame: bytes) -> None:
            arrived_at.setdefault(number_of(frame), loop.time())

        inbox_b.hook = stamp
        a = WanTransport(transport_from_url(url), matrix, seed=1)
        b = WanTransport(transport_from_url(url), matrix, seed=2)
        c = WanTransport(transport_from_url(url), matrix, seed=3)
        try:
            await a.start("a", Inbox())
            await b.start("b", inbox_b)
            await c.start("c", inbox_c)
            a.add_peer("b", b.address)
            a.add_peer("c", c.address)
            with pytest.raises(LocalProtocolError):
                a.send("zz", b"unknown peer")
            for seq in range(count):
                sent_at[seq] = loop.time()
                a.send("b", numbered(seq))
                a.send("c", numbered(seq))
                if seq % 10 == 0:
                    await asyncio.sleep(0.001)  # spread sends over many loop turns
            assert a.held("b") > 0  # the far link is still holding frames
            # what it holds is not on the wire yet: buffered (per peer; None: the largest)
            assert a.buffered("b") >= a.held("b") * len(numbered(0)) > 0
            assert a.buffered() == max(a.buffered("b"), a.buffered("c"))
            await inbox_b.wait_until(lambda: len(inbox_b.got("a")) >= count, "far link")
            await inbox_c.wait_until(lambda: len(inbox_c.got("a")) >= count, "near link")
            assert inbox_b.got("a") == list(range(count))
            assert inbox_c.got("a") == list(range(count))
            await inbox_b.wait_until(lambda: a.buffered() == 0, "a holds nothing")
            a.send("b", numbered(count))
            assert a.buffered("b") > 0
            a.remove_peer("b")  # discards what the line held for it
            assert a.buffered("b") == a.buffered() == a.held() == 0
            for seq in range(count):
                assert arrived_at[seq] - sent_at[seq] >= lo_s - 1e-9  # float rounding only
        finally:
            await asyncio.gather(a.close(), b.close(), c.close())
        with pytest.raises(LocalProtocolError):
            a.send("b", b"after close")

    run(main)


def test_wrapper_refuses_peers_without_a_site() -> None:
    matrix = LatencyMatrix(("east",), ((0.2,),), nodes=(("a", "east"),))

    async def main() -> None:
        a = WanTransport(transport_from_url("mem://"), matrix)
        try:
            await a.start("a", Inbox())
            with pytest.raises(ConfigError):
                a.add_peer("coordinator", "mem://nowhere")
        finally:
            await a.close()

    run(main)


def test_the_wrapper_reports_its_inner_transports_frame_bound() -> None:
    """The runtime splits packets to the transport's `max_frame_bytes` (the channels'
    fragments); behind the WAN wrapper it must see the inner transport's bound."""
    matrix = LatencyMatrix(("east",), ((0.2,),), nodes=(("a", "east"),))
    inner = transport_from_url("mem://?max_frame_bytes=16384")
    assert WanTransport(inner, matrix).max_frame_bytes == inner.max_frame_bytes == 16384


def test_a_second_close_of_the_wrapper_waits_for_the_first() -> None:
    matrix = LatencyMatrix(("east",), ((0.2,),), nodes=(("a", "east"),))

    async def main() -> None:
        a = WanTransport(transport_from_url("tcp://127.0.0.1:0"), matrix)
        await a.start("a", Inbox())
        first = asyncio.ensure_future(a.close())
        await asyncio.sleep(0)  # the first close() is under way
        await a.close()
        assert first.done(), "a second close() returned before the first was over"

    run(main)
