"""`Stack._top_step` gives exactly what `_drain` of `[(2, event)]` gave before it.

Where the two lower layers of a three-layer stack have their shortcuts (the runtime's
failure detector and reliable channel), a packet both let up and a broadcast go to the
top layer's `handle` directly, and its effects are routed without the event queue while
they are the steady ones; at the first other effect the frames built so far are queued
and the rest goes through `_route` and `_drain`. The claim is that the outputs, their
order, the refusals and every layer's state are those of the queue path.

Rules: the top layer here is scripted (`Scripted`): each `handle` call returns 0-6
effects drawn from a seeded RNG — deliveries, timers set and cancelled, steady multicasts
(to one peer or both, in either order), control multicasts, multicasts to nobody, sends
(control or not), `Suspect`/`TakeSnapshot` — often in the order that matters (outputs,
then a steady multicast, then a fallback effect, then more steady ones), and sometimes
refuses a received packet (RemoteProtocolError). Under it run the real detector and
channel, the channel with a window the traffic fills (and frames a "big" multicast
overflows) so that `pass_down_each` refuses too. Two
groups of three stacks, one as built (counting the paths its top steps take) and one
whose `_top_step` is the queue path (`QueueStack`: the code before the change), are driven
through one seeded history: broadcasts, frames delivered FIFO per link in random
interleavings, a stranger's frames, time passing and timers firing. Every call must give
equal outputs and refusals, and every stack must end in an equal state (snapshots, the
channel's links, owed acks and tick, the scripted layer's record of what it saw). The
histories must take every path (`PATHS`), and planted top steps with one ordering rule
broken must be caught by the same comparison.
"""

from __future__ import annotations

import dataclasses
import random
from collections import Counter, deque
from collections.abc import Hashable, Sequence
from typing import Any, ClassVar

import pytest
from stack_harness import carry, channel_links, fire_due

from abcast.codec import Header, Packet, decode_envelope, encode_frame
from abcast.effects import (
    CancelTimer,
    Deliver,
    Effect,
    Multicast,
    Output,
    Send,
    SetTimer,
    Suspect,
    TakeSnapshot,
    Transmit,
)
from abcast.errors import RemoteProtocolError
from abcast.events import Event, Received
from abcast.group.failure_detector import FD
from abcast.ids import NodeId, View
from abcast.layer import Layer
from abcast.ordering.registry import OrderingOptions, build_stack
from abcast.reliability.channel import RData, ReliableChannel
from abcast.runtime.stack_options import STREAM_CHANNEL, for_streams
from abcast.snapshot import LayerSnapshot
from abcast.stack import Stack

NODES = ("n1", "n2", "n3")
GROUP = "g"
VIEW = View(1, NODES)
SEEDS = range(10)
#: the channel's frames: a "big" multicast is sent in fragments
FRAME_BYTES = 2048
#: a history's mix: broadcasts, frames received, a stranger's frames, up to these
MIX = (0.2, 0.8, 0.82)
#: the clock's steps (µs); the channel's first tick falls 1 s after its first packet
JUMPS = (300, 1_000, 1_000, 3_000, 20_000, 400_000)


class Top(Header, frozen=True):
    n: int


# -- the scripted top layer ----------------------------------------------------------

STEADY = ("deliver", "timer", "cancel", "multicast")
OUTPUTS = ("deliver", "timer", "cancel")
#: "big": a multicast too large for a frame, which `pass_down_each` refuses on any link
FALLBACK = ("control", "nobody", "send", "send-control", "suspect", "snapshot", "big")
KEYS: tuple[Hashable, ...] = ("a", "b", ("c", 1))


