"""The transport contract: what every transport does, and nothing about how.

Rules (the contract the runtime codes against):

- One transport per node carries every group of that node. It moves opaque frames
  (bytes from `abcast.codec.encode_frame`) between nodes named by `NodeId`; it never
  decodes them. Transports are chosen by URL (`tcp://host:port`, `zmq://host:port`,
  `grpc://host:port`, `pyro://host:port`, `mem://name`, `udp://host:port`); port 0 (or
  an empty `mem://` name) means "pick a free one", and `start()` returns the URL actually
  bound: that is the address to advertise and to pass to the peers' `add_peer`.
- Lifecycle: `start` once, then `add_peer`/`send`/`drain`/`remove_peer` any number of
  times, then `close` once. A transport is not restartable: a restarted node makes a new
  transport (possibly on the same URL). `send`/`add_peer` before `start` or after
  `close` raise `LocalProtocolError` (so does `send` to a node never added);
  `remove_peer` of an unknown node is a no-op;
  `drain` after `close` returns at once. `close` may be called again, at any time: a
  `close` while `start` or another `close` is under way returns once that is over (a
  `start` overtaken by `close` shuts down what it bound and raises LocalProtocolError).
- Everything runs on the event loop that called `start`. `on_frame(link, frame)` is
  called on that loop, never from inside `send`, and never after `close` has begun.
- Delivery is per link (sender → receiver): frames arrive in the order they were sent,
  each at most once. A frame may be lost only when the connection carrying it breaks
  (peer crash or restart, `Link.drop`, `add_peer` called again, a network failure); the
  frames still queued at that moment are kept and go out on the next connection. So a
  receiver sees a subsequence of what was sent, in order, with gaps only at connection
  breaks. Reliability above (acks, retransmission) closes the gaps.
- `send` never blocks and never drops: it queues. `drain()` is the backpressure point:
  it returns once every peer's buffered bytes (queued + handed to the wire but not yet
  accepted by it) are at or below `high_water_bytes`. A peer that is down keeps its
  queue, so `drain` waits for it; the runtime removes a peer it has given up on
  (`remove_peer` discards that queue and counts the frames in `stats.discarded_frames`).
  Frames longer than `max_frame_bytes` are refused by `send` (LocalProtocolError).
- `cork()` … `uncork()` brackets frames that belong together (the packets one protocol
  step emits): a transport may hold them until `uncork` and write each peer's share at
  once (tcp:// does; the others ignore it). Calls nest; per-link order is unchanged.
  `send_run(frames)` is the same for one step's frames in one call (the runtime's
  path for a step's packets): per link the frames arrive as their sends would.
- `add_peer(node, address)` may be called at any time. Calling it again for a known
  node means "this peer may have (re)started at this address": the transport opens a
  fresh connection at once, resetting the reconnect backoff. Do not call it for no
  reason: the switch may lose frames already on the old connection.
- A `Link` is one inbound connection. `link.peer` is the node that the sender named in
  its hello (None where the transport cannot know). The runtime calls
  `link.drop(reason)` when that connection delivered bytes it cannot accept: the
  transport logs one line on its module's logger ("abcast.transport.tcp", …), counts
  `bad_frames` and `dropped_connections`, closes that connection and delivers nothing
  more from it; the sender reconnects and the node keeps serving everyone else. If `on_frame` raises
  `RemoteProtocolError` (DecodeError included) the transport does that drop itself;
  any other exception is logged with its traceback and the frame is discarded.
- One live inbound connection per sending node: a newer connection from the same node
  (a reconnect, or a restarted node) retires the older one, so reconnects never
  reorder a link.
- Members share one frame bound (`max_frame_bytes`): a transport whose connections
  open with a hello says its bound there, and a receiver with another bound refuses the
  connection before any frame is delivered (one WARNING line per peer naming both
  nodes and both values, `refused_links`; the sender backs off as after any failure).
  A hello naming the receiving node itself (two nodes with one id) is refused the same
  way. udp:// has no hello: there each datagram's frame size is checked alone, and a
  datagram naming this node with another incarnation is bad input.
- Stats are live counters on the transport's loop; `stats.snapshot()` copies them.
  Nothing is dropped silently: every frame `send` accepted is, eventually, in
  `frames_out` (handed to the wire), in `discarded_frames` (remove_peer/close), or
  still in `buffered()`.
- `transport_from_url(url, options)` builds an unstarted transport for a URL; unknown
  schemes, malformed URLs and bad options are ConfigErrors that say what is wrong, and
  `register_scheme` adds schemes.

Security (abcast.security; docs/operations.md): `TransportOptions.secret` makes tcp://
and tcps:// authenticate every link (a handshake) and seal every frame, zmq:// encrypt
every batch and udp:// every datagram; a transport that cannot honour a secret refuses
it (ConfigError). `tls=1` (tcps://, grpc://) is TLS with the `tls_*` files.

`multicast(nodes, frame)` is `send` to each, except where one write reaches them all
(udp:// with a multicast group; udp.py says how its datagram semantics differ).

What this module does not know: sockets, threads, asyncio internals of any transport,
and frame contents. Concrete transports live one per module beside it (shared
machinery in _common.py); wan.py wraps any of them with emulated WAN latency.
abcast.testing.transport_conformance turns these rules into checks any transport can
run (`check_transport`; docs/transports.md, "Writing your own transport").
"""

