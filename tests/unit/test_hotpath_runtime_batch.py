"""The runtime's per-message shortcuts change nothing but cost.

Backpressure asked once per stack step: `GroupDriver.backpressured` keeps the stack's
answer until the stack is stepped again (every step ends in `_apply`, which forgets it).
Three sequencer stacks with a tight flow control (max_unstable 2, a credit queue of 2) are
driven by their drivers over a virtual network and clock through seeded histories of
broadcasts, frames delivered in random interleavings (FIFO per link) and timers; after
every step each driver's answer must equal its stack's, asked afresh. A planted driver
that never forgets its answer must be caught.

A delivered batch, untraced, is handed out one `Deliver` at a time without the list:
the application must get exactly `batching.unpack`'s deliveries, in order, and the counts
must match, also when the application closes the group in the middle of a batch. A
planted `_deliver` that goes on past the close must be caught.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from abcast.batching import pack, unpack
from abcast.codec import decode_envelope
from abcast.effects import Deliver, Output, Stage
from abcast.ids import NodeId, View
from abcast.ordering.registry import OrderingOptions, build_stack
from abcast.runtime.driver import GroupDriver
from abcast.runtime.stack_options import for_streams
from abcast.testing.virtual_loop import NetHost, VirtualLoop

NODES = ("n1", "n2", "n3")


def run_credit_history(seed: int, steps: int = 300) -> int:
    """Drive three drivers; after every step compare each driver's cached answer with
    its stack's. Returns how many answers were True (the history did press)."""
    rng = random.Random(seed)
    loop = VirtualLoop()
    links: dict[tuple[NodeId, NodeId], list[bytes]] = {}
    view = View(1, NODES)
    base = for_streams(OrderingOptions(max_unstable=2))
    options = replace(base, channel=replace(base.channel, window=2, max_waiting=2))
    drivers = []
    for node in NODES:
        driver = GroupDriver(NetHost(node, loop, links),
                             build_stack(node, "g", "sequencer", view, options))
        driver._loop = loop  # type: ignore[assignment]  # the virtual loop stands in
        driver._apply(driver.stack.start(0))
        drivers.append(driver)
    pressed = 0
    for _ in range(steps):
        roll = rng.random()
        if roll < 0.45:
            driver = rng.choice(drivers)
            if not driver.backpressured():
                for _ in range(rng.randrange(1, 4)):
                    driver.broadcast(b"x")
                driver.flush()
            loop.soon.clear()  # the turn's end would only flush again: nothing queued
        elif roll < 0.9:
            busy = [link for link, frames in links.items() if frames]
            if busy:
                src, dst = rng.choice(busy)
                data = links[(src, dst)].pop(0)
                drivers[NODES.index(dst)].receive(decode_envelope(data))
        else:
            loop.fire_next()
        for driver in drivers:
            answer = driver.backpressured()
            assert answer == driver.stack.backpressured(), f"seed {seed}: {driver.host.id}"
            pressed += answer
    return pressed


@pytest.mark.parametrize("seed", range(12))
def test_backpressure_asked_once_per_step_answers_as_the_stack(seed: int) -> None:
    run_credit_history(seed)


def test_the_histories_do_press() -> None:
    assert sum(run_credit_history(seed) for seed in range(4)) > 0


def test_a_driver_that_never_forgets_its_answer_is_caught(
        monkeypatch: pytest.MonkeyPatch) -> None:
    correct = GroupDriver._apply

    def remembers(self: GroupDriver, outputs: list[Output]) -> None:
        pressure = self._pressure
        correct(self, outputs)
        self._pressure = pressure  # planted: the step's change is not seen

    monkeypatch.setattr(GroupDriver, "_apply", remembers)
    with pytest.raises(AssertionError):
        for seed in range(12):
            run_credit_history(seed)


# -- delivered batches ------------------------------------------------------------------

def deliver_history(seed: int, driver_type: type[GroupDriver] = GroupDriver) -> None:
    """Random batches, both stages, a callback that sometimes closes the group."""
    rng = random.Random(seed)
    for _ in range(20):
        _one_driver(rng, driver_type, f"seed {seed}")


def _one_driver(rng: random.Random, driver_type: type[GroupDriver], label: str) -> None:
    stack = build_stack("n1", "g", "sequencer", View(1, ("n1",)), OrderingOptions())
    got: list[Deliver] = []
    close_after = rng.choice((None, rng.randrange(0, 40)))
    use_callback = rng.random() < 0.9

    def on_deliver(delivery: Deliver) -> None:
        got.append(delivery)
        if close_after is not None and len(got) > close_after:
            driver.closed = True  # as close() does, seen by the delivering loop

    driver = driver_type(NetHost("n1", VirtualLoop()), stack,
                         on_deliver=on_deliver if use_callback else None)
    expected: list[Deliver] = []
    for _ in range(rng.randrange(1, 5)):
        first = rng.randrange(1, 1_000)
        payloads = [bytes([rng.randrange(256)]) * rng.randrange(0, 5)
                    for _ in range(rng.randrange(1, 40))]
        stage = rng.choice((Stage.FINAL, Stage.OPTIMISTIC))
        batch = Deliver(rng.choice(NODES), rng.randrange(1, 50), pack(first, payloads), stage)
        before = (driver.delivered, driver.opt_delivered)
        driver._deliver(batch)
        if not use_callback:
            n = len(payloads)
            assert (driver.delivered, driver.opt_delivered) == (
                (before[0] + n, before[1]) if stage is Stage.FINAL
                else (before[0], before[1] + n)), label
            continue
        expected.extend(unpack(batch))
        if driver.closed:
            assert close_after is not None
            expected = expected[:close_after + 1]
            break
    if use_callback:
        assert got == expected, label
        final = sum(d.stage is Stage.FINAL for d in got)
        assert (driver.delivered, driver.opt_delivered) == (final, len(got) - final), label


@pytest.mark.parametrize("seed", range(10))
def test_an_untraced_batch_delivers_what_unpack_gives(seed: int) -> None:
    deliver_history(seed)


def test_delivering_past_a_close_is_caught() -> None:
    class PastClose(GroupDriver):
        def _deliver(self, delivered: Deliver) -> None:
            on_deliver = self.on_deliver
            for delivery in unpack(delivered):  # planted: no look at `closed`
                if delivery.stage is Stage.FINAL:
                    self.delivered += 1
                else:
                    self.opt_delivered += 1
                if on_deliver is not None:
                    on_deliver(delivery)

    with pytest.raises(AssertionError):
        for seed in range(10):
            deliver_history(seed, PastClose)
