"""Replicated objects in the simulator: a replica as each simulated node's application.

Rules: `ReplicaCluster` is the simulator's `SimCluster` whose application on every node
is a `Replica` instead of the digest chain: deliveries execute operations, a
`TakeSnapshot` is answered with the replica's state and `InstallState` loads it, each at
its exact place among the node's outputs. `simulate_replicas` runs one seeded
simulation (any ordering, the `--faults` vocabulary including join= and leave=) in
which every node issues writes in a closed loop — its next write once its previous one
executed on its own copy, RepMI's synchronous invocation — until `operations` writes
went out; it returns the copies, the outcomes each origin saw and the trace checks.
Everything random comes from one `random.Random(seed)`.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Protocol

from abcast.checks import Violation, check_events
from abcast.effects import Deliver, InstallState, InstallView, Output, Stage, TakeSnapshot
from abcast.errors import ConfigError
from abcast.ids import NodeId, View
from abcast.ordering.registry import OrderingOptions, build_stack, get_ordering
from abcast.replicated.replica import Outcome, Replica
from abcast.sim.cluster import SimCluster, SimNode
from abcast.sim.faults import parse_faults
from abcast.sim.network import DEFAULT_LINK, LinkModel, Network
from abcast.sim.scheduler import Scheduler
from abcast.stack import Stack
from abcast.trace.recorder import TraceRecorder

#: picks the next write a node issues: (method, args)
CallPicker = Callable[[random.Random, NodeId], tuple[str, tuple[Any, ...]]]


class Core(Protocol):
    """What a node's application is: a `Replica`, or a `Directory` of named objects."""

    def apply(self, origin: NodeId, seq: int, payload: bytes) -> Outcome | None: ...

    def state(self) -> bytes: ...

    def load(self, state: bytes) -> None: ...


#: the bytes of the next operation a node issues, given its own application
Invoker = Callable[[random.Random, NodeId, Any], bytes]


class ReplicaCluster(SimCluster):
    def __init__(self, scheduler: Scheduler, network: Network, recorder: TraceRecorder,
                 factory: Callable[[], object],
                 core: Callable[[NodeId], Core] | None = None) -> None:
        super().__init__(scheduler, network, recorder, on_deliver=self._execute)
        self.factory = factory
        self.core = core or (lambda node: Replica(self.factory(), node))
        self.replicas: dict[NodeId, Any] = {}
        #: nodes outside the group (a ticket server): run, but kept out of the trace
        self.services: set[NodeId] = set()
        self.outcomes: dict[NodeId, list[Outcome]] = {}
        self.on_outcome: Callable[[NodeId, Outcome], None] | None = None

    def add_replica(self, stack: Stack, contacts: tuple[NodeId, ...] | None = None) -> SimNode:
        self.replicas[stack.node] = self.core(stack.node)
        self.outcomes[stack.node] = []
        return self.join(stack, contacts) if contacts is not None else self.add(stack)

    def add_service(self, stack: Stack) -> SimNode:
        self.services.add(stack.node)
        return self.add(stack)

    def stop(self, node: NodeId) -> None:
        """Crash `node`; a service stops without a trace row (it is no member)."""
        if node not in self.services:
            self.crash(node)
            return
        sim_node = self.nodes[node]
        sim_node.crashed = True
        sim_node.timers.clear()

    def _execute(self, node: NodeId, delivery: Deliver) -> None:
        if delivery.stage is not Stage.FINAL:
            return  # a tentative delivery (ordering "optimistic"): the final one applies
        outcome = self.replicas[node].apply(delivery.origin, delivery.seq, delivery.payload)
        if outcome is not None:
            self.outcomes[node].append(outcome)
            if self.on_outcome is not None:
                self.on_outcome(node, outcome)

    def _apply(self, sim_node: SimNode, outputs: list[Output]) -> None:
        replica = self.replicas.get(sim_node.node)
        if sim_node.node in self.services:  # its own view is no view of the group's
            super()._apply(sim_node, [o for o in outputs if not isinstance(o, InstallView)])
            return
        if replica is None:
            super()._apply(sim_node, outputs)
            return
        # One output at a time, so a snapshot sees exactly the operations before it.
        for out in outputs:
            if sim_node.stopped:
                return
            match out:
                case InstallState(state):
                    replica.load(state)
                    sim_node.app_state = state
                case TakeSnapshot():
                    sim_node.app_state = replica.state()
                    super()._apply(sim_node, [out])
                case _:
                    super()._apply(sim_node, [out])
            if isinstance(out, InstallView) and sim_node.stopped:
                return


@dataclass(slots=True)
class ReplicaRun:
    objects: dict[NodeId, Any]  # every copy still running at the end
    states: dict[NodeId, bytes]
    outcomes: dict[NodeId, list[Outcome]]
    violations: list[Violation]
    issued: int
    end_us: int
    departed: tuple[NodeId, ...] = ()
    protocol_packets: int = 0
    latencies_us: list[int] = field(default_factory=list)  # issue → executed at origin

    @property
    def converged(self) -> bool:
        return len(set(self.states.values())) <= 1


