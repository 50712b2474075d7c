"""A slowed node in the simulator (issue #21): the links into n3 hold every packet for
seconds at a time (`hold=n1+n2+n4>n3`), so it acknowledges nothing meanwhile, while the others
broadcast at a steady rate. The channel's window bounds what every sender keeps for
retransmission on one link and what every receiver remembers above its mark, whatever
the workload; the packets past the window wait for credit and all go out when the
holds end — every message is delivered everywhere, every check clean. A planted channel
without the window breaks the bound."""

from __future__ import annotations

import pytest

from abcast.effects import Effect
from abcast.events import Event
from abcast.ids import NodeId, View
from abcast.ordering.fifo import Fifo
from abcast.reliability.channel import ChannelConfig, ReliableChannel
from abcast.sim import SimConfig, run_simulation
from abcast.stack import Stack

WINDOW = 16
CFG = ChannelConfig(window=WINDOW, max_waiting=WINDOW)
SLOW = "drop=0.02,delay=1-10ms,hold=n1+n2+n4>n3@200ms-1500ms,hold=n1+n2+n4>n3@2s-3500ms"


class PeakChannel(ReliableChannel):
    """The channel, noting the peaks of its per-link queues after every event."""

    peaks: dict[str, int]

    def handle(self, event: Event, now: int) -> list[Effect]:
        effects = super().handle(event, now)
        peaks = self.peaks
        for link in self._out.values():
            peaks["unacked"] = max(peaks.get("unacked", 0), len(link.unacked))
            peaks["waiting"] = max(peaks.get("waiting", 0), len(link.waiting))
        for inbound in self._in.values():
            peaks["above"] = max(peaks.get("above", 0), len(inbound.above))
        return effects


class NoWindow(PeakChannel):
    """Planted: a sender that never waits for credit (the channel before issue #21)."""

    def _send(self, to: NodeId, packet: object, now: int, control: bool = False) -> list[Effect]:
        if to not in self._members:
            return []
        link = self._out.get(to) or self._out.setdefault(to, self._new_out_link())
        return self._transmit(to, link, packet, now, control)  # type: ignore[arg-type]


def _run(channel: type[PeakChannel], seed: int) -> tuple[dict[str, int], object]:
    peaks: dict[str, int] = {}

    def make(node: NodeId, view: View) -> Stack:
        layer = channel(node, CFG)
        layer.peaks = peaks
        return Stack(node, "g", [layer, Fifo(node)], view)

    config = SimConfig("fifo", nodes=4, messages=1200, seed=seed, faults=SLOW, rate=600)
    return peaks, run_simulation(config, stack_factory=make)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_slowed_node_keeps_every_channel_queue_under_the_window(seed: int) -> None:
    peaks, result = _run(PeakChannel, seed)
    assert result.violations == [] and result.quiescent  # type: ignore[attr-defined]
    assert peaks["unacked"] <= WINDOW and peaks["above"] <= WINDOW
    assert peaks["waiting"] > WINDOW  # the holds did push back: credit ran out


def test_a_channel_without_the_window_is_caught() -> None:
    peaks, _ = _run(NoWindow, 1)
    assert peaks["unacked"] > WINDOW