class Scripted(Layer):
    """A top layer whose every step is drawn from its seeded RNG (see the rules), or
    taken from `plan` while it holds steps (an exception in it is raised)."""

    name = "scripted"
    header_type = Top

    def __init__(self, node: NodeId, seed: int, refuse: float = 0.05, quiet: float = 0.4,
                 ) -> None:
        super().__init__(node)
        self.rng = random.Random(f"{seed}/{node}")
        self.peers = tuple(n for n in NODES if n != node)
        self.refuse = refuse
        self.quiet = quiet  # of the received packets, those that cause nothing
        self.seen: list[str] = []
        self.count = 0
        self.plan: deque[list[Effect] | RemoteProtocolError] = deque()
        self.silent = False  # no effects but the plan's

    def handle(self, event: Event, now: int) -> list[Effect]:
        self.seen.append(f"{now} {event!r}")
        if self.plan:
            step = self.plan.popleft()
            if isinstance(step, RemoteProtocolError):
                raise step
            return step
        rng = self.rng
        if self.silent:
            return []
        if type(event) is Received:
            if rng.random() < self.refuse:
                raise RemoteProtocolError(f"{self.node} refuses {event.header!r} from "
                                          f"{event.sender}")
            if rng.random() < self.quiet:
                return []
        if rng.random() < 0.35:  # the order that matters
            kinds = [*(rng.choice(OUTPUTS) for _ in range(rng.randint(1, 2))), "multicast",
                     rng.choice(FALLBACK), *(rng.choice(STEADY) for _ in range(rng.randint(0, 2)))]
        else:
            every = STEADY * 5 + FALLBACK
            kinds = [rng.choice(every) for _ in range(rng.randint(0, 6))]
        return [self._effect(kind, now) for kind in kinds]

    def _effect(self, kind: str, now: int) -> Effect:
        rng = self.rng
        self.count += 1
        header, inner = Top(self.count), Packet((), rng.randbytes(rng.randint(0, 30)))
        peer = rng.choice(self.peers)
        if kind == "deliver":
            return Deliver(rng.choice(NODES), self.count, inner.payload)
        if kind == "timer":
            return SetTimer(rng.choice(KEYS), now + rng.choice((500, 2_000, 30_000)))
        if kind == "cancel":
            return CancelTimer(rng.choice(KEYS))
        if kind == "multicast":
            to = rng.choice((self.peers, self.peers[::-1], (peer,)))
            return Multicast(to, header, inner)
        if kind == "control":
            return Multicast(rng.choice((self.peers, (peer,))), header, inner, control=True)
        if kind == "big":  # fragments, below: FRAME_BYTES
            return Multicast(self.peers, header, Packet((), rng.randbytes(FRAME_BYTES + 100)))
        if kind == "nobody":
            return Multicast((), header, inner)
        if kind in ("send", "send-control"):
            return Send(peer, header, inner, control=kind == "send-control")
        if kind == "suspect":
            return Suspect(peer)
        assert kind == "snapshot"
        return TakeSnapshot(self.count)

    def inspect(self) -> LayerSnapshot:
        return LayerSnapshot(layer=self.name, counters={"effects": self.count})


# -- the stacks compared --------------------------------------------------------------


class QueueStack(Stack):
    """The path before the change: the top layer's step is an event on the queue."""

    def _top_step(self, event: Event, now: int, queue: deque[tuple[int, Any]],
                  out: list[Output]) -> None:
        queue.append((2, event))
        self._drain(queue, now, out)


#: the paths a history must take, counted by `CountingStack`
PATHS = (
    "steady step with frames",  # no fallback, frames built
    "steady step, outputs then frames",  # ... a delivery or timer emitted before them
    "fallback with frames built",
    "fallback after an output",  # a delivery or timer already emitted
    "fallback with frames built after an output",
    "fallback at a refused multicast",  # pass_down_each said no
    "fallback at a refused multicast, frames built",  # ... after one it let down
    "fallback at a refused multicast that fits",  # ... refused for credit (or no tick yet)
    "fallback queueing events",  # a control multicast: the steady ones after it queue too
    "fallback queueing events, frames built",
    "refused at the top step",
    "refused in the queue",
)


class CountingStack(Stack):
    """The stack as built, counting the paths its top steps take (see `PATHS`)."""

    def __init__(self, node: NodeId, group: str, layers: list[Layer], view: View) -> None:
        super().__init__(node, group, layers, view)
        self.paths: Counter[str] = Counter()
        self._fell: bool | None = None  # in a top step: whether it fell back yet
        self._start = 0
        self._counted = False  # the refusal `_refused` takes was counted by the top step

    def _top_step(self, event: Event, now: int, queue: deque[tuple[int, Any]],
                  out: list[Output]) -> None:
        self._fell, self._start = False, len(out)
        try:
            super()._top_step(event, now, queue, out)
        except RemoteProtocolError:
            self.paths["refused in a fallback" if self._fell else
                       "refused at the top step"] += 1
            self._counted = True
            raise
        finally:
            fell, self._fell = self._fell, None
        if not fell and any(type(o) is Transmit for o in out[self._start:]):
            self.paths["steady step with frames"] += 1
            if type(out[self._start]) is not Transmit:
                self.paths["steady step, outputs then frames"] += 1

    def _route(self, index: int, effects: Sequence[Effect], queue: deque[tuple[int, Any]],
               now: int, out: list[Output]) -> None:
        if self._fell is False:  # the top step's first `_route`: its fallback
            self._fell = True
            frames = sum(i < 0 for i, _ in queue)  # (-3, Transmit): nothing else yet
            emitted = len(out) > self._start
            self.paths["fallback with frames built"] += frames > 0
            self.paths["fallback after an output"] += emitted
            self.paths["fallback with frames built after an output"] += frames > 0 and emitted
            first = effects[0]
            if (type(first) is Multicast and not first.control and first.to
                    and self.node not in first.to):
                self.paths["fallback at a refused multicast"] += 1
                self.paths["fallback at a refused multicast, frames built"] += frames > 0
                self.paths["fallback at a refused multicast that fits"] += (
                    len(first.inner.payload) < FRAME_BYTES)
            queues = any(type(e) is Multicast and e.control and e.to for e in effects)
            self.paths["fallback queueing events"] += queues
            self.paths["fallback queueing events, frames built"] += queues and frames > 0
        super()._route(index, effects, queue, now, out)

    def _refused(self, refusal: RemoteProtocolError, queue: deque[tuple[int, Any]],
                 now: int, out: list[Output]) -> RemoteProtocolError:
        if not self._counted:
            self.paths["refused in the queue"] += 1
        self._counted = False
        return super()._refused(refusal, queue, now, out)


