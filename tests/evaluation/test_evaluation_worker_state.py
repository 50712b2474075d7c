"""A benchmark node's replicated state (evaluation/worker.py): how many messages of each
origin it holds. A node the group cut off and admitted again receives that state as a
snapshot instead of the deliveries it missed, and is complete once the state covers
every message of the run — not stuck short of the deliveries it will never make."""

from __future__ import annotations

import asyncio

from abcast.effects import Deliver, Stage
from abcast.evaluation.worker import WorkerConfig, _Run


class _Node:
    id = "n3"


def _run(messages: int) -> _Run:
    config = WorkerConfig(group="g", ordering="sequencer", transport="mem://", size=3,
                          messages=messages, registry="", run_id="state")
    return _Run(config, _Node())  # type: ignore[arg-type]


def test_a_snapshot_counts_toward_completion_and_later_deliveries_add_to_it() -> None:
    async def main() -> None:
        member, rejoiner = _run(6), _run(6)
        for origin, seq in (("n1", 1), ("n2", 1), ("n1", 2), ("n2", 2)):
            member.on_deliver(Deliver(origin, seq, bytes(8)))
        rejoiner.on_deliver(Deliver("n1", 1, bytes(8)))  # its first incarnation's
        rejoiner.set_state(member.get_state())
        assert rejoiner.per_origin == {"n1": 2, "n2": 2} and rejoiner.covered == 4
        assert rejoiner.delivered == 1  # deliveries it made itself, for the figures
        assert not rejoiner.finished.is_set()
        rejoiner.on_deliver(Deliver("n3", 1, bytes(8), Stage.OPTIMISTIC))  # not final
        rejoiner.on_deliver(Deliver("n3", 1, bytes(8)))
        assert not rejoiner.finished.is_set()
        rejoiner.on_deliver(Deliver("n3", 2, bytes(8)))
        assert rejoiner.finished.is_set() and rejoiner.covered == 6

    asyncio.run(main())


def test_a_snapshot_that_already_covers_the_run_completes_it() -> None:
    async def main() -> None:
        member, rejoiner = _run(2), _run(2)
        member.on_deliver(Deliver("n1", 1, bytes(8)))
        member.on_deliver(Deliver("n2", 1, bytes(8)))
        rejoiner.set_state(member.get_state())
        assert rejoiner.finished.is_set()
        rejoiner.set_state(b"")  # an empty snapshot: nothing covered
        assert rejoiner.covered == 0 and rejoiner.per_origin == {}

    asyncio.run(main())