from __future__ import annotations

import dataclasses
import importlib
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Final, Literal
from urllib.parse import parse_qsl, urlsplit

from abcast.errors import ConfigError
from abcast.ids import NodeId
from abcast.security.sealing import Mode

MiB: Final = 1024 * 1024
#: the longest busy-poll window (TransportOptions.busy_poll_us)
MAX_BUSY_POLL_US: Final = 10_000
#: How each known scheme spells its address: "host" (scheme://host:port) or "name"
#: (scheme://name). `registry.register_scheme` adds to it.
URL_FORMS: Final[dict[str, Literal["host", "name"]]] = {
    "tcp": "host",
    "tcps": "host",
    "zmq": "host",
    "grpc": "host",
    "pyro": "host",
    "mem": "name",
    "udp": "host",
}


class Link:
    """One inbound connection, as the frame handler sees it.

    `peer` is the node the sender claimed in its hello (None if unknown); `remote` is a
    printable description of the other end (an ip:port, a zmq identity, a mem name).
    """

    __slots__ = ("_alive", "_on_drop", "peer", "refused", "remote")

    def __init__(
        self, peer: NodeId | None, remote: str, on_drop: Callable[[Link, str], None]
    ) -> None:
        self.peer = peer
        self.remote = remote
        self._on_drop = on_drop
        self._alive = True
        #: dropped by `refuse`: its hello was turned away, it sent no bad input
        self.refused = False

    @property
    def alive(self) -> bool:
        """False once the connection was dropped, superseded or closed."""
        return self._alive

    def drop(self, reason: str) -> None:
        """This connection sent something unacceptable: log, count, close it.

        Idempotent; frames already received from it but not yet handed over are discarded.
        """
        if not self._alive:
            return
        self._alive = False
        self._on_drop(self, reason)

    def refuse(self, reason: str) -> None:
        """Transport-internal: the hello said the peer is configured differently (its
        frame bound, or this node's own id): close the connection as `drop` does,
        counted in `refused_links` and logged once per peer and reason instead of as
        bad input."""
        if self._alive:
            self.refused = True
            self.drop(reason)

    def retire(self) -> None:
        """Transport-internal: the connection ended without blame (closed, superseded)."""
        self._alive = False

    def __repr__(self) -> str:
        return f"Link(peer={self.peer!r}, remote={self.remote!r}, alive={self._alive})"


FrameHandler = Callable[[Link, bytes], None]


@dataclass(slots=True)
class TransportStats:
    """Live counters of one transport (mutated on its loop; copy with `snapshot`).

    bytes_* count frame bytes only (no length prefixes, hellos or RPC overhead).
    """

    frames_out: int = 0  # frames handed to the wire (written / sent / called)
    bytes_out: int = 0
    frames_in: int = 0  # frames handed to on_frame
    bytes_in: int = 0
    bad_frames: int = 0  # inbound connections dropped for bad input (framing or Link.drop)
    rejected_frames: int = 0  # frames dropped: their MAC, tag or counter failed (secret)
    dropped_connections: int = 0  # inbound connections this node dropped (refused included)
    refused_links: int = 0  # of those: refused for their hello (another bound, our own id)
    lost_connections: int = 0  # outbound connections that ended without being asked to
    reconnects: int = 0  # outbound connections opened after an earlier one to that peer
    discarded_frames: int = 0  # queued frames thrown away by remove_peer / close
    idle_closed: int = 0  # inbound connections closed after idle_timeout_s without a byte

    def snapshot(self) -> TransportStats:
        return dataclasses.replace(self)


