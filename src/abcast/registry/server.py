"""The registration server (the thesis's naming service): node ids, group members, leaders.

Rules: one asyncio TCP server, state in memory only. It hands out node ids in the order
registrations arrive (n1, n2, …), maps each group to its members (node id → transport
URL), its declared size and its leader (the lowest member), and answers "wait until the
group has N members" and "wait until N members are done". Entries outlive the connection
that made them: a node whose registry connection drops is still a member (no failure
detection here). A client that comes back to a restarted registry re-registers its id (and
address) and re-joins its groups (see client.py), which is how the state returns.

Dynamic groups (created, joined and left at run time) are not joined member by member:
their leader announces each view (`Announce`: ordering, view id, members → addresses),
which replaces the member table unless it is older than the one held, and re-announces
it now and then, so a restarted registry learns them again. `Remove` forgets a group
and refuses its later announcements (a tombstone, in memory like the rest, kept for
groups it held, the newest max_groups of them); `Locate` answers a node's address (the
one it registered, else the one its first announced view gave: for registered ids
only), `ListGroups` every group.

Secret groups (abcast.security.signing): a request that names a verifier binds its group
(Join, Announce) or its node id (Register) to it, first come first served, and must carry a
proof under it; from then on every request that changes that group (Join, Leave, Done,
Announce, Remove) or claims that id needs a proof under the same verifier, signed over this
connection's nonce (`Challenge`), so a captured proof is useless on another connection; it
covers the request id too, and on one connection the rids of requests with a proof must
rise, so a recorded one sent again on its own connection (a Join after its Leave, a create
after its Remove) is refused. A registry started with a secret binds every group and id to
it from the start, restarts included. A refusal is one log line and a `Refused` reply. Join,
Leave, Done, Announce and a claim carry the id's token, compared in constant time.

Bad input (garbage, an oversize length prefix, a truncated message, an unknown message
type) gets one log line on "abcast.registry.server", that connection is closed and
`stats.bad_messages` goes up; everyone else keeps being served. A request whose serving
raises (a registry bug) is one ERROR line and its connection dropped
(`stats.failed_requests`); what a request stores is checked before it is stored.
Nothing here knows about transports, stacks or the runtime.

Bounds: `RegistryLimits` (limits.py, docs/operations.md "Limits"); what this module
adds to them: a Lookup or WaitDone that cannot be answered yet waits for a change to its
own group only; replies are written through `_send`, which drops a connection with
max_unread_bytes unread, and a connection's next request is read only once its replies
are drained below the transport's high-water mark; a record that would not fit one reply
is refused before it is stored; a claim of n<k> moves the counter of fresh ids only up to
MAX_COUNTED_ID.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

from abcast.errors import ConfigError, DecodeError, LocalProtocolError
from abcast.ids import NodeId, node_sort_key, sorted_nodes
from abcast.registry.limits import RegistryLimits, RegistryStats
from abcast.registry.messages import (
    MAX_MESSAGE_BYTES,
    PREFIX,
    Announce,
    Challenge,
    Done,
    GroupInfo,
    GroupList,
    GroupSummary,
    Join,
    Leave,
    ListGroups,
    Locate,
    Located,
    Lookup,
    Nonce,
    Refused,
    Register,
    Registered,
    Remove,
    Reply,
    Request,
    Signed,
    WaitDone,
    decode_request,
    encode,
    signed_body,
)
from abcast.security import load_secret
from abcast.security.secret import same_text
from abcast.security.signing import Signer, verify

log: Final = logging.getLogger(__name__)

_ASSIGNED = re.compile(r"n([0-9]+)")
#: a claimed n<k> moves the counter of fresh ids only up to here, so a claim of a huge k
#: cannot push the ids handed out later past the wire's NodeField bound (64 characters)
MAX_COUNTED_ID: Final = 10**18


def _listed(nodes: tuple[NodeId, ...], most: int = 16) -> str:
    """Node ids for a log line: the first `most`, then how many more."""
    more = f" … ({len(nodes)} in all)" if len(nodes) > most else ""
    return " ".join(nodes[:most]) + more


@dataclass(slots=True)
class _Group:
    members: dict[NodeId, str] = field(default_factory=dict)
    size: int | None = None
    done: set[NodeId] = field(default_factory=set)
    ordering: str = ""  # set for dynamic groups (announced by their leader)
    view_id: int = 0
    options: bytes = b""


@dataclass(slots=True)
class _Client:
    """One connection: where its replies go, what it has created (the per-client bound)."""

    peer: object
    writer: asyncio.StreamWriter
    entries: int = 0
    refusals: int = 0  # requests refused for a bound: logged once (_refuse_client)
    signed_rid: int = -1  # the rid of the last request with a proof (they must rise)


class RegistryServer:
    """`await start()` returns the bound URL (tcp://host:port); `close()` stops it."""

    def __init__(
        self, host: str = "127.0.0.1", port: int = 0, *,
        max_message_bytes: int = MAX_MESSAGE_BYTES, recovery_grace_s: float = 0.0,
        sizes: Mapping[str, int] | None = None, limits: RegistryLimits | None = None,
        secret: bytes | str | None = None,
    ) -> None:
        """`recovery_grace_s`: how long after start registrations without a claim wait,
        so that after a restart the running members re-assert their ids before any id
        is handed out again (a fresh registry needs none). `sizes`: group sizes declared
        up front, so members may join without naming one. `secret`: every group and
        node id is bound to it (only its holders may change anything here)."""
        if any(size < 1 for size in (sizes or {}).values()):
            raise ConfigError(f"group sizes must be >= 1, got {dict(sizes or {})}")
        self.sizes = dict(sizes or {})
        self.limits = limits or RegistryLimits()
        self.host = host
        self.port = port
        self.max_message_bytes = max_message_bytes
        self.stats = RegistryStats()
        self._server: asyncio.Server | None = None
        self._url: str | None = None
        self._last_assigned = 0
        self._owner: dict[NodeId, str] = {}  # node id → token
        self._by_token: dict[str, NodeId] = {}
        self._groups: dict[str, _Group] = {}
        self._addresses: dict[NodeId, str] = {}
        #: removed groups whose announcements are refused, oldest first (max_groups of them)
        self._removed: dict[str, None] = {}
        #: group -> the futures of the requests waiting for it to change
        self._waiters: dict[str, set[asyncio.Future[None]]] = {}
        self._connections: dict[asyncio.Task[None], asyncio.StreamWriter] = {}
        self.recovery_grace_s = recovery_grace_s
        self._grace_over: asyncio.Event | None = None
        loaded = load_secret(secret)
        #: the verifier every request must prove (a registry started with a secret)
        self._required = Signer(loaded).verifier if loaded is not None else None
        self._group_keys: dict[str, bytes] = {}  # group -> its verifier
        self._node_keys: dict[NodeId, bytes] = {}  # node id -> its verifier

    @property
    def url(self) -> str:
        if self._url is None:
            raise LocalProtocolError("registry not started")
        return self._url

    async def start(self) -> str:
        if self._server is not None:
            raise LocalProtocolError("registry already started")
        self._grace_over = asyncio.Event()
        if self.recovery_grace_s > 0:
            asyncio.get_running_loop().call_later(self.recovery_grace_s, self._grace_over.set)
        else:
            self._grace_over.set()
        self._server = await asyncio.start_server(self._serve, self.host, self.port)
        host, port = self._server.sockets[0].getsockname()[:2]
        shown = f"[{host}]" if ":" in host else host
        self._url = f"tcp://{shown}:{port}"
        log.info("registry listening on %s", self._url)
        return self._url

    async def close(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        server.close()
        # Closing the sockets ends each handler at its next read; cancelling the handler
        # tasks instead trips asyncio's stream callback (it calls task.exception()).
        for writer in self._connections.values():
            writer.close()
        handlers = list(self._connections)
        if handlers:
            await asyncio.wait(handlers, timeout=5)
        await server.wait_closed()

    async def __aenter__(self) -> RegistryServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ----------------------------------------------------------------- introspection

    def group_info(self, group: str, rid: int = 0) -> GroupInfo:
        g = self._groups.get(group)
        if g is None:
            return GroupInfo(rid, group, {}, "")
        members = {n: g.members[n] for n in sorted_nodes(list(g.members))}
        leader = next(iter(members), "")
        return GroupInfo(rid, group, members, leader, g.size, list(sorted_nodes(g.done)),
                         g.ordering, g.view_id, g.options,
                         self._required is not None or group in self._group_keys)

    def group_names(self) -> list[str]:
        return sorted(self._groups)

    def address_of(self, node: NodeId) -> str | None:
        return self._addresses.get(node)

    # ----------------------------------------------------------------- connections

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._connections[task] = writer
        self.stats.connections += 1
        peer = writer.get_extra_info("peername")
        client = _Client(peer, writer)
        nonce = secrets.token_bytes(32)  # this connection's challenge (secret groups)
        waits: set[asyncio.Task[None]] = set()
        try:
            while True:
                if not await self._drained(client):
                    return
                try:
                    body = await self._read_timed(reader, waits)
                    if body is None:
                        return  # timed out (logged)
                    request = decode_request(body)
                except asyncio.IncompleteReadError as exc:
                    if exc.partial:
                        self._bad(peer, f"message truncated after {len(exc.partial)} bytes")
                    return
                except DecodeError as exc:
                    self._bad(peer, str(exc))
                    return
                self.stats.requests += 1
                try:
                    self._serve_one(request, client, nonce, waits)
                except Exception as exc:  # a bug serving one request must not kill the rest
                    self._failed(peer, request, exc)
                    return
        except (ConnectionError, OSError):
            return
        finally:
            for wait in waits:
                wait.cancel()
            writer.close()
            if task is not None:
                self._connections.pop(task, None)

    def _serve_one(self, request: Request, client: _Client, nonce: bytes,
                   waits: set[asyncio.Task[None]]) -> None:
        refused = self._replayed(request, client) or self._over_limits(request, client)
        if refused is not None:
            self._send(client, refused)
        elif isinstance(request, Lookup | WaitDone) and self._ready(request):
            self._send(client, self.group_info(request.group, request.rid))
        elif isinstance(request, Lookup | WaitDone) or (
            isinstance(request, Register) and request.claim is None
            and self._grace_over is not None and not self._grace_over.is_set()
        ):
            if len(waits) >= self.limits.max_waits_per_client:
                self._send(client, self._refuse_client(
                    client, request.rid, f"this connection has {len(waits)} requests "
                    f"waiting (max_waits_per_client {self.limits.max_waits_per_client})"))
                return
            wait = asyncio.create_task(self._answer_later(request, client, nonce))
            waits.add(wait)
            wait.add_done_callback(waits.discard)
        elif isinstance(request, Challenge):
            self._send(client, Nonce(request.rid, nonce))
        else:
            self._send(client, self._checked(request, nonce, client.peer))

    def _send(self, client: _Client, reply: Reply) -> None:
        """Write `reply`, unless the connection would then hold more than
        max_unread_bytes of replies its client has not read: then drop it (one line)."""
        writer = client.writer
        if writer.is_closing():
            return
        data = encode(reply)
        unread = writer.transport.get_write_buffer_size()
        if unread + len(data) > self.limits.max_unread_bytes:
            self.stats.slow_readers += 1
            log.warning("registry dropped connection from %s: %d bytes of replies unread "
                        "(max_unread_bytes %d)", client.peer, unread + len(data),
                        self.limits.max_unread_bytes)
            writer.transport.abort()  # what it holds is freed now, not flushed
            return
        writer.write(data)

    async def _drained(self, client: _Client) -> bool:
        """Wait until the client has read its replies down to the transport's low-water
        mark before reading its next request (its requests wait in its socket, not here);
        False (closed, one line) if it reads none for idle_timeout_s."""
        writer = client.writer
        if writer.transport.get_write_buffer_size() == 0:
            return not writer.is_closing()
        try:
            async with asyncio.timeout(self.limits.idle_timeout_s):
                await writer.drain()
        except TimeoutError:
            self.stats.timeouts += 1
            log.info("registry closed a connection that read no reply for %g s",
                     self.limits.idle_timeout_s)
            return False
        return not writer.is_closing()

    def _failed(self, peer: object, request: Request, exc: Exception) -> None:
        """One line for a request the registry failed to serve (its bug, not the
        client's); the caller drops that connection, everyone else is served."""
        self.stats.failed_requests += 1
        log.error("registry dropped connection from %s: serving %s failed: %r",
                  peer, type(request).__name__, exc)

    async def _read_timed(
        self, reader: asyncio.StreamReader, waits: set[asyncio.Task[None]]
    ) -> bytes | None:
        """The next message body, or None once the connection has been idle (with no
        answer pending) for idle_timeout_s or has spent message_timeout_s inside one
        message (a slow or truncated sender): see the rules above."""
        limits = self.limits
        while True:
            try:
                async with asyncio.timeout(limits.idle_timeout_s):
                    first = await reader.readexactly(1)
                break
            except TimeoutError:
                if not waits:
                    self.stats.timeouts += 1
                    log.info("registry closed an idle connection (%g s)", limits.idle_timeout_s)
                    return None
        try:
            async with asyncio.timeout(limits.message_timeout_s):
                (length,) = PREFIX.unpack(first + await reader.readexactly(PREFIX.size - 1))
                if length > self.max_message_bytes:
                    raise DecodeError(f"registry message of {length} bytes exceeds the limit "
                                      f"{self.max_message_bytes}")
                return await reader.readexactly(length)
        except TimeoutError:
            self.stats.timeouts += 1
            log.warning("registry dropped a connection: a message unfinished after %g s",
                        limits.message_timeout_s)
            return None

    def _creates(self, request: Request) -> tuple[str, int, int] | None:
        """(what, how many the registry holds, its bound) if `request` would create a
        node id or a group; None if it creates nothing."""
        match request:
            case Register(token=token, claim=claim) if (
                    claim not in self._owner if claim is not None
                    else token not in self._by_token):
                return "node ids", len(self._owner), self.limits.max_nodes
            case Join(group=group) | Announce(group=group) if group not in self._groups:
                return "groups", len(self._groups), self.limits.max_groups
        return None

    def _full(self, request: Request) -> str | None:
        """Why `request` may not create what it would (the registry is full), or None."""
        creates = self._creates(request)
        if creates is None or creates[1] < creates[2]:
            return None
        what, total, _ = creates
        return f"registry full: it holds {total} {what} (max_{what.replace(' ids', 's')})"

    def _over_limits(self, request: Request, client: _Client) -> Refused | None:
        """Refused if `request` would create a node id or a group past a bound; else
        counts it against its connection (each id a token claims counts)."""
        if self._creates(request) is None:
            return None
        per_client = self.limits.max_entries_per_client
        reason = self._full(request)
        if reason is None and client.entries >= per_client:
            reason = (f"this connection created {client.entries} entries already "
                      f"(max_entries_per_client {per_client})")
        if reason is None:
            client.entries += 1
            return None
        return self._refuse_client(client, request.rid, reason)

    def _refuse_client(self, client: _Client, rid: int, reason: str) -> Refused:
        client.refusals += 1
        return self._refuse_full(rid, client.peer, reason, quiet=client.refusals > 1)

    def _refuse_full(self, rid: int, peer: object, reason: str, quiet: bool = False) -> Refused:
        self.stats.refused_full += 1
        if not quiet:
            log.warning("registry refused a request from %s: %s", peer, reason)
        return Refused(rid, reason)

    def _bad(self, peer: object, reason: str) -> None:
        self.stats.bad_messages += 1
        log.warning("registry dropped connection from %s: %s", peer, reason)

    async def _answer_later(
        self, request: Lookup | WaitDone | Register, client: _Client, nonce: bytes,
    ) -> None:
        try:
            self._send(client, await self._reply_later(request, nonce, client.peer))
        except Exception as exc:  # as in _serve: one line, that connection dropped
            self._failed(client.peer, request, exc)
            client.writer.close()

    async def _reply_later(
        self, request: Lookup | WaitDone | Register, nonce: bytes, peer: object,
    ) -> Reply:
        if isinstance(request, Register):
            assert self._grace_over is not None
            await self._grace_over.wait()
            # Counted now, among every registration parked with it, not on arrival.
            full = self._full(request)
            if full is not None:
                return self._refuse_full(request.rid, peer, full)
            return self._checked(request, nonce, peer)
        while not self._ready(request):
            changed = asyncio.get_running_loop().create_future()
            waiting = self._waiters.setdefault(request.group, set())
            waiting.add(changed)
            try:
                await changed
            finally:
                waiting.discard(changed)
                if not waiting and self._waiters.get(request.group) is waiting:
                    del self._waiters[request.group]
        return self.group_info(request.group, request.rid)

    def _ready(self, request: Lookup | WaitDone) -> bool:
        """Whether `request` can be answered now."""
        g = self._groups.get(request.group)
        if isinstance(request, Lookup):
            return len(g.members) >= request.wait_for if g else request.wait_for == 0
        return g is not None and len(g.done) >= request.count

    def _bump(self, group: str) -> None:
        # Wake the group's waiters once; they re-check their condition against the new state.
        for changed in self._waiters.pop(group, ()):
            if not changed.done():
                changed.set_result(None)

    # ----------------------------------------------------------------- secret groups

    def _checked(self, request: Request, nonce: bytes, peer: object) -> Reply:
        """`_handle(request)`, once a secret group's request proved the secret."""
        if not isinstance(request, Signed):
            return self._handle(request)
        refusal = self._authenticate(request, nonce)
        if refusal is not None:
            self.stats.refused_unauthenticated += 1
            log.warning("registry refused %s from %s: %s", type(request).__name__, peer, refusal)
            return Refused(request.rid, refusal)
        reply = self._handle(request)
        offered = getattr(request, "verifier", b"")
        if offered and not isinstance(reply, Refused):
            if isinstance(request, Register) and isinstance(reply, Registered):
                self._node_keys.setdefault(reply.node, offered)
            elif isinstance(request, Join | Announce) and request.group in self._groups:
                self._group_keys.setdefault(request.group, offered)
        return reply

    def _replayed(self, request: Request, client: _Client) -> Refused | None:
        """Refused if `request` carries a proof but its rid is not above the last such
        rid on this connection (a proof covers the rid: a recorded request sent again,
        a Join after its Leave, is refused); checked as it arrives, parked or not."""
        if not isinstance(request, Signed) or not request.auth:
            return None
        if request.rid > client.signed_rid:
            client.signed_rid = request.rid
            return None
        self.stats.refused_unauthenticated += 1
        reason = (f"a replayed request: rid {request.rid} not above {client.signed_rid}, "
                  f"the last signed one on this connection")
        log.warning("registry refused %s from %s: %s", type(request).__name__, client.peer,
                    reason)
        return Refused(request.rid, reason)

    def _verifier_for(self, request: Signed) -> bytes | None:
        """The verifier `request` must prove (None: an open group or id)."""
        if self._required is not None:
            return self._required
        if isinstance(request, Register):
            return self._node_keys.get(request.claim) if request.claim is not None else None
        return self._group_keys.get(request.group)  # a group gone is unbound (_handle)

    def _authenticate(self, request: Signed, nonce: bytes) -> str | None:
        """None if `request` may go ahead; else why not."""
        needed = self._verifier_for(request)
        offered: bytes = getattr(request, "verifier", b"")
        what = (f"node id {request.claim!r}" if isinstance(request, Register)
                else f"group {request.group!r}")
        if needed is None:
            if not offered:
                return None  # an open group or id, as before secrets
            if not isinstance(request, Register) and request.group in self._groups:
                return f"{what} exists without a secret"
            needed = offered  # the first holder binds it, proving the secret it binds
        elif offered and offered != needed:
            return f"{what} is bound to another secret"
        if not request.auth:
            return f"{what} is bound to a group secret: the request carries no proof"
        if not verify(needed, nonce, signed_body(request), request.auth):
            return f"the proof for {what} does not verify (not the group's secret)"
        return None

    # ----------------------------------------------------------------- the requests

    def _handle(self, request: Request) -> Reply:
        match request:
            case Register(rid, token, claim, address):
                reply = self._register(rid, token, claim)
                if isinstance(reply, Registered) and address is not None:
                    self._addresses[reply.node] = address
                return reply
            case Locate(rid, node):
                return Located(rid, node, self._addresses.get(node, ""))
            case Announce(rid, node, token, group, ordering, view_id, members, create, opts):
                reply = self._announce(rid, node, token, group, ordering, view_id, members,
                                       create, opts)
                if isinstance(reply, GroupInfo) and reply.view_id == view_id:
                    self._groups[group].options = opts
                    reply = self.group_info(group, rid)
                return reply
            case ListGroups(rid, after, limit):
                return self._list_page(rid, after, limit)
            case Remove(rid, group):
                if self._groups.pop(group, None) is not None:
                    self._group_keys.pop(group, None)  # its secret goes with it
                    log.info("removed group %s", group)
                    self._bump(group)
                    self._removed[group] = None  # a name never held leaves no tombstone
                    if len(self._removed) > self.limits.max_groups:
                        del self._removed[next(iter(self._removed))]  # the oldest
                return self.group_info(group, rid)
            case Join(rid, node, token, group, address, size):
                return self._join(rid, node, token, group, address, size)
            case Leave(rid, node, token, group) | Done(rid, node, token, group) if not (
                    same_text(self._owner.get(node, ""), token)):
                return Refused(rid, f"{node} is not registered with this token")
            case Leave(rid, node, _token, group):
                g = self._groups.get(group)
                if g is not None and g.members.pop(node, None) is not None:
                    # Its Done stays: members still waiting for everyone to finish count it.
                    if not g.members:
                        del self._groups[group]
                        self._group_keys.pop(group, None)
                    self._bump(group)
                return self.group_info(group, rid)
            case Done(rid, node, _token, group):  # its token checked above
                g = self._groups.get(group)
                if g is None or node not in g.members:
                    return Refused(rid, f"{node} is not a member of group {group!r}")
                if node not in g.done:
                    too_big = self._too_big(group, g, g.members, g.options, done=node)
                    if too_big is not None:
                        return Refused(rid, too_big)
                g.done.add(node)
                self._bump(group)
                return self.group_info(group, rid)
            case _:
                raise LocalProtocolError(f"no synchronous answer for {request!r}")

    def _register(self, rid: int, token: str, claim: NodeId | None) -> Reply:
        if claim is None:
            known = self._by_token.get(token)
            if known is not None:
                return Registered(rid, known)  # a retried request whose reply was lost
            node = self._next_free()
        else:
            holder = self._owner.get(claim)
            if holder is not None and not same_text(holder, token):
                return Refused(rid, f"node id {claim!r} is taken by another node")
            node = claim
            match = _ASSIGNED.fullmatch(claim)
            number = int(match.group(1)) if match else 0
            if number <= MAX_COUNTED_ID:
                self._last_assigned = max(self._last_assigned, number)
        self._owner[node] = token
        self._by_token[token] = node
        log.info("registered %s", node)
        return Registered(rid, node)

    def _next_free(self) -> NodeId:
        while True:
            self._last_assigned += 1
            node = f"n{self._last_assigned}"
            if node not in self._owner:
                return node

    def _join(
        self, rid: int, node: NodeId, token: str, group: str, address: str, size: int | None
    ) -> Reply:
        if not same_text(self._owner.get(node, ""), token):
            return Refused(rid, f"{node} is not registered with this token: register first")
        g = self._groups.get(group)
        fresh = g is None
        if g is None:
            g = _Group(size=self.sizes.get(group))
        if size is not None and g.size is not None and size != g.size:
            return Refused(rid, f"group {group!r} has size {g.size}, not {size}")
        declared = size if g.size is None else g.size
        if node not in g.members and declared is not None and len(g.members) >= declared:
            return Refused(rid, f"group {group!r} is full ({declared} members)")
        if g.members.get(node) != address:
            too_big = self._too_big(group, g, {**g.members, node: address}, g.options)
            if too_big is not None:
                return Refused(rid, too_big)
        if fresh:
            self._groups[group] = g
        g.size = declared
        if g.members.get(node) != address:
            g.members[node] = address
            log.info("%s joined %s at %s", node, group, address)
            self._bump(group)
        return self.group_info(group, rid)

    def _announce(
        self, rid: int, node: NodeId, token: str, group: str, ordering: str, view_id: int,
        members: dict[NodeId, str], create: bool, options: bytes,
    ) -> Reply:
        if not same_text(self._owner.get(node, ""), token):
            return Refused(rid, f"{node} is not registered with this token: register first")
        if node not in members:
            return Refused(rid, f"{node} announced a view of {group!r} without itself")
        listed = _listed(sorted_nodes(list(members)))  # what may fail, before storing
        g = self._groups.get(group)
        too_big = self._too_big(group, g or _Group(), members, options)
        if too_big is not None:
            return Refused(rid, too_big)
        if create:
            retried = g is not None and g.view_id == view_id == 1 and g.members == members
            if g is not None and g.members and not retried:
                return Refused(rid, f"group {group!r} already exists")
            self._removed.pop(group, None)
        elif group in self._removed:
            return Refused(rid, f"group {group!r} was removed")
        if g is None:
            g = self._groups[group] = _Group()
        elif g.ordering and g.ordering != ordering:
            return Refused(rid, f"group {group!r} uses ordering {g.ordering!r}, not {ordering!r}")
        if view_id < g.view_id:
            return self.group_info(group, rid)  # a stale leader: show it the newer view
        if (g.view_id, g.members, g.ordering) != (view_id, members, ordering):
            g.ordering, g.view_id, g.members = ordering, view_id, dict(members)
            log.info("%s announced view %d of %s: %s", node, view_id, group, listed)
            self._bump(group)
        for member, address in members.items():
            if member in self._owner:  # registered ids only (max_nodes bounds them)
                self._addresses.setdefault(member, address)  # a node's own word comes first
        return self.group_info(group, rid)

    def _too_big(self, group: str, g: _Group, members: dict[NodeId, str], options: bytes,
                 done: NodeId | None = None) -> str | None:
        """Why the record of `group` with these members (and `done` done too) could not
        be read — its GroupInfo above the MAX_MESSAGE_BYTES a client reads (or this
        registry's smaller max_message_bytes, so a leader can re-announce it) — or None."""
        finished = [*g.done, done] if done is not None else list(g.done)
        widest = GroupInfo(2**62, group, members, " " * 64, g.size, finished,
                           g.ordering or " " * 64, 2**62, options, True)
        size = len(encode(widest))
        bound = min(MAX_MESSAGE_BYTES, self.max_message_bytes)
        if size <= bound:
            return None
        return (f"group {group!r} would not fit a registry reply: {len(members)} members "
                f"make its record {size} bytes, above the {bound}-byte bound")

    def _list_page(self, rid: int, after: str, limit: int) -> GroupList:
        """The groups named after `after`, at most `limit` (capped at list_page)."""
        size = min(limit or self.limits.list_page, self.limits.list_page)
        names = [name for name in sorted(self._groups) if name > after]
        page = names[:size]
        more = len(names) > size
        return GroupList(rid, [self._summary(name) for name in page],
                         page[-1] if more else "")

    def _summary(self, name: str) -> GroupSummary:
        g = self._groups[name]
        leader = sorted_nodes(list(g.members))[0] if g.members else ""
        return GroupSummary(name, g.ordering, g.view_id, leader, len(g.members))

    def node_ids(self) -> list[NodeId]:
        return sorted(self._owner, key=node_sort_key)
