"""A local cluster run's configuration and result: what `abcast cluster` asks for and
what it reports.

Rules: `ClusterConfig.validate` refuses, with ConfigError, every argument combination
that cannot run (so the CLI exits 2 before starting anything). `ClusterResult` turns the
nodes' reports and, when traced, the run's rows into the summary `abcast sim` prints plus
throughput and latency: latency is a delivery's t_ns minus the t_ns of its origin's
`send` row, over all deliveries (untraced runs use the send time the origin stamps into
the payload instead), and throughput is M over the span from the earliest "go" to the
last delivery. The launcher (abcast.evaluation.launcher) runs the processes; this module
knows nothing about processes or sockets.
"""

from __future__ import annotations

import importlib.util
import math
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

from abcast.checks import Violation, count_by_code
from abcast.errors import ConfigError
from abcast.evaluation.worker import WorkerOutcome, workload_name
from abcast.ordering.registry import OrderingOptions, get_ordering
from abcast.trace.rows import EventRow, RunInfo, options_label
from abcast.transport import known_schemes, transport_from_url
from abcast.transport.udp import pick_group

EVENT_LOOPS: Final = ("asyncio", "uvloop")


def installed_event_loops() -> tuple[str, ...]:
    """The event loops node processes can run on here."""
    has_uvloop = importlib.util.find_spec("uvloop") is not None
    return EVENT_LOOPS if has_uvloop else ("asyncio",)


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    nodes: int
    ordering: str
    transport: str  # a scheme: tcp, zmq, grpc, pyro, mem
    messages: int
    out: Path
    payload: int = 64
    rate: float | None = None  # broadcasts per second over the whole group; None: closed
    serial: bool = False  # closed loop with one message in flight (see WorkerConfig)
    # the node processes' event loop ("asyncio" or "uvloop"); None: uvloop when installed
    event_loop: str | None = None
    #: the node transports' busy-poll window in µs (TransportOptions.busy_poll_us); 0 off
    busy_poll_us: int = 0
    trace: bool = True
    wan: str | None = None
    options: OrderingOptions = field(default_factory=OrderingOptions)
    group: str = "g"
    timeout_s: float = 600.0
    registry: str | None = None  # use this running registry instead of starting one
    #: udp: the multicast group every node joins (a fresh one per config, on loopback)
    udp_group: str = field(default_factory=pick_group)
    #: more transport options for every node's URL ("loss=0.05&datagram_bytes=1400")
    transport_options: str = ""
    metrics: bool = False  # every node serves /metrics (on a port of its own choosing)
    #: run the floor (abcast.evaluation.floor) instead of abcast: the same workload,
    #: measurement and start-up, a do-nothing sequencer in place of the group
    floor: bool = False

    @property
    def in_process(self) -> bool:
        """mem:// hubs are per process, so a mem cluster runs as tasks of one process."""
        return self.transport == "mem"

    def bind_url(self) -> str:
        if self.in_process:
            return "mem://"
        params = [f"busy_poll_us={self.busy_poll_us}"] if self.busy_poll_us else []
        address = "127.0.0.1:0"
        if self.transport == "udp":
            address = self.udp_group
            params.append("ttl=0")  # loopback only
        if self.transport_options:
            params.append(self.transport_options)
        query = f"?{'&'.join(params)}" if params else ""
        return f"{self.transport}://{address}{query}"

    @property
    def workload(self) -> str:
        return workload_name(self.rate, self.serial)

    def validate(self) -> None:
        if self.nodes < 1:
            raise ConfigError("--nodes must be at least 1")
        if self.messages < 0:
            raise ConfigError("--messages must be >= 0")
        if self.payload < 0:
            raise ConfigError("--payload must be >= 0")
        if self.rate is not None and not (self.rate > 0 and math.isfinite(self.rate)):
            raise ConfigError("--rate must be a positive number of broadcasts per second")
        if self.serial and self.rate is not None:
            raise ConfigError("--serial is a closed loop: it takes no --rate")
        if self.event_loop is not None:
            if self.event_loop not in EVENT_LOOPS:
                raise ConfigError(f"unknown event loop {self.event_loop!r}; choose one of: "
                                  f"{', '.join(EVENT_LOOPS)}")
            if self.event_loop not in installed_event_loops():
                raise ConfigError("--loop uvloop needs uvloop (pip install uvloop)")
            if self.in_process:
                raise ConfigError("--loop chooses the node processes' loop; a mem cluster "
                                  "runs in this process, on its loop")
        if self.busy_poll_us and self.in_process:
            raise ConfigError("--busy-poll keeps node processes polling their sockets; a mem "
                              "cluster has neither")
        if self.timeout_s <= 0:
            raise ConfigError("--timeout must be positive")
        if self.floor and (self.transport != "tcp" or self.trace or self.wan is not None
                           or self.busy_poll_us or self.metrics):
            raise ConfigError("the floor runs on tcp, untraced, without --wan, busy polling "
                              "or metrics")
        get_ordering(self.ordering).check_options(self.options)  # before any node starts
        if self.transport not in known_schemes():
            raise ConfigError(f"unknown transport {self.transport!r}; choose one of: "
                              f"{', '.join(known_schemes())}")
        transport_from_url(self.bind_url())  # a missing optional package fails here
        if self.wan is not None:
            if not Path(self.wan).is_file():
                raise ConfigError(f"--wan file {self.wan} does not exist")
            from abcast.transport.wan import load_matrix

            load_matrix(Path(self.wan))  # a malformed matrix fails here, not in every node

    def new_run_id(self) -> str:
        # A real run is not reproducible, so its id is unique rather than derived.
        name = "floor" if self.floor else self.ordering
        return (f"{name}-{self.transport}-n{self.nodes}-m{self.messages}-"
                f"{secrets.token_hex(4)}")


