"""`GroupMeter`, what a group's driver counts while metrics are on: the batch-size
histogram is exact (bucketed at scrape time from per-size counts), the latency histogram
follows one batch at a time and says so in its `_count`."""

from __future__ import annotations

import random

from abcast.runtime.metrics import (
    BATCH_BUCKETS,
    LATENCY_BUCKETS_S,
    SAMPLE_GIVEN_UP_US,
    Buckets,
    GroupMeter,
)


class _Clock:
    def __init__(self, now_us: int = 0) -> None:
        self.now = now_us

    def now_us(self) -> int:
        return self.now


def test_batch_sizes_bucket_as_if_each_batch_were_observed() -> None:
    rng = random.Random(7)
    meter, each = GroupMeter(), Buckets(BATCH_BUCKETS)
    seq = 1
    for _ in range(2_000):
        size = rng.choice((1, 1, 2, 3, 64, 100, 1024, 5000))
        meter.sent(seq, size, 0)
        each.observe(size)
        seq += size
    got = meter.batches
    assert got.cumulative() == each.cumulative()
    assert (got.count, got.total) == (2_000, seq - 1)


def test_latency_follows_one_batch_at_a_time() -> None:
    meter, clock = GroupMeter(), _Clock()
    meter.sent(1, 3, 100)  # followed
    meter.sent(4, 2, 150)  # not: a sample awaits its delivery
    clock.now = 350
    meter.delivered(1, clock)
    meter.delivered(4, clock)
    assert meter.latency.count == 1
    assert meter.latency.total == 250 / 1e6
    meter.sent(6, 1, 400)  # followed again
    clock.now = 1_400
    meter.delivered(6, clock)
    assert meter.latency.count == 2
    assert meter.latency.cumulative()[LATENCY_BUCKETS_S.index(0.001)] == ("0.001", 2)


def test_a_sample_delivered_inside_a_later_batch_or_never_is_given_up() -> None:
    meter, clock = GroupMeter(), _Clock(10)
    meter.sent(5, 1, 0)
    meter.delivered(4, clock)  # an earlier batch: the sample still waits
    meter.delivered(7, clock)  # past it: it came inside another batch, not measured
    meter.sent(8, 1, 20)
    meter.sent(9, 1, 30)
    assert meter.latency.count == 0
    meter.sent(1, 1, 20 + SAMPLE_GIVEN_UP_US + 1)  # 8 never came (numbering restarted)
    clock.now = 40 + SAMPLE_GIVEN_UP_US
    meter.delivered(1, clock)
    assert meter.latency.count == 1
    assert meter.latency.total == 19 / 1e6