def options(window: int) -> OrderingOptions:
    channel = dataclasses.replace(STREAM_CHANNEL, tick_us=1_000, ack_delay_us=2_000,
                                  window=window, frame_bytes=FRAME_BYTES)
    return for_streams(OrderingOptions(channel=channel))


def group(kind: type[Stack], seed: int, window: int = 48, refuse: float = 0.05,
          ) -> dict[NodeId, Stack]:
    stacks = {}
    for node in NODES:
        built = build_stack(node, GROUP, "sequencer", VIEW, options(window))
        channel = built.layers[1]
        assert isinstance(channel, ReliableChannel)
        channel.decode_above([Top])
        layers = [built.layers[0], channel, Scripted(node, seed, refuse)]
        stacks[node] = kind(node, GROUP, layers, VIEW)
    return stacks


def state(stack: Stack) -> list[object]:
    """Every layer's snapshot, and what the channel's leaves out (its links, owed acks,
    credit queues and tick), and all the scripted layer saw."""
    channel = stack.layers[1]
    top = stack.layers[2]
    assert isinstance(channel, ReliableChannel) and isinstance(top, Scripted)
    return [*stack.inspect(), *channel_links(channel), channel._tick_set, top.seen,
            top.rng.getstate(), stack.view]


def refusal(error: RemoteProtocolError | None) -> object:
    if error is None:
        return None
    return type(error).__name__, str(error), getattr(error, "__notes__", [])


# -- the driver -----------------------------------------------------------------------


def run(stacks: dict[NodeId, Stack], seed: int, steps: int = 400,
        ) -> tuple[list[object], list[list[object]]]:
    """Every stack call's outputs and refusal, and the final states, for one history."""
    rng = random.Random(seed)
    links: dict[tuple[NodeId, NodeId], list[bytes]] = {}
    timers: dict[tuple[NodeId, Hashable], int] = {}
    log: list[object] = []
    now = 0

    def step(label: str, node: NodeId, outputs: list[Output],
             refused: RemoteProtocolError | None = None) -> None:
        log.append((label, node, outputs, refusal(refused)))
        carry(node, outputs, links, timers, stacks)

    for node, stack in stacks.items():
        step("start", node, stack.start(now))
    for _ in range(steps):
        roll = rng.random()
        if roll < MIX[0]:
            node = rng.choice(NODES)
            _, outputs = stacks[node].broadcast(rng.randbytes(rng.randint(0, 20)), now)
            step("broadcast", node, outputs)
        elif roll < MIX[1]:
            ready = sorted(link for link, frames in links.items() if frames)
            if ready:
                src, dst = rng.choice(ready)
                env = decode_envelope(links[(src, dst)].pop(0))
                outputs, refused = stacks[dst].receive(env, now)
                step(f"receive from {src}", dst, outputs, refused)
        elif roll < MIX[2]:  # a stranger's frame: through the queue, the top may refuse it
            dst = rng.choice(NODES)
            frame = encode_frame(GROUP, "x9", Packet((FD, RData(1), Top(0)), b"?"))
            outputs, refused = stacks[dst].receive(decode_envelope(frame), now)
            step("stranger", dst, outputs, refused)
        else:
            now += rng.choice(JUMPS)
            fire_due(stacks, timers, now, step)
    return log, [state(stack) for stack in stacks.values()]


