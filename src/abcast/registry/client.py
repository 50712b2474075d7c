"""`RegistryClient`: a node's connection to the registration server, kept alive.

Rules: one TCP connection per client, kept by a background task that reconnects with
exponential backoff (jittered, capped) whenever it drops, for as long as the client is
open — after every failure, a connection the registry closed included: the delay is
reset only once a connection has carried a reply (a request the registry cannot read
made a tight reconnect loop before). A request is checked against the registry's own
decoder before it is sent, so an invalid one (a bad node id or group name) raises
ConfigError at once instead of being re-sent for ever. On every (re)connection it first
re-asserts what this client already holds, its node id (by token, with its address) and
its group memberships, so a registry that restarted empty learns them again before
anything else is asked, and sends the Leaves of groups left while it was away
(`forget`), so a registry that only lost the connection forgets them too. Requests wait
while the registry is away and are re-sent on the next connection (every request is
idempotent), so a running group never notices the registry dying: only calls that need
an answer wait for it to come back (or for `close()`, which ends every waiting call with
LocalProtocolError). A registry never reached is another matter (a wrong URL, none
started, a port where something else listens and never answers): until the registry
first answered (a connection's first message is a Challenge it answers at once, a
Nonce), a call waits at most `connect_timeout_s` (REGISTRY_TIMEOUT_S, 10 s, the CLI's
`--timeout` default too), then raises ConfigError naming the URL. A refusal from the
registry raises ConfigError with the registry's reason.

With a group secret (`secret=`), each connection starts by asking the registry for its
nonce (`Challenge`), and every request that changes something (register, join, leave,
done, announce, remove) carries the secret's verifier and a proof over that nonce
(abcast.security.signing): the registry then refuses those changes to anyone without
the secret. A proof covers the request id, and the ids of one connection rise (the
registry refuses a proof whose id is not above the last one on its connection: a
replay), so they come from one counter, re-assertions on a new connection included.

It knows the registry protocol (messages.py) and nothing about transports or stacks.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import secrets
from collections.abc import Callable
from typing import Final

import msgspec

from abcast.errors import ConfigError, DecodeError, LocalProtocolError
from abcast.ids import NodeId
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
    decode_reply,
    decode_request,
    encode,
    parse_registry_url,
    read_body,
    reply_rid,
    signed_body,
)
from abcast.security import load_secret
from abcast.security.signing import Signer
from abcast.tasks import stop_task

log: Final = logging.getLogger(__name__)

#: how long a call waits for a registry this client never reached (None: for ever)
REGISTRY_TIMEOUT_S: Final = 10.0


def _checked(request: Request) -> bytes:
    """`request` encoded, once the registry's own decoder accepts it: ConfigError for a
    request it would refuse to read (it would close the connection, and re-sending the
    request after each reconnect would loop for ever), one above MAX_MESSAGE_BYTES too."""
    data = encode(request)
    if len(data) - PREFIX.size > MAX_MESSAGE_BYTES:
        raise ConfigError(f"registry request {type(request).__name__} of {len(data)} bytes "
                          f"is above the {MAX_MESSAGE_BYTES}-byte bound on a registry message")
    try:
        decode_request(data[4:])
    except DecodeError as exc:
        raise ConfigError(f"invalid registry request {type(request).__name__}: {exc}") from None
    return data


class _LostError(Exception):
    """The connection carrying a request broke before its reply came."""


class RegistryClient:
    def __init__(
        self, url: str, *, initial_backoff_s: float = 0.05, max_backoff_s: float = 2.0,
        connect_timeout_s: float | None = REGISTRY_TIMEOUT_S,
        secret: bytes | str | None = None,
    ) -> None:
        if not 0 < initial_backoff_s <= max_backoff_s:
            raise ConfigError("need 0 < initial_backoff_s <= max_backoff_s")
        if connect_timeout_s is not None and not 0 < connect_timeout_s < float("inf"):
            raise ConfigError(f"connect_timeout_s must be a positive number of seconds "
                              f"(or None: wait for ever), not {connect_timeout_s!r}")
        self.connect_timeout_s = connect_timeout_s
        self._reached = False  # connected at least once
        self.url = url
        self._host, self._port = parse_registry_url(url)
        self._initial = initial_backoff_s
        self._max = max_backoff_s
        self.token = secrets.token_hex(16)
        self.node: NodeId | None = None
        self.address: str | None = None
        self._joined: dict[str, tuple[str, int | None]] = {}
        #: groups left while the registry was away (`forget`): told on the next connection
        self._left: set[str] = set()
        self._pending: dict[int, asyncio.Future[Reply]] = {}
        self._rids = itertools.count(1)
        self._writer: asyncio.StreamWriter | None = None
        self._up: asyncio.Event | None = None
        self._keeper: asyncio.Task[None] | None = None
        self._closed = False
        # Jitter only spreads reconnect storms; it never decides protocol behaviour.
        self._rng = random.Random(secrets.randbits(64))
        self.reconnects = 0
        loaded = load_secret(secret)
        self.secret = loaded
        self._signer = Signer(loaded) if loaded is not None else None
        self._nonce = b""  # the current connection's challenge (with a secret)

    def _prove(self, request: Request) -> Request:
        """`request` with the secret's verifier and a proof over this connection's
        nonce, if it is one that changes something and this client holds a secret."""
        signer = self._signer
        if signer is None or not isinstance(request, Signed):
            return request
        if isinstance(request, Register | Join | Announce):
            request = msgspec.structs.replace(request, verifier=signer.verifier)
        return msgspec.structs.replace(
            request, auth=signer.prove(self._nonce, signed_body(request)))

    @property
    def connected(self) -> bool:
        """True while a connection to the registry is up (calls would not wait)."""
        return self._writer is not None

    # ----------------------------------------------------------------- the calls

    async def register(self, claim: NodeId | None = None, address: str | None = None) -> NodeId:
        """This node's id: `claim` if given (and free), else the next n<k>. `address`
        (the node's transport URL) lets peers find it (`locate`); registering again
        with the id already held adds or changes it."""
        if self.node is not None and claim not in (None, self.node):
            raise LocalProtocolError(f"this client is already registered as {self.node}")
        if address is not None:
            self.address = address
        reply = await self._request(
            lambda rid: Register(rid, self.token, claim or self.node, self.address))
        if not isinstance(reply, Registered):
            raise ConfigError(f"registry answered {type(reply).__name__} to a registration")
        self.node = reply.node
        return reply.node

    async def locate(self, node: NodeId) -> str | None:
        """The address `node` registered (None if it registered none)."""
        reply = await self._request(lambda rid: Locate(rid, node))
        if not isinstance(reply, Located):
            raise ConfigError(f"registry answered {type(reply).__name__} to a Locate")
        return reply.address or None

    async def announce(
        self, group: str, ordering: str, view_id: int, members: dict[NodeId, str], *,
        create: bool = False, options: bytes = b"",
    ) -> GroupInfo:
        """Publish a dynamic group's view (this node must be in it); see messages.Announce."""
        node = self._registered()
        return await self._info(lambda rid: Announce(
            rid, node, self.token, group, ordering, view_id, dict(members), create, options))

    async def list_groups(self) -> list[GroupSummary]:
        """Every group, fetched page by page (see ListGroups)."""
        groups: list[GroupSummary] = []
        after = ""
        while True:
            page = await self.list_page(after)
            groups += page.groups
            if not page.next or page.next <= after:
                return groups
            after = page.next

    async def list_page(self, after: str = "", limit: int = 0) -> GroupList:
        """One page of groups: those named after `after`, at most `limit` (0: the
        registry's page size)."""
        reply = await self._request(lambda rid: ListGroups(rid, after, limit))
        if not isinstance(reply, GroupList):
            raise ConfigError(f"registry answered {type(reply).__name__} to ListGroups")
        return reply

    async def remove(self, group: str) -> GroupInfo:
        """Forget `group` at the registry (its members are not told; see Remove)."""
        return await self._info(lambda rid: Remove(rid, group))

    async def join(self, group: str, address: str, size: int | None = None) -> GroupInfo:
        node = self._registered()
        self._left.discard(group)
        info = await self._info(lambda rid: Join(rid, node, self.token, group, address, size))
        self._joined[group] = (address, size)
        return info

    async def leave(self, group: str) -> None:
        node = self._registered()
        self._joined.pop(group, None)
        self._left.discard(group)
        await self._info(lambda rid: Leave(rid, node, self.token, group))

    def forget(self, group: str) -> None:
        """Leave `group` without waiting for the registry: it is no longer re-joined on a
        new connection, and the Leave goes out first thing on the next one (for a caller
        that must not wait for a registry that is away: a group closing)."""
        self._joined.pop(group, None)
        self._left.add(group)

    async def lookup(self, group: str) -> GroupInfo:
        return await self._info(lambda rid: Lookup(rid, group))

    async def wait_members(self, group: str, count: int) -> GroupInfo:
        """The group once at least `count` members have joined (held by the registry)."""
        return await self._info(lambda rid: Lookup(rid, group, count))

    async def done(self, group: str) -> GroupInfo:
        node = self._registered()
        return await self._info(lambda rid: Done(rid, node, self.token, group))

    async def wait_done(self, group: str, count: int) -> GroupInfo:
        return await self._info(lambda rid: WaitDone(rid, group, count))

    async def close(self) -> None:
        """Stop; every call still waiting (for a reply, or for the registry to come
        back) raises LocalProtocolError."""
        self._closed = True
        keeper, self._keeper = self._keeper, None
        if keeper is not None:
            await stop_task(keeper)
        for fut in self._pending.values():
            if not fut.done():
                fut.set_exception(LocalProtocolError("registry client closed"))
        self._pending.clear()
        if self._up is not None:
            self._up.set()  # wakes the calls waiting for a connection: they see _closed

    async def __aenter__(self) -> RegistryClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # ----------------------------------------------------------------- requests

    def _registered(self) -> NodeId:
        if self.node is None:
            raise LocalProtocolError("register with the registry before joining groups")
        return self.node

    async def _info(self, build: Callable[[int], Request]) -> GroupInfo:
        reply = await self._request(build)
        if not isinstance(reply, GroupInfo):
            raise ConfigError(f"registry answered {type(reply).__name__}, expected GroupInfo")
        return reply

    async def _request(self, build: Callable[[int], Request]) -> Reply:
        if self._closed:
            raise LocalProtocolError("registry client closed")
        up = self._ensure_keeper()
        while True:
            await self._wait_up(up)
            # A close() while this call waited for a connection (or for a reply the lost
            # connection took: _LostError) sets `up`: the call ends here, not waits for ever.
            if self._closed:
                raise LocalProtocolError("registry client closed")
            writer = self._writer
            if writer is None:
                await asyncio.sleep(0)
                continue
            rid = next(self._rids)
            data = _checked(self._prove(build(rid)))
            fut: asyncio.Future[Reply] = asyncio.get_running_loop().create_future()
            self._pending[rid] = fut
            try:
                writer.write(data)
                reply = await fut
            except _LostError:
                continue  # re-sent on the next connection; every request is idempotent
            finally:
                self._pending.pop(rid, None)
            if isinstance(reply, Refused):
                raise ConfigError(f"registry {self.url} refused: {reply.reason}")
            return reply

    async def _wait_up(self, up: asyncio.Event) -> None:
        if up.is_set() or self._reached or self.connect_timeout_s is None:
            await up.wait()
            return
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                await up.wait()
        except TimeoutError:
            raise ConfigError(f"registry {self.url} did not answer within "
                              f"{self.connect_timeout_s:g} s (is it running there?)") from None

    def _ensure_keeper(self) -> asyncio.Event:
        if self._up is None:
            self._up = asyncio.Event()
        if self._keeper is None:
            self._keeper = asyncio.create_task(self._keep(self._up), name="registry-client")
        return self._up

    # ----------------------------------------------------------------- the connection

    async def _keep(self, up: asyncio.Event) -> None:
        delay = self._initial
        first = True
        while not self._closed:
            writer: asyncio.StreamWriter | None = None
            try:
                reader, writer = await asyncio.open_connection(self._host, self._port)
                await self._replay(reader, writer)
            except (OSError, asyncio.IncompleteReadError, DecodeError, ConfigError) as exc:
                if writer is not None:
                    writer.close()
                if delay == self._initial:
                    # Never reached with a deadline: the waiting call reports it (one
                    # error naming the URL); a registry lost mid-run is worth a warning.
                    quiet = not self._reached and self.connect_timeout_s is not None
                    log.log(logging.INFO if quiet else logging.WARNING,
                            "registry %s unreachable (%s); retrying with backoff", self.url, exc)
                delay = await self._back_off(delay)
                continue
            if not first:
                self.reconnects += 1
                log.info("registry %s reached again", self.url)
            first = False
            self._writer = writer
            self._reached = True
            up.set()
            try:
                answered = await self._read_replies(reader)
            finally:
                up.clear()
                self._writer = None
                writer.close()
                for fut in self._pending.values():
                    if not fut.done():
                        fut.set_exception(_LostError())
            delay = await self._back_off(self._initial if answered else delay)

    async def _replay(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Fetch the connection's nonce (with a secret; and before the registry was first
        reached, which proves that a registry answers there, within connect_timeout_s),
        then re-assert this client's id and memberships on it, and leave the groups it
        left while the registry was away."""
        if self._signer is not None or not self._reached:
            writer.write(encode(Challenge(0)))
            try:
                async with asyncio.timeout(self.connect_timeout_s):
                    reply = decode_reply(await read_body(reader))
            except TimeoutError:  # (an OSError: _keep tries again after its back-off)
                raise TimeoutError(f"no answer to a Challenge within "
                                   f"{self.connect_timeout_s:g} s") from None
            if not isinstance(reply, Nonce):
                raise DecodeError(f"registry answered {type(reply).__name__} to a Challenge")
            self._nonce = reply.nonce
        if self.node is None:
            return
        # Rising rids: the registry refuses a proof whose rid is not above the last one.
        requests: list[Request] = [
            Register(next(self._rids), self.token, self.node, self.address)]
        requests += [
            Join(next(self._rids), self.node, self.token, group, address, size)
            for group, (address, size) in self._joined.items()
        ]
        left = set(self._left)
        requests += [Leave(next(self._rids), self.node, self.token, group) for group in left]
        for request in requests:
            writer.write(encode(self._prove(request)))
            reply = decode_reply(await read_body(reader))
            if isinstance(reply, Refused):
                # Someone else took our id while the registry was away: report, carry on.
                log.error("registry %s refused to restore %s: %s", self.url, self.node,
                          reply.reason)
        self._left -= left

    async def _back_off(self, delay: float) -> float:
        """Sleep `delay`, jittered; the next delay (doubled, capped)."""
        if not self._closed:
            await asyncio.sleep(delay * self._rng.uniform(0.75, 1.25))
        return min(delay * 2, self._max)

    async def _read_replies(self, reader: asyncio.StreamReader) -> bool:
        """Read replies until the connection ends; whether any reply came."""
        answered = False
        try:
            while True:
                body = await read_body(reader)
                answered = True
                try:
                    reply = decode_reply(body)
                except DecodeError as exc:
                    # Re-sending would get the same reply: fail that request, once.
                    self._unreadable(exc, reply_rid(body))
                    continue
                fut = self._pending.get(reply.rid)
                if fut is not None and not fut.done():
                    fut.set_result(reply)
        except asyncio.IncompleteReadError as exc:
            if not self._closed:
                # A clean close between messages is the registry's idle timeout (or its
                # shutdown): worth a line, not a warning; inside a message it is a loss.
                level = logging.INFO if not exc.partial else logging.WARNING
                log.log(level, "lost the registry %s (%s); reconnecting",
                        self.url, "closed" if not exc.partial else "truncated reply")
        except OSError as exc:
            if not self._closed:
                log.warning("lost the registry %s (%s); reconnecting",
                            self.url, type(exc).__name__)
        except DecodeError as exc:  # an oversize reply: the stream is lost, and so is its rid
            self._unreadable(exc, None)
        return answered

    def _unreadable(self, exc: DecodeError, rid: int | None) -> None:
        """A reply this client cannot read fails its request (every pending one when
        its rid is unknown) with one ConfigError, instead of a re-send loop for ever."""
        log.warning("registry %s sent a reply this client cannot read (%s)", self.url, exc)
        error = ConfigError(f"registry {self.url} sent a reply this client cannot read: {exc}")
        futures = list(self._pending.values()) if rid is None else [self._pending.get(rid)]
        for fut in futures:
            if fut is not None and not fut.done():
                fut.set_exception(error)