def simulate_replicas(
    factory: Callable[[], object], pick: CallPicker, *, ordering: str, nodes: int,
    operations: int, seed: int, faults: str = "", options: OrderingOptions | None = None,
    link: LinkModel = DEFAULT_LINK, writers: tuple[NodeId, ...] | None = None,
    links: dict[tuple[NodeId, NodeId], LinkModel] | None = None,
    max_time_us: int = 3_600_000_000, settle_us: int = 3_000_000,
    core: Callable[[NodeId], Core] | None = None, invoke: Invoker | None = None,
    services: Callable[[Callable[[NodeId, View], Stack]], list[Stack]] | None = None,
    crash: tuple[tuple[NodeId, int], ...] = (),
) -> ReplicaRun:
    """Run `operations` writes from `writers` (default: every initial node) through
    replicas of `factory()` — or, with `core` and `invoke`, through each node's own
    application (a `Directory` of named objects) and the operations `invoke` makes;
    `services` starts nodes outside the group (a ticket server; `crash` stops nodes at
    given times); see the module rules."""
    spec = get_ordering(ordering)
    plan = parse_faults(faults)
    spec.refuse_faults(plan.kinds())
    ids = tuple(f"n{i}" for i in range(1, nodes + 1))
    active = writers or ids
    if not set(active) <= set(ids):
        raise ConfigError(f"writers {active} are not all among {ids}")
    rng = random.Random(seed)
    network = Network(rng, LinkModel(*plan.delay_us) if plan.delay_us else link,
                      plan.drop, plan.dup)
    for (a, b), model in (links or {}).items():
        network.set_link(a, b, model)
    scheduler = Scheduler()
    recorder = TraceRecorder(f"replicated-{ordering}-n{nodes}-s{seed}")
    cluster = ReplicaCluster(scheduler, network, recorder, factory, core)
    opts = options or OrderingOptions()
    issued = 0
    issued_at: dict[tuple[NodeId, int], int] = {}
    latencies: list[int] = []
    last_activity = 0

    def make(node: NodeId, view: View) -> Stack:
        return build_stack(node, "g", ordering, view, opts)

    def issue(node: NodeId) -> None:
        nonlocal issued, last_activity
        sim_node = cluster.nodes[node]
        if issued >= operations or sim_node.stopped or sim_node.leaving:
            return
        if invoke is not None:
            payload = invoke(rng, node, cluster.replicas[node])
        else:
            method, args = pick(rng, node)
            payload = cluster.replicas[node].invocation(method, args)
        issued += 1
        last_activity = scheduler.now
        # noted first: an issuer's own write (the sequencer's) may execute inside
        # cluster.broadcast, before it returns the seq
        issued_at[(node, sim_node.stack.broadcasts + 1)] = scheduler.now
        cluster.broadcast(node, payload)

    def on_outcome(node: NodeId, outcome: Outcome) -> None:
        nonlocal last_activity
        last_activity = scheduler.now
        start = issued_at.pop((node, outcome.seq), None)
        if start is not None:
            latencies.append(scheduler.now - start)
        scheduler.at(scheduler.now, partial(issue, node))

    cluster.on_outcome = on_outcome
    view = View(1, ids)
    for node in ids:
        cluster.add_replica(make(node, view))
    for stack in services(make) if services is not None else ():
        cluster.add_service(stack)
    for node, at_us in crash:
        scheduler.at(at_us, partial(cluster.stop, node))
    for node in active:
        scheduler.at(0, partial(issue, node))
    for leave in plan.leaves:
        scheduler.at(leave.at_us, partial(cluster.leave, leave.node))
    def do_join(node: NodeId) -> None:
        contacts = tuple(cluster.alive())
        cluster.add_replica(make(node, View(0, (node,))), contacts)

    for join in plan.joins:
        scheduler.at(join.at_us, partial(do_join, join.node))
    for part in plan.partitions:
        scheduler.at(part.start_us, partial(network.partition, part.left, part.right,
                                            part.one_way))
        scheduler.at(part.end_us, partial(network.heal, part.left, part.right, part.one_way))
    for hold in plan.holds:
        for src, dst in hold.links():
            scheduler.at(hold.start_us, partial(network.hold, src, dst))
            scheduler.at(hold.end_us, partial(cluster.release, src, dst))

    def settle() -> None:
        # done once every write went out, none of a running node still waits for its
        # outcome, and nothing happened for settle_us
        waiting = any(not cluster.nodes[node].stopped for node, _seq in issued_at)
        if issued >= operations and not waiting and scheduler.now - last_activity >= settle_us:
            scheduler.stop()
        else:
            scheduler.after(settle_us // 4, settle)

    if spec.needs_detector or spec.periodic or services is not None:
        scheduler.at(settle_us, settle)
    scheduler.run(max_time_us)
    running = {n: s for n, s in cluster.nodes.items()
               if not s.stopped and n not in cluster.services}
    return ReplicaRun(
        objects={n: getattr(cluster.replicas[n], "obj", cluster.replicas[n]) for n in running},
        states={n: cluster.replicas[n].state() for n in running},
        outcomes=cluster.outcomes,
        violations=check_events(recorder.rows(), spec.guarantees, recorder.run_id),
        issued=issued, end_us=scheduler.now,
        departed=tuple(n for n, s in cluster.nodes.items() if s.departed),
        protocol_packets=cluster.protocol_packets, latencies_us=latencies,
    )