def differs(seed: int, kind: type[Stack]) -> str | None:
    """Where `kind`'s group and the queue path's part in one history, or None."""
    log, states = run(group(kind, seed), seed)
    ref_log, ref_states = run(group(QueueStack, seed), seed)
    for i, (got, want) in enumerate(zip(log, ref_log, strict=False)):
        if got != want:
            return f"call {i}: {got!r} != {want!r}"
    if len(log) != len(ref_log):
        return "the histories differ in length"
    for node, got_state, want_state in zip(NODES, states, ref_states, strict=True):
        if got_state != want_state:
            return f"{node}'s final state differs"
    return None


# -- the claim ------------------------------------------------------------------------


def test_the_stacks_compared_differ_only_in_the_top_step() -> None:
    """The stack as built takes `_top_step` (both lower layers have their shortcuts);
    the reference differs from it in that method alone."""
    stack = group(CountingStack, 0)["n1"]
    assert stack._pass_up is not None and stack._pass_up2 is not None
    assert stack._pass_down is not None and stack._pass_down_each is not None
    assert isinstance(stack.top, Scripted)
    assert [name for name in vars(QueueStack) if not name.startswith("__")] == ["_top_step"]


@pytest.mark.parametrize("seed", SEEDS)
def test_the_top_step_gives_the_queue_paths_outputs_refusals_and_states(seed: int) -> None:
    assert differs(seed, CountingStack) is None


def test_the_histories_take_every_path() -> None:
    """The histories above do reach each path, so the comparison covers them."""
    paths: Counter[str] = Counter()
    for seed in SEEDS:
        stacks = group(CountingStack, seed)
        run(stacks, seed)
        for stack in stacks.values():
            assert isinstance(stack, CountingStack)
            paths.update(stack.paths)
    for path in PATHS:
        assert paths[path] >= 20, (path, dict(paths))


# -- planted top steps: the comparison must see each ---------------------------------


class PlantedStack(Stack):
    """`_top_step` written again, with one rule broken by `mode` ("faithful": none)."""

    mode: ClassVar[str] = "faithful"

    def _top_step(self, event: Event, now: int, queue: deque[tuple[int, Any]],
                  out: list[Output]) -> None:
        effects = self.layers[2].handle(event, now)
        each, pass_down = self._pass_down_each, self._pass_down
        assert each is not None and pass_down is not None
        frames: list[Transmit] = []
        for i, effect in enumerate(effects):
            if type(effect) is Deliver:
                out.append(effect)
                continue
            if type(effect) is SetTimer:
                out.append(SetTimer((2, effect.key), effect.at))
                continue
            if type(effect) is CancelTimer:
                out.append(CancelTimer((2, effect.key)))
                continue
            if (type(effect) is Multicast and effect.to and self.node not in effect.to
                    and (not effect.control or self.mode == "control multicasts let down")):
                packet = effect.inner.push(effect.header)
                heads = each(effect.to, packet, now)
                if heads is not None:
                    built = [Transmit((dest,), encode_frame(self.group, self.node, Packet(
                        (pass_down((dest,), now), head, *packet.headers), packet.payload)),
                        False) for dest, head in zip(effect.to, heads, strict=True)]
                    (out if self.mode == "frames before the outputs" else frames).extend(built)
                    continue
            if self.mode == "frames emitted at the fallback":
                out.extend(frames)
            elif self.mode != "frames forgotten at the fallback":
                queue.extend((-3, frame) for frame in frames)
            self._route(2, effects[i:], queue, now, out)
            self._drain(queue, now, out)
            return
        out.extend(frames)


def planted(mode: str) -> type[Stack]:
    return type(f"Planted{mode.title().replace(' ', '')}", (PlantedStack,), {"mode": mode})


def test_the_planted_top_step_is_faithful_when_nothing_is_broken() -> None:
    """So that what the next test catches is the planted break, not the copy."""
    for seed in SEEDS[:3]:
        assert differs(seed, planted("faithful")) is None


@pytest.mark.parametrize("mode", ["frames before the outputs", "frames emitted at the fallback",
                                  "frames forgotten at the fallback",
                                  "control multicasts let down"])
def test_a_top_step_breaking_a_rule_is_caught(mode: str) -> None:
    missed = [seed for seed in SEEDS if differs(seed, planted(mode)) is None]
    assert not missed, f"'{mode}' went unseen on seeds {missed}"


# -- refusals by the top layer, on each path ------------------------------------------


