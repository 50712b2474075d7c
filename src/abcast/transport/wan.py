"""WAN emulation: delay every outgoing frame by its link's one-way latency, with jitter.

Rules: this kernel has no netem, so wide-area links are emulated above the transport.
A latency matrix (JSON or CSV, RTTs in ms between named sites, nodes mapped to sites)
is loaded once; `WanTransport(inner, matrix, seed)` wraps any transport and holds each
frame for RTT/2 ± jitter of its (sender site, receiver site) link before handing it to
the inner transport. Per-link FIFO is kept: a frame never leaves before the frame sent
before it on the same link (its due time is at least the previous one's), so jitter
delays but never reorders. Delays are drawn from one `random.Random` seeded by
(seed, node), so a run's delays are reproducible. `link_latency_us` turns the same
matrix into the (lo, hi) microsecond ranges the simulator's network model uses.
The delay line's frames count in `buffered()` (accepted, not yet handed to the wire:
`rpc.Client.flush` and a graceful leave wait for them, and the contract's "every frame
is out, discarded or buffered" holds), but `drain` does not wait for them: the line
holds what the link has in flight (rate × latency), not what the receiver is slow to
take, so after `drain` only the inner transport is at its high-water mark (the one
conformance check it skips; it passes the others, tests/transport/
test_transport_conformance.py). Nodes are
mapped to sites by the matrix's "nodes" table, else by their number: n1 → sites[0],
n2 → sites[1], … (wrapping around).
"""

from __future__ import annotations

import asyncio
import csv
import io
import json
import random
import re
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from abcast.errors import ConfigError, LocalProtocolError
from abcast.ids import NodeId
from abcast.transport.base import FrameHandler, Transport
from abcast.transport.wrapper import WrappingTransport

_NODE_NUMBER = re.compile(r"(\d+)$")
EXAMPLE_MATRIX = Path(__file__).with_name("wan_matrices") / "five_sites.json"


@dataclass(frozen=True, slots=True)
class LatencyMatrix:
    """Round-trip times (ms) between sites, a uniform jitter (± ms on each one-way
    delay) and an optional explicit node → site table."""

    sites: tuple[str, ...]
    rtt_ms: tuple[tuple[float, ...], ...]
    jitter_ms: float = 0.0
    nodes: tuple[tuple[NodeId, str], ...] = ()

    def __post_init__(self) -> None:
        n = len(self.sites)
        if n == 0 or len(set(self.sites)) != n:
            raise ConfigError(f"latency matrix needs distinct site names, got {self.sites}")
        if len(self.rtt_ms) != n or any(len(row) != n for row in self.rtt_ms):
            raise ConfigError(f"latency matrix must be {n}×{n} for sites {self.sites}")
        for i, row in enumerate(self.rtt_ms):
            for j, rtt in enumerate(row):
                if not rtt >= 0:  # also rejects NaN
                    raise ConfigError(f"RTT {self.sites[i]}→{self.sites[j]} is {rtt}; need >= 0")
                if abs(rtt - self.rtt_ms[j][i]) > 1e-9:
                    raise ConfigError(
                        f"RTT {self.sites[i]}↔{self.sites[j]} is not symmetric: "
                        f"{rtt} vs {self.rtt_ms[j][i]}"
                    )
        if not self.jitter_ms >= 0:
            raise ConfigError(f"jitter_ms must be >= 0, got {self.jitter_ms}")
        for node, site in self.nodes:
            if site not in self.sites:
                raise ConfigError(f"node {node!r} is mapped to unknown site {site!r}")

    def index(self, site: str) -> int:
        try:
            return self.sites.index(site)
        except ValueError:
            raise ConfigError(f"unknown site {site!r}; sites: {', '.join(self.sites)}") from None

    def rtt(self, a_site: str, b_site: str) -> float:
        return self.rtt_ms[self.index(a_site)][self.index(b_site)]

    def one_way_range_ms(self, a_site: str, b_site: str) -> tuple[float, float]:
        half = self.rtt(a_site, b_site) / 2
        return max(0.0, half - self.jitter_ms), half + self.jitter_ms

    def site_of(self, node: NodeId) -> str:
        for name, site in self.nodes:
            if name == node:
                return site
        match = _NODE_NUMBER.search(node)
        if match is None or int(match.group(1)) < 1:
            raise ConfigError(
                f"node {node!r} has no site: add it to the matrix's \"nodes\" table "
                "or give it a number (n1 → first site)"
            )
        return self.sites[(int(match.group(1)) - 1) % len(self.sites)]


