"""`Client`: a process that calls a replicated service without being a group member.

Usage: `client = await Client.connect("kv", registry="tcp://127.0.0.1:7400")`, then
`outcome = await client.request(b"get x", vote="majority", timeout=1.0)`, and
`await client.close()`.

Rules:
- A client is a `Node` with no group: the registry gives it an id (the thesis's
  getClientNum) and keeps its address; it opens the group's request endpoint
  (abcast.rpc.wire) and learns the servers from the registry's record of the group.
  It is in no view, so its crash costs the group nothing.
- `path="direct"` (Case A): the request goes to every server; the view's leader
  proposes it into the group's total order, the others hold it in case the leader
  fails (abcast.rpc.executor). `path="via-member"` (Case B): it goes to one contact —
  `contact="round-robin"` (default), `"any"` (random) or `"sequencer"` (the view's
  lowest member) — which proposes it. Either way every target executes it at its place
  in the order and replies to the client directly.
- Request ids count up from a random start below 2**61 (`first_rid`), not from 1: a
  registry restarted empty may give a departed client's id to a new one, and the
  servers' duplicate table, keyed on (client id, request id), must not take the
  newcomer's requests for the old one's (abcast.rpc.executor).
- Retries keep the request id: after `retry_s` without a decision, or at once when a
  view without the contact arrives, the request is sent again (Case B: through the
  next live member that the request's `contact` policy picks — through the sequencer,
  the new view's leader once the contact left; Case A: to the servers not heard from).
  Servers answer a retry from their reply cache, never by executing twice.
- Each request's replies go through a `Ballot` (abcast.rpc.voting); a view change (told
  by the servers, in replies and notices) re-counts what it needs. A request never waits
  past its `timeout`. Replies for requests that are not pending are counted
  (`stats.unknown_replies`) and dropped; a reply that claims another server's name, or
  a request, is the peer's fault.
- Views: the client takes a view (id, members) only from a server of its current view,
  and only with a higher view id; view news from any other node is counted
  (`stats.foreign_views`) and dropped (a new member may send it before the client knows
  it: the client hears of that view from an old member too).
- The registry's record of the group (`refresh()`) overrides the client's view whatever
  its id: a group re-created under the same name restarts its view ids, and its servers
  may be new nodes, so their frames alone would never move the client. A request that
  ends TIMEOUT or MEMBERS_LOST starts one refresh in the background (never delaying that
  request), so the next request goes to the servers the registry names.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import secrets
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Final

from abcast.codec import Envelope
from abcast.errors import ConfigError, LocalProtocolError, RemoteProtocolError
from abcast.ids import NodeId, sorted_nodes
from abcast.registry.client import RegistryClient
from abcast.rpc.voting import Ballot, Outcome, Reply, Status, Vote, parse_consistency
from abcast.rpc.wire import ReplyFrame, Request, ViewNotice, decode_rpc, encode_rpc, endpoint_name
from abcast.runtime.node import Node
from abcast.transport import Link

log: Final = logging.getLogger(__name__)

PATHS: Final = ("direct", "via-member")
CONTACTS: Final = ("round-robin", "any", "sequencer")
#: how long connect waits for the registry
CONNECT_TIMEOUT_S: Final = 10.0
#: request ids start at a random number of this many bits (plus one)
RID_START_BITS: Final = 61


def first_rid() -> int:
    """A new client's first request id: random in [1, 2**61], so two incarnations of one
    client id overlap in the servers' table with odds of about (their requests) / 2**61;
    the counter then has 2**61 ids left before the wire's bound (wire.Rid)."""
    return secrets.randbits(RID_START_BITS) + 1


@dataclass(slots=True)
class ClientStats:
    requests: int = 0
    sent: int = 0  # request frames sent (retries and Case A's copies included)
    retries: int = 0
    unknown_replies: int = 0  # for no pending request (late, or never ours)
    duplicate_replies: int = 0  # a second reply from one server to one request
    foreign_replies: int = 0  # from a server the request did not go to
    late_replies: int = 0  # after the request was decided
    foreign_views: int = 0  # view news from a node not in the client's view (ignored)
    refreshes: int = 0  # the group's record read again from the registry


