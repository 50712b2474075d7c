"""The experiment grid of `abcast bench`: which runs to make, in what order, with what knobs.

Rules: pure data, no processes, no clock. A `GridSpec` holds the knobs (the quick and the
full one are `quick_spec()` and `full_spec()`); `build_grid` turns it into `Experiment`s
grouped by `Phase`:

- TABLE: the thesis's Tables 4–6, closed-loop round-robin, every ordering × middleware ×
  n, 100-byte payloads, traced (the latency is read from the checked trace);
- SIZES: the message-size sweep (closed loop, traced), on every middleware of
  `sweep_middlewares`;
- BASELINE: closed loop at the peers' payload and n, untraced (the p50 latency compared
  with the peers);
- LONE: one message in flight (the serial workload: message k leaves once its sender
  delivered k−1) at the peers' payload and n, untraced, on each installed event loop —
  the latency of a lone message; orderings with a relay mode are run in it too, and
  every run again with the node transports busy-polling (`lone_busy_poll_us`);
- LOAD: open loop at rising offered rates per ordering, middleware and n, untraced
  (production settings: throughput);
- FLOOR: the floor (abcast.evaluation.floor, a do-nothing sequencer) through the same
  workload and start-up: a lone message on each event loop, and the load curve's rates
  (and `floor_rates` above them) at each n of the load curves on tcp — run between LONE
  and LOAD, so every saturation and lone figure has the floor of the same minutes beside
  it;
- PAIRED: the two ratios issue 23 sets targets on, each taken from the sequencer's run
  and the floor's back to back, in `paired_rounds` alternating rounds (floor first in
  even rounds, abcast first in odd) — so each round's ratio comes from runs seconds
  apart, and its median over the rounds is not one run's luck on a VM whose speed
  drifts by 2× within minutes: first the lone message at default settings on uvloop
  when installed (the p50 ratio), then the saturation run (open loop at `paired_rate`,
  far above either's saturation, as many messages as a load-curve run at that rate,
  the default loop: the settings the load curve's saturation row is measured with);
- VERIFY: built later by `verification_run`, once the load curve's knee is known — the
  same offered rate again with tracing on, so Spark checks what the untraced run did;
- SCALE: the full bench only (`scale_nodes` is empty elsewhere): per ordering of
  `scale_orderings` and n of `scale_nodes` (the first n is the model's anchor), a lone
  message (serial, untraced) and a saturation run (open loop offered far above what the
  group can order, untraced: the delivered rate is its saturation), on tcp at the
  peers' payload; the simulated half of the section (`sim_orderings` at `sim_nodes`)
  is abcast.evaluation.sim_scale's, listed by `sim_tasks`;
- peers: `PeerExperiment`s (PySyncObj and Redis Streams) with the same payload and n.

What this module does not know: how a run is launched, measured or checked.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from enum import StrEnum
from pathlib import Path
from typing import Final

from abcast.errors import ConfigError
from abcast.evaluation.cluster import EVENT_LOOPS, ClusterConfig, installed_event_loops
from abcast.evaluation.sim_scale import SIM_MESSAGES, SIM_NODES, SimTask
from abcast.ordering.registry import ORDERINGS as REGISTERED_ORDERINGS
from abcast.ordering.registry import OrderingOptions, get_ordering
from abcast.transport.base import MAX_BUSY_POLL_US

ORDERINGS: Final = ("sequencer", "skeen", "chandra-toueg")
MIDDLEWARES: Final = ("tcp", "zmq", "grpc", "pyro")
TABLE_NODES: Final = (2, 4, 6)
TABLE_PAYLOAD: Final = 100
PEERS: Final = ("pysyncobj-default", "pysyncobj-tuned", "redis")
#: PySyncObj with default timers commits about one round-robin round per 100-ms append
#: period (~15 messages/s closed loop): its closed-loop run is kept this short
SLOW_PEER_CLOSED_MESSAGES: Final = 150


class Phase(StrEnum):
    TABLE = "table"
    SIZES = "sizes"
    BASELINE = "baseline"
    LONE = "lone"
    FLOOR = "floor"
    LOAD = "load"
    PAIRED = "paired"
    VERIFY = "verify"
    SCALE = "scale"


@dataclass(frozen=True, slots=True)
class Experiment:
    """One cluster run of abcast."""

    phase: Phase
    ordering: str
    transport: str
    nodes: int
    payload: int
    messages: int
    rate: float | None = None  # broadcasts/s over the whole group; None: closed loop
    trace: bool = True
    serial: bool = False  # closed loop with one message in flight
    event_loop: str | None = None  # of the node processes; None: uvloop when installed
    relay: bool = False  # sequencer family: the origin sends to the sequencer only
    busy_poll_us: int = 0  # the node transports' busy-poll window; 0: they sleep when idle
    floor: bool = False  # the floor (abcast.evaluation.floor) instead of abcast
    round: int = 0  # Phase.PAIRED: which of the alternating rounds (of lone or saturation runs)

    @property
    def variant(self) -> str:
        """The ordering as the report names it: with "relay" when it relays; "floor"."""
        if self.floor:
            return "floor"
        return f"{self.ordering} relay" if self.relay else self.ordering

    @property
    def open_loop_load(self) -> bool:
        """A run of a load curve (abcast's or the floor's) or a saturation run (SCALE's,
        PAIRED's): past saturation it may fall over, which is a finding, not a failure."""
        return self.phase in (Phase.LOAD, Phase.FLOOR, Phase.SCALE, Phase.PAIRED) \
            and self.rate is not None

    @property
    def curve_point(self) -> bool:
        """An open-loop run the runner may leave out once its curve is past the knee
        (abcast.evaluation.runner.SATURATED_AFTER). Not a PAIRED saturation run: it is
        meant to be past saturation, and a round needs both of its runs."""
        return self.open_loop_load and self.phase is not Phase.PAIRED

    @property
    def closed_loop(self) -> bool:
        return self.rate is None

    @property
    def load(self) -> str:
        """The workload in a few characters: serial, closed or the offered rate."""
        if self.serial:
            return "serial"
        return "closed" if self.rate is None else f"{self.rate:,.0f}/s"

    @property
    def setting(self) -> str:
        """The workload with the node processes' loop and busy polling, where chosen."""
        loop = "" if self.event_loop is None else f", {self.event_loop}"
        poll = f", busy-poll {self.busy_poll_us} µs" if self.busy_poll_us else ""
        paired = f", round {self.round + 1}" if self.phase is Phase.PAIRED else ""
        return f"{self.load}{loop}{poll}{paired}"

    def label(self) -> str:
        trace = "" if self.trace else ", untraced"
        return (f"{self.phase} {self.variant}/{self.transport} n={self.nodes} "
                f"{self.payload} B {self.setting}{trace}")

    def cluster_config(self, out: Path, timeout_s: float, *, registry: str | None = None,
                       group: str = "g") -> ClusterConfig:
        """With a shared `registry`, every run needs a `group` name of its own."""
        return ClusterConfig(
            nodes=self.nodes, ordering=self.ordering, transport=self.transport,
            messages=self.messages, out=out, payload=self.payload, rate=self.rate,
            serial=self.serial, event_loop=self.event_loop, busy_poll_us=self.busy_poll_us,
            options=OrderingOptions(relay=self.relay),
            trace=self.trace, timeout_s=timeout_s, registry=registry, group=group,
            floor=self.floor)


@dataclass(frozen=True, slots=True)
class PeerExperiment:
    """One run of a peer system (3 processes for PySyncObj, N readers for Redis)."""

    peer: str  # one of PEERS
    nodes: int
    payload: int
    messages: int
    rate: float | None = None  # None: closed-loop round-robin

    def label(self) -> str:
        load = "closed" if self.rate is None else f"{self.rate:,.0f}/s"
        return f"peer {self.peer} n={self.nodes} {self.payload} B {load}"


@dataclass(frozen=True, slots=True)
class GridSpec:
    orderings: tuple[str, ...] = ORDERINGS
    middlewares: tuple[str, ...] = MIDDLEWARES
    table_nodes: tuple[int, ...] = TABLE_NODES
    table_messages: int = 600
    sizes: tuple[int, ...] = (10, 100, 1024, 4096, 16384, 65536)
    size_orderings: tuple[str, ...] = ORDERINGS
    size_nodes: int = 3
    size_messages: int = 300
    sweep_transport: str = "tcp"  # of the baseline and the lone message
    #: the middlewares of the size sweep and the load curves (the thesis's evaluation,
    #: completed; None: the tables' `middlewares`); load curves at every `load_nodes` on
    #: `sweep_transport`, at `compare_nodes` on the others
    sweep_middlewares: tuple[str, ...] | None = None
    compare_nodes: int = 3  # n of the baseline, the peers and the tracing check
    compare_payload: int = 64
    baseline_messages: int = 3000
    lone_loops: tuple[str, ...] = EVENT_LOOPS  # those not installed are left out
    lone_messages: int = 3000
    lone_relay: bool = True  # also run the orderings that can relay in relay mode
    #: busy-poll windows (µs) each lone run is made with; 0: the default, sleeping loops
    lone_busy_poll_us: tuple[int, ...] = (0, 200)
    load_orderings: tuple[str, ...] = ORDERINGS
    load_nodes: tuple[int, ...] = (3, 4, 6)
    # The first rate is low enough that mostly one message is in flight (the LONE runs
    # measure a lone message without rate timers); the last is above any saturation.
    load_rates: tuple[float, ...] = (1000, 10_000, 30_000, 100_000, 200_000, 400_000,
                                     800_000)
    load_seconds: float = 1.5  # offered-load duration of one open-loop run
    load_min_messages: int = 1500
    load_max_messages: int = 450_000
    # The traced twin of a load run offers the same rate but at most this many messages:
    # a trace row costs more than a delivery, so a traced node at the knee falls behind,
    # and hundreds of thousands of rows add minutes to the run and to Spark for nothing.
    verify_max_messages: int = 60_000
    #: run the floor (Phase.FLOOR); its load curve offers `load_rates` and these above
    #: them (the floor saturates far beyond abcast), at most `floor_max_messages` a run
    floor: bool = True
    floor_rates: tuple[float, ...] = (3_000_000, 10_000_000)
    floor_max_messages: int = 1_000_000
    #: rounds of the sequencer's lone message beside the floor's, back to back, and as
    #: many of its saturation run beside the floor's (PAIRED); 0: none
    paired_rounds: int = 3
    #: the PAIRED saturation runs' offered rate: far above the floor's saturation as well
    #: as abcast's (past it the pacer holds the backlog, so a higher rate changes little)
    paired_rate: float = 3_000_000.0
    peers: tuple[str, ...] = PEERS
    peer_messages: int = 3000
    peer_rate: float = 100_000.0  # offered far above any peer's capacity: its saturation
    peer_load_messages: int = 40_000
    #: the scale section (off unless set, as `full_spec` does): real-process groups of
    #: these orderings at these n (the first: the model's anchor), tcp
    scale_orderings: tuple[str, ...] = ()
    scale_nodes: tuple[int, ...] = ()
    scale_rate: float = 1_000_000.0  # offered far above any group's saturation here
    scale_messages: int = 30_000  # of a saturation run
    scale_lone_messages: int = 500
    #: a run of 16 processes takes most of a minute just to start on a loaded 2-core
    #: machine (imports), all of it inside the run's timeout
    scale_timeout_s: float = 240.0
    #: the simulated half: every one of these orderings at `sim_nodes`, one seeded run
    #: each (abcast.evaluation.sim_scale), `sim_jobs` at a time; empty: none
    sim_orderings: tuple[str, ...] = ()
    sim_nodes: int = SIM_NODES
    sim_messages: int = SIM_MESSAGES
    sim_seed: int = 1
    sim_jobs: int = 1
    ping_rounds: int = 400
    #: frame sizes pinged per middleware (the thesis's Table 3 / Figure 34); the tables'
    #: payload (T_msg of the model) is always among them
    ping_sizes: tuple[int, ...] = (5, TABLE_PAYLOAD, 1024, 16384, 65536)
    timeout_s: float = 120.0
    # An open-loop run past saturation that has not finished by then is stuck (a node
    # suspected and removed), not slow: it would otherwise hold the bench for timeout_s.
    load_timeout_s: float = 45.0

    def validate(self) -> None:
        for name in (*self.orderings, *self.size_orderings, *self.load_orderings,
                     *self.scale_orderings, *self.sim_orderings):
            get_ordering(name)
        unknown = [p for p in self.peers if p not in PEERS]
        if unknown:
            raise ConfigError(f"unknown peers {unknown}; choose from {', '.join(PEERS)}")
        if any(n < 2 for n in (*self.table_nodes, *self.load_nodes, self.size_nodes,
                               self.compare_nodes, *self.scale_nodes)):
            raise ConfigError("every group in the grid needs at least 2 nodes")
        if any(r <= 0 or not math.isfinite(r) for r in (*self.load_rates, *self.floor_rates)):
            raise ConfigError("offered rates must be positive")
        if list(self.load_rates) != sorted(self.load_rates):
            raise ConfigError("offered rates must rise")
        if list(self.scale_nodes) != sorted(set(self.scale_nodes)):
            raise ConfigError("scale_nodes must rise (the first is the model's anchor)")
        if not (self.scale_rate > 0 and math.isfinite(self.scale_rate)):
            raise ConfigError("scale_rate must be positive")
        if not (self.paired_rate > 0 and math.isfinite(self.paired_rate)):
            raise ConfigError("paired_rate must be positive")
        if self.sim_orderings and (self.sim_nodes < 2 or self.sim_messages < 1
                                   or self.sim_jobs < 1):
            raise ConfigError("simulated scale runs need >= 2 nodes, >= 1 message, "
                              ">= 1 job")
        unknown_loops = [loop for loop in self.lone_loops if loop not in EVENT_LOOPS]
        if unknown_loops:
            raise ConfigError(f"unknown event loops {unknown_loops}; choose from "
                              f"{', '.join(EVENT_LOOPS)}")
        if any(not 0 <= us <= MAX_BUSY_POLL_US for us in self.lone_busy_poll_us):
            raise ConfigError(f"busy-poll windows must be in 0..{MAX_BUSY_POLL_US} µs")
        if self.paired_rounds < 0:
            raise ConfigError("paired_rounds must be 0 or more")
        if min(self.timeout_s, self.load_timeout_s, self.scale_timeout_s) <= 0:
            raise ConfigError("timeouts must be positive")

    def timeout_of(self, exp: Experiment) -> float:
        if exp.phase is Phase.SCALE:
            return self.scale_timeout_s
        return self.load_timeout_s if exp.open_loop_load else self.timeout_s

    def sim_tasks(self) -> list[SimTask]:
        """The scale section's simulated runs, one per ordering of `sim_orderings`."""
        return [SimTask(o, self.sim_nodes, self.sim_messages, self.sim_seed)
                for o in self.sim_orderings]

    def load_messages(self, rate: float, most: int | None = None) -> int:
        """Enough messages to offer `rate` for `load_seconds`, within the bounds (`most`:
        another upper one)."""
        wanted = math.ceil(rate * self.load_seconds)
        top = self.load_max_messages if most is None else most
        return max(self.load_min_messages, min(top, wanted))


def quick_spec() -> GridSpec:
    """A reduced grid that fits in about three minutes on a 2-core machine."""
    return GridSpec(
        table_nodes=(2, 4), table_messages=100,
        sizes=(10, 1024, 65536), size_orderings=("sequencer",), size_messages=100,
        baseline_messages=600, lone_messages=1000,
        load_orderings=("sequencer",), load_nodes=(3,),
        load_rates=(1000, 30_000, 300_000, 1_000_000),
        load_seconds=0.5, load_min_messages=600, load_max_messages=200_000,
        sweep_middlewares=("tcp",),
        peers=("pysyncobj-tuned", "redis"), peer_messages=600, peer_load_messages=10_000,
        ping_rounds=200, ping_sizes=(5, TABLE_PAYLOAD), timeout_s=60.0,
        load_timeout_s=20.0, floor_max_messages=500_000,
    )


def full_spec() -> GridSpec:
    """The whole grid, with the scale section: the sequencer and chandra-toueg as real
    processes at n = 3 (the model's anchor), 8, 12 and 16, and every ordering simulated
    at 64 nodes."""
    return GridSpec(scale_orderings=("sequencer", "chandra-toueg"),
                    scale_nodes=(3, 8, 12, 16), sim_orderings=tuple(REGISTERED_ORDERINGS))


def scale_only(spec: GridSpec) -> GridSpec:
    """`spec`'s scale section alone, with the tcp ping its latency model needs
    (`abcast bench --scale-only`)."""
    return replace(spec, orderings=(), middlewares=("tcp",), table_nodes=(), sizes=(),
                   size_orderings=(), load_orderings=(), peers=(), ping_sizes=(),
                   floor=False)


@dataclass(frozen=True, slots=True)
class Grid:
    spec: GridSpec
    experiments: tuple[Experiment, ...]
    peers: tuple[PeerExperiment, ...]

    def of(self, phase: Phase) -> tuple[Experiment, ...]:
        return tuple(e for e in self.experiments if e.phase is phase)


def build_grid(spec: GridSpec) -> Grid:
    """Every run of the bench except the verification runs, in the order they run."""
    spec.validate()
    runs: list[Experiment] = []
    for ordering in spec.orderings:
        for middleware in spec.middlewares:
            for n in spec.table_nodes:
                runs.append(Experiment(Phase.TABLE, ordering, middleware, n, TABLE_PAYLOAD,
                                       spec.table_messages))
    sweep = spec.middlewares if spec.sweep_middlewares is None else spec.sweep_middlewares
    for ordering in spec.size_orderings:
        for middleware in sweep:
            for size in spec.sizes:
                runs.append(Experiment(Phase.SIZES, ordering, middleware,
                                       spec.size_nodes, size, spec.size_messages))
    for ordering in spec.load_orderings:
        runs.append(Experiment(Phase.BASELINE, ordering, spec.sweep_transport, spec.compare_nodes,
                               spec.compare_payload, spec.baseline_messages, trace=False))
    # a mem:// cluster runs in this process, on its loop, without sockets: one run, not
    # one per loop and busy-poll window
    in_process = spec.sweep_transport == "mem"
    loops: list[str | None] = [None] if in_process else [
        loop for loop in spec.lone_loops if loop in installed_event_loops()]
    polls = [0] if in_process else list(spec.lone_busy_poll_us)
    for ordering in spec.load_orderings:
        relays = [False, True] if spec.lone_relay and get_ordering(ordering).supports_relay \
            else [False]
        for relay in relays:
            for poll in polls:
                for loop in loops:
                    runs.append(Experiment(Phase.LONE, ordering, spec.sweep_transport,
                                           spec.compare_nodes, spec.compare_payload,
                                           spec.lone_messages, trace=False, serial=True,
                                           event_loop=loop, relay=relay, busy_poll_us=poll))
    runs += floor_runs(spec, loops)
    runs += paired_runs(spec, loops)
    for ordering in spec.load_orderings:
        for middleware in dict.fromkeys((spec.sweep_transport, *sweep)):
            sizes = spec.load_nodes if middleware == spec.sweep_transport else (
                spec.compare_nodes,)
            for n in sizes:
                for rate in spec.load_rates:
                    runs.append(Experiment(Phase.LOAD, ordering, middleware, n,
                                           spec.compare_payload, spec.load_messages(rate),
                                           rate=rate, trace=False))
    runs += scale_runs(spec)  # after the verification runs, which come in between
    peers: list[PeerExperiment] = []
    for peer in spec.peers:
        closed = (min(spec.peer_messages, SLOW_PEER_CLOSED_MESSAGES)
                  if peer == "pysyncobj-default" else spec.peer_messages)
        peers.append(PeerExperiment(peer, spec.compare_nodes, spec.compare_payload, closed))
        peers.append(PeerExperiment(peer, spec.compare_nodes, spec.compare_payload,
                                    spec.peer_load_messages, rate=spec.peer_rate))
    return Grid(spec, tuple(runs), tuple(peers))


def floor_runs(spec: GridSpec, loops: list[str | None]) -> list[Experiment]:
    """The floor's runs (Phase.FLOOR): beside the lone message and the load curves on tcp,
    the only transport it has."""
    if not spec.floor or spec.sweep_transport != "tcp" or not spec.load_orderings:
        return []
    runs = [Experiment(Phase.FLOOR, "sequencer", "tcp", spec.compare_nodes,
                       spec.compare_payload, spec.lone_messages, trace=False, serial=True,
                       event_loop=loop, floor=True) for loop in loops]
    rates = sorted({*spec.load_rates, *spec.floor_rates})
    for n in spec.load_nodes:
        runs += [Experiment(Phase.FLOOR, "sequencer", "tcp", n, spec.compare_payload,
                            spec.load_messages(rate, spec.floor_max_messages), rate=rate,
                            trace=False, floor=True) for rate in rates]
    return runs


def paired_runs(spec: GridSpec, loops: list[str | None]) -> list[Experiment]:
    """The PAIRED rounds, each the floor's run and the sequencer's back to back,
    alternating which goes first: the default lone message on uvloop when installed
    (the loop of issue 23's target), else the first of `loops`; then the saturation
    run, as the load curve's top run is made but offered `paired_rate`."""
    if (not spec.floor or spec.sweep_transport != "tcp" or not loops
            or "sequencer" not in spec.load_orderings):
        return []
    loop = "uvloop" if "uvloop" in loops else loops[0]
    lone = Experiment(Phase.PAIRED, "sequencer", "tcp", spec.compare_nodes,
                      spec.compare_payload, spec.lone_messages, trace=False, serial=True,
                      event_loop=loop)
    saturation = Experiment(Phase.PAIRED, "sequencer", "tcp", spec.compare_nodes,
                            spec.compare_payload, spec.load_messages(spec.paired_rate),
                            rate=spec.paired_rate, trace=False)
    runs = []
    for run in (lone, saturation):
        for round_ in range(spec.paired_rounds):
            pair = [replace(run, floor=floor, round=round_) for floor in (True, False)]
            runs += pair if round_ % 2 == 0 else pair[::-1]
    return runs


def scale_runs(spec: GridSpec) -> list[Experiment]:
    """The scale section's real-process runs (Phase.SCALE), per ordering and n: a lone
    message, then the saturation run."""
    runs = []
    for ordering in spec.scale_orderings:
        for n in spec.scale_nodes:
            runs.append(Experiment(Phase.SCALE, ordering, "tcp", n, spec.compare_payload,
                                   spec.scale_lone_messages, trace=False, serial=True))
            runs.append(Experiment(Phase.SCALE, ordering, "tcp", n, spec.compare_payload,
                                   spec.scale_messages, rate=spec.scale_rate, trace=False))
    return runs


def verification_run(load_run: Experiment, spec: GridSpec) -> Experiment:
    """The traced twin of an untraced open-loop run: same offered rate, same messages."""
    if load_run.phase is not Phase.LOAD:
        raise ConfigError(f"only open-loop load runs are verified, not {load_run.label()}")
    return replace(load_run, phase=Phase.VERIFY, trace=True,
                   messages=min(load_run.messages, spec.verify_max_messages))