def link_latency_us(matrix: LatencyMatrix, a_site: str, b_site: str) -> tuple[int, int]:
    """The one-way latency range of a link in integer µs, for the simulator."""
    lo, hi = matrix.one_way_range_ms(a_site, b_site)
    return round(lo * 1000), round(hi * 1000)


def node_links_us(
    matrix: LatencyMatrix, nodes: Sequence[NodeId]
) -> list[tuple[NodeId, NodeId, int, int]]:
    """Every directed link between `nodes` with its one-way latency range in µs (for the
    simulator's per-link models: `SimConfig(links=...)`)."""
    sites = {n: matrix.site_of(n) for n in nodes}
    return [(a, b, *link_latency_us(matrix, sites[a], sites[b]))
            for a in nodes for b in nodes if a != b]


def matrix_from_json(text: str) -> LatencyMatrix:
    """{"sites": [...], "rtt_ms": [[...], ...], "jitter_ms": 1.0, "nodes": {"n1": "site"}}"""
    try:
        raw: Any = json.loads(text)
        sites = tuple(str(s) for s in raw["sites"])
        rtt = tuple(tuple(float(v) for v in row) for row in raw["rtt_ms"])
        jitter = float(raw.get("jitter_ms", 0.0))
        nodes = tuple((str(k), str(v)) for k, v in dict(raw.get("nodes", {})).items())
    except (ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ConfigError(f"bad latency matrix JSON: {type(exc).__name__}: {exc}") from None
    return LatencyMatrix(sites, rtt, jitter, nodes)


def matrix_from_csv(text: str) -> LatencyMatrix:
    """A header `site,A,B,...`, one row per site `A,rtt,rtt,...`, optional rows
    `jitter_ms,<ms>` and `node,<node>,<site>`; lines starting with # are ignored."""
    lines = [ln for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    rows = [[cell.strip() for cell in row] for row in csv.reader(io.StringIO("\n".join(lines)))]
    if not rows or len(rows[0]) < 2:
        raise ConfigError("latency matrix CSV needs a header row: site,A,B,...")
    sites = tuple(rows[0][1:])
    rtt: list[tuple[float, ...]] = []
    jitter = 0.0
    nodes: list[tuple[str, str]] = []
    try:
        for row in rows[1:]:
            if row[0] == "jitter_ms":
                jitter = float(row[1])
            elif row[0] == "node":
                nodes.append((row[1], row[2]))
            else:
                if row[0] != sites[len(rtt)]:
                    raise ConfigError(
                        f"latency matrix CSV: row {row[0]!r} should be {sites[len(rtt)]!r}"
                    )
                rtt.append(tuple(float(v) for v in row[1:]))
    except (ValueError, IndexError) as exc:
        raise ConfigError(f"bad latency matrix CSV: {type(exc).__name__}: {exc}") from None
    return LatencyMatrix(sites, tuple(rtt), jitter, tuple(nodes))


def load_matrix(path: str | Path) -> LatencyMatrix:
    """Read a .json or .csv latency matrix file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read latency matrix {path}: {exc}") from None
    if path.suffix.lower() == ".csv":
        return matrix_from_csv(text)
    return matrix_from_json(text)


class DelayLine:
    """Pure due-time arithmetic for one sending node (no clock, no I/O: time comes in).

    `due(dst, now)` = now + one-way delay drawn for the link, but never earlier than the
    previous frame's due time on the same link (FIFO per link).
    """

    __slots__ = ("_last", "_matrix", "_rng", "_site", "_site_of")

    def __init__(
        self,
        matrix: LatencyMatrix,
        node: NodeId,
        seed: int,
        site_of: Mapping[NodeId, str] | None = None,
    ) -> None:
        self._matrix = matrix
        self._site_of = dict(site_of or {})
        self._site = self.site(node)
        self._rng = random.Random(f"wan/{seed}/{node}")
        self._last: dict[NodeId, float] = {}

    def site(self, node: NodeId) -> str:
        site = self._site_of.get(node)
        if site is not None:
            self._matrix.index(site)
            return site
        return self._matrix.site_of(node)

    def delay_s(self, dst: NodeId) -> float:
        lo, hi = self._matrix.one_way_range_ms(self._site, self.site(dst))
        return self._rng.uniform(lo, hi) / 1000.0

    def due(self, dst: NodeId, now: float) -> float:
        due = max(now + self.delay_s(dst), self._last.get(dst, now))
        self._last[dst] = due
        return due

    def forget(self, dst: NodeId) -> None:
        self._last.pop(dst, None)


class WanTransport(WrappingTransport):
    """Wraps a transport; every outgoing frame waits its link's WAN delay first."""

    scheme: ClassVar[str] = "wan"

    def __init__(
        self,
        inner: Transport,
        matrix: LatencyMatrix,
        seed: int = 0,
        *,
        site_of: Mapping[NodeId, str] | None = None,
    ) -> None:
        super().__init__(inner)
        self.matrix = matrix
        self._seed = seed
        self._site_of = dict(site_of or {})
        self._line: DelayLine | None = None
        self._queues: dict[NodeId, deque[tuple[float, bytes]]] = {}
        self._held_bytes: dict[NodeId, int] = {}  # the bytes in each peer's queue
        self._timers: dict[NodeId, asyncio.TimerHandle] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._closed = False

    @classmethod
    def from_file(cls, inner: Transport, path: str | Path, seed: int = 0) -> WanTransport:
        """`--wan FILE`: wrap `inner` with the matrix in FILE (.json or .csv)."""
        return cls(inner, load_matrix(path), seed)

    async def start(self, node: NodeId, on_frame: FrameHandler) -> str:
        self._line = DelayLine(self.matrix, node, self._seed, self._site_of)
        self._loop = asyncio.get_running_loop()
        return await self.inner.start(node, on_frame)

    def add_peer(self, node: NodeId, address: str) -> None:
        if self._line is None or self._closed:
            raise LocalProtocolError("add_peer on a WAN transport that is not running")
        self._line.site(node)  # fail now, not on the first send, if it has no site
        self.inner.add_peer(node, address)

    def remove_peer(self, node: NodeId) -> None:
        timer = self._timers.pop(node, None)
        if timer is not None:
            timer.cancel()
        held = self._queues.pop(node, None)
        self._held_bytes.pop(node, None)
        if held:
            self.stats.discarded_frames += len(held)
        if self._line is not None:
            self._line.forget(node)
        self.inner.remove_peer(node)

    def send(self, node: NodeId, data: bytes) -> None:
        if self._line is None or self._loop is None or self._closed:
            raise LocalProtocolError(f"send to {node!r} on a WAN transport that is not running")
        if node not in self.inner.peers:
            raise LocalProtocolError(f"send to unknown peer {node!r}: call add_peer first")
        max_frame = self.inner.max_frame_bytes
        if max_frame is not None and len(data) > max_frame:
            raise LocalProtocolError(
                f"frame of {len(data)} bytes exceeds max_frame_bytes {max_frame}"
            )
        due = self._line.due(node, self._loop.time())
        queue = self._queues.setdefault(node, deque())
        queue.append((due, bytes(data)))
        self._held_bytes[node] = self._held_bytes.get(node, 0) + len(data)
        if node not in self._timers:
            self._timers[node] = self._loop.call_at(due, self._release, node)

    def _release(self, node: NodeId) -> None:
        self._timers.pop(node, None)
        queue = self._queues.get(node)
        if not queue or self._loop is None or self._closed:
            return
        now = self._loop.time()
        while queue and queue[0][0] <= now:
            data = queue.popleft()[1]
            self._held_bytes[node] -= len(data)
            self.inner.send(node, data)
        if queue:
            self._timers[node] = self._loop.call_at(queue[0][0], self._release, node)

    def held(self, node: NodeId | None = None) -> int:
        """Frames waiting in the delay line (for one peer, or all)."""
        if node is not None:
            return len(self._queues.get(node, ()))
        return sum(len(q) for q in self._queues.values())

    def buffered(self, node: NodeId | None = None) -> int:
        """The inner transport's bytes for `node` plus the delay line's (or the largest
        such sum over all peers)."""
        if node is not None:
            return self.inner.buffered(node) + self._held_bytes.get(node, 0)
        return max([self.inner.buffered(), *(self.inner.buffered(peer) + held
                                              for peer, held in self._held_bytes.items())])

    async def close(self) -> None:
        if self._closed:
            await self.inner.close()  # returns once the close under way is over
            return
        self._closed = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        self.stats.discarded_frames += sum(len(q) for q in self._queues.values())
        self._queues.clear()
        self._held_bytes.clear()
        await self.inner.close()