@dataclass(slots=True)
class _Pending:
    ballot: Ballot
    request: Request
    decided: asyncio.Event
    #: the caller's contact policy (CONTACTS), for the first send and every resend
    how: str
    contact: NodeId | None = None


class Client:
    def __init__(self, group: str, node: Node, *, retry_s: float | None = None) -> None:
        _check_retry(retry_s)
        self.group = group
        self.node = node
        self.retry_s = retry_s
        self.endpoint = endpoint_name(group)
        self.stats = ClientStats()
        self.view_id = 0
        self.members: tuple[NodeId, ...] = ()
        #: the most servers the group has had in a view this client saw
        self.largest = 0
        self._rids = itertools.count(first_rid())
        self._pending: dict[int, _Pending] = {}
        self._turn = 0
        self._rng = random.Random(secrets.randbits(64))  # contact choice only
        self._closed = False
        self._refresh: asyncio.Task[None] | None = None

    @classmethod
    async def connect(
        cls, group: str, *, registry: str | RegistryClient,
        transport: str = "tcp://127.0.0.1:0", retry_s: float | None = None,
        timeout_s: float = CONNECT_TIMEOUT_S,
    ) -> Client:
        """A client of `group`, whose servers the registry knows."""
        _check_retry(retry_s)
        node = Node(transport, registry=registry)
        try:
            async with asyncio.timeout(timeout_s):
                await node.start()
                assert node.registry is not None
                info = await node.registry.lookup(group)
        except TimeoutError:
            await node.close()
            raise ConfigError(f"the registry did not answer in {timeout_s:g} s") from None
        except BaseException:
            await node.close()
            raise
        if not info.members:
            await node.close()
            raise ConfigError(f"the registry has no members for group {group!r}")
        client = cls(group, node, retry_s=retry_s)
        try:
            node.open_endpoint(client.endpoint, client._on_frame)
            client._adopt(info.view_id, info.members)  # ConfigError: servers out of reach
        except BaseException:
            await node.close()
            raise
        return client

    async def refresh(self) -> None:
        """Take the registry's record of the group as this client's view, even with a
        lower view id (a group re-created under the same name). No record with members:
        nothing changes."""
        registry = self.node.registry
        if registry is None or self._closed:
            return
        info = await registry.lookup(self.group)
        self.stats.refreshes += 1
        if info.members and not self._closed:
            self._adopt(info.view_id, info.members)

    def _adopt(self, view_id: int, members: dict[NodeId, str]) -> None:
        """The registry's record: its addresses, and its view over the client's own."""
        self.node.add_peers(members)
        if view_id < self.view_id:
            self.largest = 0  # another incarnation of the group: its sizes count afresh
        self._install(view_id, tuple(members))

    @property
    def id(self) -> NodeId:
        return self.node.id

    async def close(self) -> None:
        self._closed = True
        if self._refresh is not None:
            self._refresh.cancel()
        for pending in self._pending.values():
            pending.decided.set()
        await self.node.close()

    async def __aenter__(self) -> Client:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- calls ------------------------------------------------------------------------------
    async def request(
        self, payload: bytes, *, vote: str | Vote = "majority", consistency: str = "any",
        timeout: float = 1.0, path: str = "via-member", contact: str = "round-robin",
        to: Sequence[NodeId] | None = None,
    ) -> Outcome:
        """Call the group; the Outcome says how its replies voted (see the module rules)."""
        ballot_vote = Vote.parse(vote)
        consistency = parse_consistency(consistency)
        self._check_call(path, contact, timeout)
        targets = self._targets(to)
        ballot_vote.check_targets(len(to) if to else self.largest)
        if not targets:  # every server the client knew has left the group
            self._refresh_soon()
            return Outcome(Status.MEMBERS_LOST, None, ())
        ballot = Ballot(ballot_vote, consistency, targets)
        if ballot.on_view(self.members) is not Status.WAITING:
            self._refresh_soon()  # lost before a word was sent: send none, look again
            return ballot.outcome()
        request = Request(self.id, next(self._rids), bytes(payload), self.node.address,
                          tuple(to or ()), False, path)
        pending = _Pending(ballot, request, asyncio.Event(), contact)
        self._pending[request.rid] = pending
        self.stats.requests += 1
        retry_s = self.retry_s if self.retry_s is not None else max(0.05, timeout / 4)
        try:
            async with asyncio.timeout(timeout):
                self._send(pending, first=True)
                while not ballot.decided:
                    try:
                        async with asyncio.timeout(retry_s):
                            await pending.decided.wait()
                    except TimeoutError:
                        pass
                    if self._closed:
                        raise LocalProtocolError("client closed")
                    if not ballot.decided:
                        self.stats.retries += 1
                        self._send(pending, first=False)
        except TimeoutError:
            ballot.on_deadline()
        finally:
            del self._pending[request.rid]
            self.stats.duplicate_replies += ballot.ignored_duplicate
            self.stats.foreign_replies += ballot.ignored_foreign
        if ballot.status in (Status.TIMEOUT, Status.MEMBERS_LOST):
            self._refresh_soon()
        return ballot.outcome()

    def _refresh_soon(self) -> None:
        """One registry refresh in the background (a failed one is logged, not raised)."""
        if self._closed or (self._refresh is not None and not self._refresh.done()):
            return
        self._refresh = asyncio.get_running_loop().create_task(self._refresh_logged())

    async def _refresh_logged(self) -> None:
        try:
            async with asyncio.timeout(CONNECT_TIMEOUT_S):
                await self.refresh()
        except (TimeoutError, ConfigError) as exc:
            log.warning("client %s: the registry's record of %r not read again: %s",
                        self.id, self.group, exc or "timeout")

    async def flush(self, timeout: float) -> bool:
        """Wait until every frame this client sent has left it (handed to the wire: the
        transport buffers nothing, `Transport.buffered`, a WAN emulator's delay line
        included), at most `timeout` seconds; True if so. `close()` discards what is still
        queued — a connection to a far or slow server is not up yet, say — so a `cast`
        followed by `close()` may never leave: flush between them. Polled, backing off
        from 1 ms to 50 ms: the transport tells nobody when a peer's queue empties."""
        transport = self.node.transport
        delay = 0.001
        try:
            async with asyncio.timeout(timeout):
                while transport.buffered() > 0:
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 0.05)
        except TimeoutError:
            return False
        return True

    def cast(self, payload: bytes, *, path: str = "via-member", contact: str = "round-robin",
             to: Sequence[NodeId] | None = None) -> int:
        """A one-way request (no reply, no retry); returns its request id. It is queued
        here: `await flush(timeout)` before `close()` to know it left."""
        self._check_call(path, contact, 1.0)
        targets = self._targets(to)
        request = Request(self.id, next(self._rids), bytes(payload), self.node.address,
                          tuple(to or ()), True, path)
        self.stats.requests += 1
        if not targets:
            return request.rid  # nobody to send it to
        ballot = Ballot(Vote("first"), "any", targets)
        self._send(_Pending(ballot, request, asyncio.Event(), contact), first=True)
        return request.rid

    def _check_call(self, path: str, contact: str, timeout: float) -> None:
        if self._closed:
            raise LocalProtocolError("client closed")
        if path not in PATHS:
            raise ConfigError(f"unknown path {path!r}; choose one of: {', '.join(PATHS)}")
        if contact not in CONTACTS:
            raise ConfigError(f"unknown contact {contact!r}; choose one of: "
                              f"{', '.join(CONTACTS)}")
        if not timeout > 0:
            raise ConfigError(f"timeout must be positive, got {timeout}")

    def _targets(self, to: Sequence[NodeId] | None) -> frozenset[NodeId]:
        if not to:
            return frozenset(self.members)
        twice = sorted({server for server in to if to.count(server) > 1})
        if twice:
            raise ConfigError(f"to= names a server more than once: {', '.join(twice)}")
        unknown = set(to) - set(self.members)
        if unknown:
            raise ConfigError(f"not servers of {self.group!r}: {', '.join(sorted(unknown))} "
                              f"(servers: {', '.join(self.members)})")
        return frozenset(to)

    def _send(self, pending: _Pending, *, first: bool) -> None:
        request = pending.request
        if request.path == "direct":
            heard = {r.server for r in pending.ballot.replies}
            receivers: Iterable[NodeId] = [m for m in self.members if m not in heard]
        else:
            chosen = self._contact(pending.how, avoid=None if first else pending.contact)
            if chosen is None:
                return
            pending.contact = chosen
            receivers = (chosen,)
        data = encode_rpc(self.endpoint, self.id, request)
        for server in receivers:
            self.stats.sent += 1
            self.node.transmit(server, data)

    def _contact(self, how: str, avoid: NodeId | None) -> NodeId | None:
        """Whom a Case B send goes to; `avoid`: the last contact, on a retry. Through the
        sequencer: the leader first, then each retry the member after the last contact
        in view order (the leader again once the last contact left the view), so the
        retries reach every member, not only the leader and the one after it."""
        if how == "sequencer" and avoid is not None and avoid in self.members:
            at = self.members.index(avoid)
            return self.members[(at + 1) % len(self.members)]
        members = [m for m in self.members if m != avoid] or list(self.members)
        if not members:
            return None
        if how == "sequencer":
            return members[0]
        if how == "any":
            return self._rng.choice(members)
        self._turn += 1
        return members[self._turn % len(members)]

    # -- frames -----------------------------------------------------------------------------
    def _on_frame(self, link: Link, env: Envelope) -> None:
        frame = decode_rpc(env.payload)  # DecodeError: the node drops the link
        if isinstance(frame, Request):
            raise RemoteProtocolError(f"{env.sender} sent a request to a client")
        if isinstance(frame, ReplyFrame) and frame.server != env.sender:
            raise RemoteProtocolError(f"{env.sender} sent a reply in {frame.server}'s name")
        if env.sender in self.members:
            self._view(frame.view_id, frame.members)
        elif frame.view_id > self.view_id:
            self.stats.foreign_views += 1
            log.info("client %s: view %d from %s, no server it knows, ignored",
                      self.id, frame.view_id, env.sender)
        if isinstance(frame, ViewNotice):
            return
        pending = self._pending.get(frame.rid)
        if pending is None:
            self.stats.unknown_replies += 1
            return
        ballot = pending.ballot
        if ballot.decided:
            self.stats.late_replies += 1
            return
        if ballot.on_reply(Reply(frame.server, frame.value, frame.ok)) is not Status.WAITING:
            pending.decided.set()

    def _view(self, view_id: int, members: tuple[NodeId, ...]) -> None:
        if view_id > self.view_id:
            self._install(view_id, members)

    def _install(self, view_id: int, members: tuple[NodeId, ...]) -> None:
        self.view_id = view_id
        self.members = sorted_nodes(list(members))
        self.largest = max(self.largest, len(members))
        for pending in self._pending.values():
            lost_contact = pending.contact is not None and pending.contact not in members
            if pending.ballot.on_view(members) is not Status.WAITING:
                pending.decided.set()
            elif lost_contact and pending.request.path == "via-member":
                self.stats.retries += 1
                self._send(pending, first=False)


def _check_retry(retry_s: float | None) -> None:
    if retry_s is not None and not retry_s > 0:
        raise ConfigError(f"retry_s must be positive (None: a quarter of each request's "
                          f"timeout), got {retry_s}")


async def call(group: str, payload: bytes, *, registry: str, **kwargs: object) -> Outcome:
    """One request from a client made for it, closed after."""
    client = await Client.connect(group, registry=registry)
    try:
        return await client.request(payload, **kwargs)  # type: ignore[arg-type]
    finally:
        await client.close()
