"""What a layer keeps: the bytes reachable from an object (`retained_bytes`), and a churn
run in the simulator that measures it on a long-lived member (`churn_sizes`) — how the
tests and bench/churn_memory.py prove that state does not grow with view changes.

Rules: the walk follows `gc.get_referents` from the object and counts each object once
(`sys.getsizeof`); it stops at classes, modules, functions and code (shared by every
instance, not state). The churn run keeps three anchors n1..n3 for the whole run; each
cycle two members join, one of them leaves gracefully and the other crashes, while the
anchors broadcast at a steady rate. Sizes are taken between cycles, when the group is
quiet for a moment, so what they count is kept state, not traffic in flight.
"""

from __future__ import annotations

import gc
import random
import sys
import types
from functools import partial

from abcast.ids import NodeId, View
from abcast.ordering.registry import build_stack
from abcast.sim.cluster import SimCluster
from abcast.sim.network import Network
from abcast.sim.scheduler import Scheduler
from abcast.trace.recorder import TraceRecorder

_SHARED = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
           types.CodeType, types.MethodType, types.MethodDescriptorType,
           types.WrapperDescriptorType, types.GetSetDescriptorType,
           types.MemberDescriptorType)

ANCHORS: tuple[NodeId, ...] = ("n1", "n2", "n3")
CYCLE_US = 3_000_000


def retained_bytes(root: object, *, stop: tuple[object, ...] = ()) -> int:
    """The bytes of every object reachable from `root` (each counted once), not counting
    shared objects (classes, modules, functions, code, interned small things) nor the
    objects in `stop` and what only they reach."""
    seen = {id(s) for s in stop}
    total = 0
    todo = [root]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, _SHARED):
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        todo.extend(gc.get_referents(obj))
    return total


def churn_sizes(
    ordering: str, *, cycles: int, every: int = 5, seed: int = 1, observed: NodeId = "n2",
    rate_per_s: float = 50.0,
) -> list[tuple[int, dict[str, int]]]:
    """Run `cycles` churn cycles (see the module rules) and return, after every `every`
    cycles, the retained bytes of each layer of `observed`'s stack (keyed by class name)."""
    scheduler = Scheduler()
    network = Network(random.Random(seed))
    cluster = SimCluster(scheduler, network, TraceRecorder("retained"))
    view = View(1, ANCHORS)
    for node in ANCHORS:
        cluster.add(build_stack(node, "g", ordering, view))

    def send(node: NodeId) -> None:
        sim_node = cluster.nodes[node]
        if not sim_node.stopped and not sim_node.stack.cut_off:
            cluster.broadcast(node, b"x" * 32)
            scheduler.after(int(1_000_000 * len(ANCHORS) / rate_per_s), partial(send, node))

    for k, node in enumerate(ANCHORS):
        scheduler.at(k * 1_000, partial(send, node))

    def join(node: NodeId) -> None:
        cluster.join(build_stack(node, "g", ordering, View(0, (node,))), ANCHORS)

    sizes: list[tuple[int, dict[str, int]]] = []
    for cycle in range(1, cycles + 1):
        start = scheduler.now
        stayer, crasher = f"j{cycle}", f"c{cycle}"
        scheduler.at(start + 10_000, partial(join, stayer))
        scheduler.at(start + 20_000, partial(join, crasher))
        scheduler.at(start + 1_000_000, partial(cluster.leave, stayer))
        scheduler.at(start + 1_200_000, partial(cluster.crash, crasher))
        scheduler.run(start + CYCLE_US)
        if cycle % every == 0:
            stack = cluster.nodes[observed].stack
            gc.collect()
            sizes.append((cycle, {type(layer).__name__: retained_bytes(layer)
                                  for layer in stack.layers}))
    return sizes