@dataclass(frozen=True, slots=True)
class TransportOptions:
    """Tunables shared by every transport (a URL query string may set any of them)."""

    max_frame_bytes: int = 16 * MiB
    high_water_bytes: int = 4 * MiB
    batch_bytes: int = 256 * 1024  # message transports coalesce up to this much per message
    reconnect_initial_s: float = 0.05
    reconnect_max_s: float = 2.0
    io_timeout_s: float = 10.0  # connect timeout, and the longest a blocking RPC may take
    #: an inbound stream connection that sends nothing for this long is closed (members
    #: heartbeat every 50 ms; a sender reconnects when it has something to say), and one
    #: that stays inside a frame for io_timeout_s to 2 × io_timeout_s (a slowloris, a
    #: truncated frame) too: tcp:// (docs/operations.md, "Limits")
    idle_timeout_s: float = 120.0
    #: After reading or writing, keep the event loop polling for this long (µs) instead
    #: of letting it sleep, yielding the CPU to any other runnable task meanwhile: a frame
    #: that comes in then is read at once, not after the idle CPU has woken up (tens of
    #: µs per hop on a VM). Costs up to this much CPU after each burst of activity; 0 off.
    #: At most 10 ms: heartbeats (every 50 ms by default) would otherwise keep an idle
    #: group polling for ever.
    busy_poll_us: int = 0
    #: The group secret (abcast.security): every link opens with a mutual
    #: challenge–response and every frame after it carries a MAC and a counter. Never
    #: from a URL (a query string would put it on command lines and in logs).
    secret: bytes | None = dataclasses.field(default=None, repr=False)
    #: With a secret: encrypt frames too (AES-256-GCM under the link key) instead of
    #: only authenticating them (zmq:// always encrypts with a secret).
    aead: int = 0
    #: TLS (tcp://, grpc://): on when 1 (tcps:// sets it); the PEM files of this node's
    #: certificate and key, and of the CA that signed the peers' (mutual TLS when the
    #: listener has a CA and the dialler a certificate).
    tls: int = 0
    tls_cert: str = ""
    tls_key: str = ""
    tls_ca: str = ""

    def __post_init__(self) -> None:
        if not 1 <= self.max_frame_bytes <= 2**31:
            raise ConfigError(f"max_frame_bytes must be in 1..2**31, got {self.max_frame_bytes}")
        if self.high_water_bytes < 1:
            raise ConfigError(f"high_water_bytes must be >= 1, got {self.high_water_bytes}")
        if self.batch_bytes < 1:
            raise ConfigError(f"batch_bytes must be >= 1, got {self.batch_bytes}")
        if not 0 < self.reconnect_initial_s <= self.reconnect_max_s:
            raise ConfigError(
                "need 0 < reconnect_initial_s <= reconnect_max_s, got "
                f"{self.reconnect_initial_s} and {self.reconnect_max_s}"
            )
        if self.io_timeout_s <= 0:
            raise ConfigError(f"io_timeout_s must be > 0, got {self.io_timeout_s}")
        if self.idle_timeout_s <= 0:
            raise ConfigError(f"idle_timeout_s must be > 0, got {self.idle_timeout_s}")
        if not 0 <= self.busy_poll_us <= MAX_BUSY_POLL_US:
            raise ConfigError(
                f"busy_poll_us must be in 0..{MAX_BUSY_POLL_US}, got {self.busy_poll_us}")
        if self.secret is not None:
            from abcast.security import load_secret

            object.__setattr__(self, "secret", load_secret(self.secret))
        if self.aead not in (0, 1) or self.tls not in (0, 1):
            raise ConfigError(f"aead and tls are 0 or 1, got {self.aead} and {self.tls}")
        if bool(self.tls_cert) != bool(self.tls_key):
            raise ConfigError("tls_cert and tls_key go together")

    @property
    def link_mode(self) -> Mode:
        """How frames are protected after the handshake (with a secret)."""
        return "aead" if self.aead else "mac"

    def with_query(self, query: str) -> TransportOptions:
        """These options overridden by `key=value` pairs of a URL query string."""
        if not query:
            return self
        fields = {f.name: f.type for f in dataclasses.fields(self)}
        changes: dict[str, int | float | str] = {}
        for key, raw in parse_qsl(query, keep_blank_values=True, strict_parsing=False):
            if key == "secret":
                raise ConfigError("a secret never goes in a URL: use ABCAST_SECRET, "
                                  "--secret-file or secret=")
            if key not in fields:
                raise ConfigError(
                    f"unknown transport option {key!r}; known: "
                    f"{', '.join(sorted(k for k in fields if k != 'secret'))}"
                )
            if fields[key] == "str":
                changes[key] = raw
                continue
            try:
                changes[key] = int(raw) if fields[key] == "int" else float(raw)
            except ValueError:
                raise ConfigError(f"transport option {key}={raw!r} is not a number") from None
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class TransportUrl:
    """A parsed transport URL: `host`/`port` for network schemes, `name` for mem."""

    scheme: str
    host: str = ""
    port: int = 0
    name: str = ""
    query: str = ""

    def __str__(self) -> str:
        if URL_FORMS.get(self.scheme) == "name":
            return f"{self.scheme}://{self.name}"
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{self.scheme}://{host}:{self.port}"