def percentile(sorted_values: Sequence[int], q: float) -> int | None:
    """Nearest-rank percentile of ascending values (None when there are none)."""
    if not sorted_values:
        return None
    rank = max(1, math.ceil(q / 100 * len(sorted_values)))
    return sorted_values[min(rank, len(sorted_values)) - 1]


def latencies_from_rows(rows: Iterable[EventRow]) -> list[int]:
    """deliver t_ns − the origin's send t_ns, for every delivery whose send row exists."""
    rows = list(rows)
    sent = {(r.group, r.origin, r.seq): r.t_ns for r in rows if r.kind == "send"}
    out: list[int] = []
    for r in rows:
        if r.kind == "deliver":
            t = sent.get((r.group, r.origin, r.seq))
            if t is not None:
                out.append(r.t_ns - t)
    return out


@dataclass(slots=True)
class ClusterResult:
    config: ClusterConfig
    run_id: str
    guarantees: tuple[str, ...]
    outcomes: list[WorkerOutcome]
    violations: list[Violation]
    latencies_ns: list[int]
    errors: list[str] = field(default_factory=list)

    @property
    def traced(self) -> bool:
        return self.config.trace

    @property
    def complete(self) -> bool:
        return (not self.errors and len(self.outcomes) == self.config.nodes
                and all(o.complete for o in self.outcomes))

    @property
    def clean(self) -> bool:
        return self.complete and not self.violations

    @property
    def delivered(self) -> int:
        return sum(o.delivered for o in self.outcomes)

    @property
    def broadcasts(self) -> int:
        return sum(o.broadcasts for o in self.outcomes)

    @property
    def started_ns(self) -> int:
        return min((o.go_ns for o in self.outcomes if o.go_ns), default=0)

    @property
    def duration_ns(self) -> int:
        end = max((o.last_deliver_ns for o in self.outcomes), default=0)
        return max(0, end - self.started_ns) if self.started_ns else 0

    def run_info(self) -> RunInfo:
        cfg = self.config
        return RunInfo(
            run_id=self.run_id, ordering=cfg.ordering, transport=cfg.transport,
            nodes=cfg.nodes, payload_bytes=cfg.payload, workload=cfg.workload, seed=None,
            faults=f"wan={Path(cfg.wan).name}" if cfg.wan else None,
            guarantees=self.guarantees, started_ns=self.started_ns,
            duration_ns=self.duration_ns, options=options_label(cfg.options),
        )

    def summary(self) -> dict[str, object]:
        cfg = self.config
        lat = sorted(self.latencies_ns)
        p50, p99 = percentile(lat, 50), percentile(lat, 99)
        seconds = self.duration_ns / 1e9
        protocol = sum(o.protocol_packets for o in self.outcomes)
        return {
            "run_id": self.run_id, "ordering": cfg.ordering, "transport": cfg.transport,
            "nodes": cfg.nodes, "messages": cfg.messages, "delivered": self.delivered,
            "violations": count_by_code(self.violations),
            "packets_per_broadcast": round(protocol / self.broadcasts, 4)
            if self.broadcasts else 0.0,
            "retransmissions": sum(o.retransmissions for o in self.outcomes),
            "wall_ms": round(self.duration_ns / 1e6, 3),
            "quiescent": self.complete,
            "throughput_msgs_per_s": round(cfg.messages / seconds, 1) if seconds > 0 else None,
            "latency_p50_us": None if p50 is None else round(p50 / 1e3, 1),
            "latency_p99_us": None if p99 is None else round(p99 / 1e3, 1),
            # connections dropped for bad input (framing errors and frames the runtime
            # refused), and of those frames the ones the runtime refused
            "bad_frames": sum(o.transport_bad_frames for o in self.outcomes),
            "refused_frames": sum(o.bad_frames for o in self.outcomes),
            "traced": self.traced,
            "errors": list(self.errors),
        }


def merge_stamped_latencies(outcomes: Iterable[WorkerOutcome]) -> list[int]:
    return [lat for o in outcomes for lat in o.latencies_ns]