def warm(stacks: dict[NodeId, Stack]) -> tuple[list[object], int]:
    """A started group with silent top layers, past its channels' first tick (before
    it they let nothing through), every link carrying traffic both ways and quiet
    again: the log of its calls, and the time."""
    log: list[object] = []
    timers: dict[tuple[NodeId, Hashable], int] = {}
    wire: list[tuple[NodeId, bytes]] = []

    def carry(node: NodeId, outputs: list[Output]) -> None:
        log.append((node, outputs))
        for out in outputs:
            if isinstance(out, Transmit):
                wire.extend((dst, out.data) for dst in out.to)
            elif isinstance(out, SetTimer):
                timers[(node, out.key)] = out.at
            elif isinstance(out, CancelTimer):
                timers.pop((node, out.key), None)

    for node, stack in stacks.items():
        top = stack.layers[2]
        assert isinstance(top, Scripted)
        top.silent = True
        carry(node, stack.start(0))
    for now in (0, 1_000_000, 1_002_000, 1_004_000):
        for node, stack in stacks.items():
            top = stack.layers[2]
            assert isinstance(top, Scripted)
            top.plan.append([Multicast(top.peers, Top(now))])
            carry(node, stack.broadcast(b"", now)[1])
        for (node, key), at in sorted(timers.items(), key=repr):
            if at <= now:
                del timers[(node, key)]
                carry(node, stacks[node].fire(key, now))
        while wire:
            dst, data = wire.pop(0)
            outputs, refused = stacks[dst].receive(decode_envelope(data), now)
            assert refused is None
            carry(dst, outputs)
    return log, 1_004_500


STEADY_STEP: list[Effect] = [Deliver("n1", 1, b"d"), Multicast(("n1", "n3"), Top(1)),
                             SetTimer("a", 9_000)]
FALLBACK_STEP: list[Effect] = [Deliver("n2", 2, b"d"), Multicast(("n3", "n1"), Top(2)),
                               TakeSnapshot(7), Multicast(("n1",), Top(3), control=True),
                               Multicast(("n1", "n3"), Top(4)), SetTimer("b", 5)]
NO = RemoteProtocolError("no")


@pytest.mark.parametrize(("name", "plans", "order", "paths"), [
    # n2's top refuses n1's first packet at the top step
    ("at the top step", [NO, []], [0, 1], {"refused at the top step": 1}),
    # its top step for the first falls back; the second, a top step, is refused
    ("after a fallback", [FALLBACK_STEP, NO], [0, 1], {
        "fallback with frames built": 1, "fallback after an output": 1,
        "fallback with frames built after an output": 1, "fallback queueing events": 1,
        "fallback queueing events, frames built": 1, "refused at the top step": 1}),
    # a steady step, then the refusal
    ("after a steady step", [STEADY_STEP, NO], [0, 1], {
        "steady step with frames": 1, "steady step, outputs then frames": 1,
        "refused at the top step": 1}),
    # the second arrives first (held by the channel), then the first releases both
    # through the queue: the first is refused, the second's step handled after it
    ("in the queue, first of two", [NO, FALLBACK_STEP], [1, 0], {"refused in the queue": 1}),
    ("in the queue, second of two", [FALLBACK_STEP, NO], [1, 0], {"refused in the queue": 1}),
])
def test_a_refusal_by_the_top_layer_is_the_queue_paths(
    name: str, plans: list[list[Effect] | RemoteProtocolError], order: list[int],
    paths: dict[str, int],
) -> None:
    runs = []
    for kind in (CountingStack, QueueStack):
        stacks = group(kind, 0, window=64)
        log, now = warm(stacks)
        n1, n2 = stacks["n1"].layers[2], stacks["n2"].layers[2]
        assert isinstance(n1, Scripted) and isinstance(n2, Scripted)
        sent: list[bytes] = []
        for n in (1, 2):
            n1.plan.append([Multicast(("n2", "n3"), Top(10 + n), Packet((), b"x"))])
            _, outputs = stacks["n1"].broadcast(b"b", now)
            sent += [o.data for o in outputs if isinstance(o, Transmit) and "n2" in o.to]
            log.append(outputs)
        assert len(sent) == 2
        counting = stacks["n2"]
        if isinstance(counting, CountingStack):
            counting.paths.clear()
        n2.plan.extend(RemoteProtocolError(*p.args) if isinstance(p, RemoteProtocolError)
                       else p for p in plans)  # a fresh refusal per run
        refusals = []
        for k in order:
            outputs, refused = stacks["n2"].receive(decode_envelope(sent[k]), now)
            log.append((outputs, refusal(refused)))
            refusals.append(refusal(refused))
        assert not n2.plan
        assert refusals.count(refusal(NO)) == 1 and refusals.count(None) == 1
        if isinstance(counting, CountingStack):
            assert dict(counting.paths) == paths, name
        runs.append((log, [state(stack) for stack in stacks.values()]))
    (log, states), (ref_log, ref_states) = runs
    assert log == ref_log
    assert states == ref_states