def parse_url(url: str, *, expect_scheme: str | None = None) -> TransportUrl:
    """Parse and validate a transport URL; ConfigError says what is wrong with it."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(f"transport address {url!r} is not a URL like tcp://127.0.0.1:0")
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if expect_scheme is not None and scheme != expect_scheme:
        raise ConfigError(
            f"address {url!r} has scheme {scheme!r}; this transport speaks {expect_scheme}://"
        )
    if parts.path not in ("", "/") or parts.fragment:
        raise ConfigError(f"transport address {url!r} must not have a path or fragment")
    form = URL_FORMS.get(scheme)
    if form == "name":
        name = parts.netloc
        if len(name) > 128 or any(c in name for c in "/?#@ "):
            raise ConfigError(
                f"bad {scheme}:// name {name!r} (at most 128 chars, no /?#@ or space)"
            )
        return TransportUrl(scheme, name=name, query=parts.query)
    if form == "host":
        try:
            port = parts.port
        except ValueError:
            raise ConfigError(f"transport address {url!r} has a bad port") from None
        host = parts.hostname or ""
        if not host or port is None:
            raise ConfigError(f"transport address {url!r} needs host:port (port 0 = any free one)")
        return TransportUrl(scheme, host=host, port=port, query=parts.query)
    raise ConfigError(
        f"unknown transport scheme {scheme!r} in {url!r}; "
        f"known: {', '.join(sorted(URL_FORMS))}"
    )


class Transport(ABC):
    """Carries opaque frames between nodes; one instance per node. See the rules above."""

    scheme: ClassVar[str]

    #: live counters; see TransportStats
    stats: TransportStats

    @abstractmethod
    async def start(self, node: NodeId, on_frame: FrameHandler) -> str:
        """Bind/listen as `node`; returns the bound URL (the address to advertise)."""

    @abstractmethod
    def add_peer(self, node: NodeId, address: str) -> None:
        """Where to reach `node`; calling it again means "reconnect, maybe elsewhere"."""

    @abstractmethod
    def remove_peer(self, node: NodeId) -> None:
        """Forget `node`: close its connection and discard (and count) its queued frames."""

    @abstractmethod
    def send(self, node: NodeId, data: bytes) -> None:
        """Queue one frame for `node` (a known peer). Never blocks; never drops."""

    def multicast(self, nodes: tuple[NodeId, ...] | list[NodeId], data: bytes) -> int:
        """Queue one frame for each of `nodes` (known peers); returns the packets that
        costs on the wire. Here: one `send` each; a transport that can reach them all
        with one write (udp:// with a group) does so."""
        for node in nodes:
            self.send(node, data)
        return len(nodes)

    def send_run(self, frames: Sequence[tuple[NodeId, bytes]]) -> None:
        """One step's frames, in order, each to a known peer: what `cork`, a `send` each
        and `uncork` do, in one call (each peer's share of the run leaves in one write).
        A transport may do it more cheaply; the frames on the wire must be the same."""
        self.cork()
        try:
            for node, data in frames:
                self.send(node, data)
        finally:
            self.uncork()

    def cork(self) -> None:  # noqa: B027 (a hook: most transports need not act)
        """Frames sent from now until the matching `uncork` are one batch: hold them, so
        that each peer's share leaves in one write when it ends (a sequencer's data and
        order frames to a member, one wake-up for it). Calls nest. Here: nothing is held
        (a transport that writes per loop turn anyway need not)."""

    def uncork(self) -> None:  # noqa: B027
        """End the batch `cork` began: what it held goes out now, under the transport's
        usual rule for a write (the outermost `uncork` of nested ones)."""

    @abstractmethod
    def buffered(self, node: NodeId | None = None) -> int:
        """Bytes not yet accepted by the wire for `node` (or the largest over all peers)."""

    @abstractmethod
    async def drain(self, node: NodeId | None = None) -> None:
        """Wait until `node`'s (or every peer's) buffered bytes are <= high_water_bytes."""

    @abstractmethod
    async def close(self) -> None:
        """Stop listening, close every connection, discard queued frames. Idempotent."""

    @property
    @abstractmethod
    def node(self) -> NodeId:
        """The node this transport was started as (LocalProtocolError before start)."""

    @property
    @abstractmethod
    def address(self) -> str:
        """The bound URL returned by start (LocalProtocolError before start)."""

    @property
    @abstractmethod
    def peers(self) -> tuple[NodeId, ...]:
        """The nodes currently added as peers."""

    @property
    def max_frame_bytes(self) -> int | None:
        """The longest frame `send` takes (TransportOptions.max_frame_bytes); None: this
        transport sets no bound. The runtime's channels split larger packets to fit."""
        return None

    @property
    def datagram_frame_bytes(self) -> int | None:
        """The longest frame sent as one datagram (a longer one leaves in several and is
        lost whole with any of them); None: not a datagram transport. The NAK channel
        cuts its fragments to fit it (OrderingOptions.within_frames)."""
        return None


# ------------------------------------------------------------------ schemes → transports
# The built-in schemes are imported lazily, so `import abcast.transport` works without the
# optional packages (pyzmq, grpcio, Pyro5); asking for a scheme whose package is missing
# raises ConfigError naming the package.

TransportFactory = Callable[[str, TransportOptions | None], Transport]

# scheme -> (module, class, the pip package that module needs)
_BUILTIN: Final = {
    "tcp": ("abcast.transport.tcp", "TcpTransport", None),
    "tcps": ("abcast.transport.tcp", "TlsTransport", None),
    "mem": ("abcast.transport.memory", "MemoryTransport", None),
    "udp": ("abcast.transport.udp", "UdpTransport", None),
    "zmq": ("abcast.transport.zmq_transport", "ZmqTransport", "pyzmq"),
    "grpc": ("abcast.transport.grpc_transport", "GrpcTransport", "grpcio"),
    "pyro": ("abcast.transport.pyro_transport", "PyroTransport", "Pyro5"),
}
_registered: dict[str, TransportFactory] = {}


def register_scheme(
    scheme: str, factory: TransportFactory, *, form: Literal["host", "name"] = "host"
) -> None:
    """Make `scheme://...` URLs build transports with `factory(url, options)`."""
    scheme = scheme.lower()
    if not scheme.isascii() or not scheme.isalnum():
        raise ConfigError(f"transport scheme must be alphanumeric, got {scheme!r}")
    _registered[scheme] = factory
    URL_FORMS[scheme] = form


def known_schemes() -> tuple[str, ...]:
    return tuple(sorted(set(_BUILTIN) | set(_registered)))


def _builtin_factory(scheme: str) -> TransportFactory:
    module_name, class_name, package = _BUILTIN[scheme]
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        hint = f" (pip install {package}, or abcast[transports])" if package else ""
        raise ConfigError(f"{scheme}:// transport unavailable: {exc}{hint}") from exc
    factory: TransportFactory = getattr(module, class_name)
    return factory


def transport_from_url(url: str, options: TransportOptions | None = None) -> Transport:
    """A new, unstarted transport for `url`; ConfigError for unknown schemes or bad URLs.

    A query string sets options: `tcp://127.0.0.1:0?high_water_bytes=1048576`.
    """
    parsed = parse_url(url)
    factory = _registered.get(parsed.scheme)
    if factory is None:
        factory = _builtin_factory(parsed.scheme)
    return factory(url, options)
