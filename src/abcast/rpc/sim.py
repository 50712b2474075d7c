"""Requests and replies in the simulator: servers on simulated group members, clients
outside the group, one seeded run.

Rules: `simulate_rpc` runs `servers` members of a group (any ordering) whose application
is a hash-chained log executed through the same `Executor` the runtime server uses, and
`clients` closed-loop clients, each with the same `Ballot` the runtime client uses. A
client's frames to a server and a server's replies travel over the simulated network's
latency, outside the group's stacks (a client is no member); a crashed server neither
receives nor answers. A request enters the order as the runtime's does: Case A
("direct") sent to every live server, the leader proposing it, the others holding it
(proposed by a server that becomes leader, checked every `notice_us`); Case B ("via-member") sent to
one contact, round robin, retried through the next one after `retry_us`. Servers tell
clients their view on replies and, every `notice_us`, when it changed. Optional faults:
`crash` = {server: at_us}; `diverge` = a server that answers with a different value
(its state stays right: the divergence is in the reply only). Everything random comes
from one `random.Random(seed)`; the run returns each live server's log, the requests it
executed (duplicates would show) and every client outcome.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from abcast.checks import Violation, check_events
from abcast.effects import Deliver, Stage
from abcast.ids import NodeId, View
from abcast.ordering.registry import OrderingOptions, build_stack, get_ordering
from abcast.rpc.executor import Action, Executor
from abcast.rpc.voting import Ballot, Outcome, Reply, Status, Vote
from abcast.rpc.wire import Request, is_request, ordered_request, read_ordered_request
from abcast.sim.cluster import SimCluster
from abcast.sim.network import DEFAULT_LINK, LinkModel, Network
from abcast.sim.scheduler import Scheduler
from abcast.trace.recorder import TraceRecorder

Key = tuple[NodeId, int]


@dataclass(slots=True)
class SimServer:
    node: NodeId
    executor: Executor = field(default_factory=Executor)
    digest: str = ""
    executed: list[Key] = field(default_factory=list)
    diverge: bool = False
    led: bool = False


@dataclass(slots=True)
class _Call:
    request: Request
    ballot: Ballot
    started_us: int
    contact: NodeId | None = None


@dataclass(slots=True)
class RpcRun:
    digests: dict[NodeId, str]  # every live server's log
    executed: dict[NodeId, list[Key]]
    outcomes: list[tuple[NodeId, Outcome, int]]  # client, outcome, latency µs
    violations: list[Violation]
    end_us: int

    @property
    def statuses(self) -> dict[Status, int]:
        counts: dict[Status, int] = {}
        for _, outcome, _ in self.outcomes:
            counts[outcome.status] = counts.get(outcome.status, 0) + 1
        return counts


def simulate_rpc(
    *, ordering: str, seed: int, servers: int = 3, clients: int = 2, requests: int = 20,
    vote: str = "majority", consistency: str = "majority_same", path: str = "mixed",
    crash: dict[NodeId, int] | None = None, diverge: NodeId | None = None,
    timeout_us: int = 8_000_000, retry_us: int = 400_000, notice_us: int = 20_000,
    link: LinkModel = DEFAULT_LINK, options: OrderingOptions | None = None,
    max_time_us: int = 600_000_000, settle_us: int = 2_000_000,
    executor: Callable[[], Executor] = Executor,
) -> RpcRun:
    """`requests` calls per client (path "direct", "via-member" or "mixed": alternate)."""
    rng = random.Random(seed)
    scheduler = Scheduler()
    recorder = TraceRecorder(f"rpc-{ordering}-s{seed}")
    ids = tuple(f"n{i}" for i in range(1, servers + 1))
    state = {n: SimServer(n, executor(), diverge=n == diverge) for n in ids}
    calls: dict[Key, _Call] = {}
    outcomes: list[tuple[NodeId, Outcome, int]] = []
    known_view: dict[NodeId, tuple[int, tuple[NodeId, ...]]] = {}
    spec_vote = Vote.parse(vote)
    cluster: SimCluster

    def latency() -> int:
        return rng.randint(link.lo_us, link.hi_us)

    def alive(node: NodeId) -> bool:
        return not cluster.nodes[node].stopped

    def later(fn: Callable[[], None]) -> None:
        scheduler.after(latency(), fn)

    # -- servers ----------------------------------------------------------------------------
    def server_frame(node: NodeId, request: Request) -> None:
        if not alive(node):
            return
        sim_node = cluster.nodes[node]
        leader = bool(sim_node.members) and sim_node.members[0] == node
        action, cached = state[node].executor.on_frame(request, leader=leader)
        if action is Action.PROPOSE:
            cluster.broadcast(node, ordered_request(request))
        elif action is Action.RESEND and cached is not None:
            reply(node, request, cached.value)

    def on_deliver(node: NodeId, delivery: Deliver) -> None:
        if delivery.stage is not Stage.FINAL or not is_request(delivery.payload):
            return  # a tentative delivery (ordering "optimistic") executes nothing
        request = read_ordered_request(delivery.payload)
        srv = state[node]
        if srv.executor.on_ordered(request) is not Action.EXECUTE:
            return
        head = f"{request.client}:{request.rid}:".encode()
        srv.digest = hashlib.sha256(srv.digest.encode() + head + request.payload).hexdigest()
        srv.executed.append((request.client, request.rid))
        value = (srv.digest[:16] + ("!" if srv.diverge else "")).encode()
        srv.executor.replied(request.client, request.rid, True, value)
        reply(node, request, value)

    def reply(node: NodeId, request: Request, value: bytes) -> None:
        sim_node = cluster.nodes[node]
        view = (sim_node.view_id, sim_node.members)
        later(partial(client_reply, request.client, request.rid, node, value, view))

    def notices() -> None:
        for node in ids:
            if alive(node):
                sim_node = cluster.nodes[node]
                view = (sim_node.view_id, sim_node.members)
                srv = state[node]
                leads = bool(sim_node.members) and sim_node.members[0] == node
                if leads and not srv.led:
                    for held in srv.executor.release_held():
                        cluster.broadcast(node, ordered_request(held))
                srv.led = leads
                for client in client_ids:
                    later(partial(client_view, client, view))
        if len(outcomes) < requests * clients:
            scheduler.after(notice_us, notices)

    # -- clients ----------------------------------------------------------------------------
    client_ids = tuple(f"c{i}" for i in range(1, clients + 1))
    issued = dict.fromkeys(client_ids, 0)
    turn = dict.fromkeys(client_ids, 0)

    def members(client: NodeId) -> tuple[NodeId, ...]:
        return known_view.get(client, (1, ids))[1]

    def issue(client: NodeId) -> None:
        if issued[client] >= requests:
            return
        issued[client] += 1
        rid = issued[client]
        way = path if path != "mixed" else ("direct", "via-member")[rid % 2]
        request = Request(client, rid, f"op {client} {rid}".encode(), "sim", (), False, way)
        ballot = Ballot(spec_vote, consistency, frozenset(members(client)))
        call = calls[(client, rid)] = _Call(request, ballot, scheduler.now)
        send(call, retry=False)
        scheduler.after(timeout_us, partial(deadline, client, rid))

    def send(call: _Call, *, retry: bool) -> None:
        client, request = call.request.client, call.request
        view = members(client)
        if request.path == "direct":
            heard = {r.server for r in call.ballot.replies}
            targets = [m for m in view if m not in heard]
        else:
            choices = [m for m in view if not (retry and m == call.contact)] or list(view)
            turn[client] += 1
            call.contact = choices[turn[client] % len(choices)]
            targets = [call.contact]
        for server in targets:
            later(partial(server_frame, server, request))
        scheduler.after(retry_us, partial(maybe_retry, client, request.rid))

    def maybe_retry(client: NodeId, rid: int) -> None:
        call = calls.get((client, rid))
        if call is not None and not call.ballot.decided:
            send(call, retry=True)

    def client_reply(client: NodeId, rid: int, server: NodeId, value: bytes,
                     view: tuple[int, tuple[NodeId, ...]]) -> None:
        client_view(client, view)
        call = calls.get((client, rid))
        if call is not None:
            call.ballot.on_reply(Reply(server, value))
            settle(client, rid)

    def client_view(client: NodeId, view: tuple[int, tuple[NodeId, ...]]) -> None:
        if view[0] <= known_view.get(client, (0, ()))[0]:
            return
        known_view[client] = view
        for (owner, rid), call in list(calls.items()):
            if owner == client:
                call.ballot.on_view(view[1])
                settle(client, rid)

    def deadline(client: NodeId, rid: int) -> None:
        call = calls.get((client, rid))
        if call is not None:
            call.ballot.on_deadline()
            settle(client, rid)

    def settle(client: NodeId, rid: int) -> None:
        call = calls.get((client, rid))
        if call is None or not call.ballot.decided:
            return
        del calls[(client, rid)]
        outcomes.append((client, call.ballot.outcome(), scheduler.now - call.started_us))
        if len(outcomes) == requests * clients:
            scheduler.after(settle_us, scheduler.stop)  # let every server catch up
        scheduler.after(0, partial(issue, client))

    # -- the run ----------------------------------------------------------------------------
    network = Network(rng, link)
    cluster = SimCluster(scheduler, network, recorder, on_deliver=on_deliver)
    view = View(1, ids)
    opts = options or OrderingOptions()
    for node in ids:
        cluster.add(build_stack(node, "svc", ordering, view, opts))
    for node, at in (crash or {}).items():
        scheduler.at(at, partial(cluster.crash, node))
    for client in client_ids:
        scheduler.at(0, partial(issue, client))
    scheduler.at(notice_us, notices)
    scheduler.run(max_time_us)
    live = [n for n in ids if alive(n)]
    return RpcRun(
        digests={n: state[n].digest for n in live},
        executed={n: state[n].executed for n in ids},
        outcomes=outcomes,
        violations=check_events(recorder.rows(), get_ordering(ordering).guarantees,
                                recorder.run_id),
        end_us=scheduler.now,
    )
