"""A view change under load whose state transfer is far larger than the network's frame
bound (2 KiB here; 16 MiB on tcp by default): the flush's MState/MInstall cross in
fragments (over the reliable and the NAK channel), an evs merge's states too, the view
installs, and every check stays clean. The same join with the channel's fragmentation
off — what main did — is caught: the network refuses the frames and the view never
installs. The basic channel sends each fragment once: a lost one loses its packet."""

from __future__ import annotations

import pytest

from abcast.ids import NodeId, View
from abcast.ordering.registry import OrderingOptions, build_stack
from abcast.reliability.basic_channel import BasicChannel
from abcast.reliability.channel import ChannelConfig, ReliableChannel
from abcast.reliability.nak import NakChannel
from abcast.sim import SimConfig, SimResult, run_simulation
from abcast.sim.churn import judge
from abcast.stack import Stack

FRAME = 2_048
NET = "drop=0.03,dup=0.02,delay=1-20ms"


def _run(ordering: str, faults: str, *, fragment: bool, seed: int = 1, nak: bool = False,
         ) -> tuple[SimResult, list[Stack]]:
    stacks: list[Stack] = []
    options = OrderingOptions(multicast="nak" if nak else None).within_frames(FRAME)

    def make(node: NodeId, view: View) -> Stack:
        stack = build_stack(node, "g", ordering, view, options)
        if not fragment:  # the channel as on main: it sends every packet whole
            channel = next(layer for layer in stack.layers
                           if isinstance(layer, ReliableChannel))
            channel.__init__(node, options.channel)  # type: ignore[misc]
        stacks.append(stack)
        return stack

    # Open loop at 40 k msgs/s of 512 bytes: thousands unstable when the view changes.
    config = SimConfig(ordering, nodes=4, messages=3_000, seed=seed, faults=f"{NET},{faults}",
                       payload=512, rate=40_000, frame_bytes=FRAME, options=options,
                       ip_multicast=nak)
    return run_simulation(config, stack_factory=make), stacks


def _largest_split(stacks: list[Stack]) -> int:
    """The largest packet a channel split (the NAK channel's: its measured bytes are not
    kept, so its fragment count in frames)."""
    split = [int(snap.counters.get("largest_split", 0))
             for stack in stacks for snap in stack.inspect()]
    naks = [layer for stack in stacks for layer in stack.layers if isinstance(layer, NakChannel)]
    return max(split + [layer.largest_split for layer in naks])


def _views(result: SimResult, node: NodeId) -> list[tuple[str, ...]]:
    return [tuple(r.members or ()) for r in result.recorder.rows_of(node) if r.kind == "view"]


def _clean(result: SimResult, stacks: list[Stack]) -> None:
    violations, problems = judge(result)
    assert result.violations == [] and violations == [] and problems == []
    assert result.quiescent and result.oversize_frames == 0
    assert _views(result, "n5")[-1] == ("n1", "n2", "n3", "n4", "n5")
    assert _largest_split(stacks) > 100 * FRAME


@pytest.mark.parametrize(("ordering", "nak"), [("sequencer", False), ("causal", False),
                                               ("sequencer", True)])
def test_a_join_under_load_transfers_state_hundreds_of_frames_long(
    ordering: str, nak: bool,
) -> None:
    _clean(*_run(ordering, "join=n5@60ms", fragment=True, nak=nak))


def test_without_fragmentation_the_view_never_installs_and_the_test_says_so() -> None:
    result, stacks = _run("sequencer", "join=n5@60ms", fragment=False)
    assert result.oversize_frames > 0
    assert _views(result, "n5") == [("n5",)]  # never admitted
    with pytest.raises(AssertionError):
        _clean(result, stacks)


@pytest.mark.parametrize("drop", [0.0, 0.05])
def test_the_basic_channel_sends_fragments_once_and_a_lost_one_loses_its_packet(
    drop: float,
) -> None:
    options = OrderingOptions(multicast="basic", channel=ChannelConfig(frame_bytes=FRAME))
    config = SimConfig("fifo", nodes=3, messages=150, seed=2, payload=3 * FRAME,
                       faults=f"drop={drop},dup=0.02,delay=1-20ms", rate=2_000,
                       frame_bytes=FRAME, options=options)
    stacks: list[Stack] = []

    def make(node: NodeId, view: View) -> Stack:
        stacks.append(build_stack(node, "g", "fifo", view, options))
        return stacks[-1]

    result = run_simulation(config, stack_factory=make)
    assert result.violations == [] and result.oversize_frames == 0
    channels = [layer for s in stacks for layer in s.layers if isinstance(layer, BasicChannel)]
    assert sum(c.fragmented for c in channels) == 150 * 2  # every broadcast, to each peer
    if drop:  # some packets lost a fragment; the rest arrived whole
        assert 0 < result.delivered < 150 * 3
    else:
        assert result.delivered == 150 * 3


def test_an_evs_merge_under_load_moves_its_states_in_fragments() -> None:
    options = OrderingOptions(partitions="evs").within_frames(FRAME)
    stacks: list[Stack] = []

    def make(node: NodeId, view: View) -> Stack:
        stacks.append(build_stack(node, "g", "sequencer", view, options))
        return stacks[-1]

    config = SimConfig("sequencer", nodes=6, messages=6_000, seed=1, rate=2_000, payload=256,
                       faults="drop=0.02,delay=1-15ms,partition=n1+n2+n3|*@300ms-2300ms",
                       options=options, stall_us=4_000_000, frame_bytes=FRAME)
    result = run_simulation(config, stack_factory=make)
    violations, problems = judge(result)
    assert result.violations == [] and violations == [] and problems == []
    assert result.oversize_frames == 0
    everyone = tuple(f"n{i}" for i in range(1, 7))
    for node in everyone:  # apart, then one merge view
        assert _views(result, node)[-1] == everyone and len(_views(result, node)) == 3
    assert _largest_split(stacks) > 100 * FRAME
