"""`Group`: the application's handle on one process group — broadcast, and iterate over
deliveries in the order the group's ordering guarantees; create, join and leave it.

Rules: a group lives on a `Node` (its own, made from `transport`/`registry`/`node`, or a
shared one passed as `host`, since one node may host several groups, each with its own
ordering, all frames on the node's one transport). Three ways in:

- static (`Group(...).open()`): members fixed when it opens, either given
  (`node="n1", peers={"n2": "tcp://…"}`) or learned from the registry (join, then wait
  until the group's declared `size` have joined);
- `Group.create(name, ordering=…, registry=…)`: a dynamic group of one, this node its
  leader; the creator picks the ordering and its options, which the registry keeps;
- `Group.join(name, registry=…)`: finds the group (ordering, options, members) in the
  registry, starts a stack whose view holds only this node, asks the members to admit
  it and returns once a view holding it is installed, its state (if the group
  transfers state) set before that.

Both dynamic ways have one deadline, `join_timeout_s` (abcast.runtime.joining), over
every step that waits for the registry or the members: past it they raise TimeoutError.

`leave()` is graceful: the group installs a view without this node, then it closes.
`close()` is at once, in any phase (see docs/groups.md): while opening it ends the
opening (open() raises LocalProtocolError), and it takes this node off the registry's
record; its host node's `close()` closes it too. In a dynamic group the leader keeps the
registry's record right (abcast.runtime.registrar).
Addresses of members that join later are found through the registry
(abcast.runtime.node), so nothing but node ids travels with a join.

The application is told, besides deliveries (`on_deliver`, called on the loop in
delivery order, or a queue read by `deliveries()`; under ordering "optimistic" the
tentative ones go to `on_opt_deliver` or `deliveries(stage="optimistic")`):
`get_state()` when a joiner needs a snapshot, `set_state(state)` when this node joined,
`on_view(view)` for every view change (the last one, without this node, ends the group
here), and — in a group made with `partitions="evs"`, whose partitions go on apart and
merge on heal —
`merge_state(states)` when they merge (without it the side holding the lowest member
keeps its state). `await g.ended()` returns the reason once the group ended here (any
number of waiters); an app's `group_ended(why)` hears the same. `app=` takes one object
with those methods (a `ReplicatedHandle`: a replicated object's state then moves to
joiners with no more code). `broadcast` waits for the transport's backpressure
(`drain`) and for the channel's credit (`Stack.backpressured`: a link's queue of packets
waiting for its window past `ChannelConfig.max_waiting`) first; `broadcast_nowait`
waits for neither and raises `Backpressure` past the credit bound.

`secret=` makes it a secret group (its node's links and registry requests
authenticated; docs/operations.md, Security); a joiner without it is refused at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, Final, Protocol

import msgspec

from abcast.effects import Deliver
from abcast.errors import Backpressure, ConfigError, LocalProtocolError
from abcast.ids import MsgId, NodeId, View
from abcast.ordering.registry import OrderingOptions, build_stack, envelope_bytes, get_ordering
from abcast.ordering.ticket import TICKET_NODE
from abcast.registry.client import RegistryClient
from abcast.registry.messages import GroupInfo
from abcast.runtime.driver import AppHooks, GroupDriver
from abcast.runtime.joining import (
    GRACEFUL_LEAVE_TIMEOUT_S,
    JOIN_TIMEOUT_S,
    LEAVE_TIMEOUT_S,
    check_joinable,
    withdraw,
    within,
)
from abcast.runtime.node import Node
from abcast.runtime.registrar import RECHECK_S, Registrar
from abcast.runtime.stack_options import decode_options, encode_options, for_streams
from abcast.security import load_secret
from abcast.snapshot import LayerSnapshot
from abcast.trace.recorder import TraceRecorder
from abcast.transport import Transport

log: Final = logging.getLogger(__name__)

DEFAULT_TRANSPORT: Final = "tcp://127.0.0.1:0"


class GroupApp(Protocol):
    """An application object a group drives (`app=`): a `ReplicatedHandle`, say. It may
    also have `group_ended(why: str)`, called once when the group ends on this node
    (closed here, left, removed by the group, or its opening failed once the app was
    bound): nothing more will be delivered. `Group.ended()` returns the same `why`."""

    def on_deliver(self, delivery: Deliver) -> None: ...

    def get_state(self) -> bytes: ...

    def set_state(self, state: bytes) -> None: ...

    def bind(self, group: Any) -> None: ...


async def _await_credit(driver: GroupDriver) -> None:
    """Wait until no layer of the group's stack is backpressured. Polled, backing off
    from 1 ms to 50 ms: credit comes back with acks, through a transport handler that
    knows nothing of waiting broadcasts."""
    delay = 0.001
    while driver.stack.backpressured() and not driver.closed:
        await asyncio.sleep(delay)
        delay = min(delay * 2, 0.05)


class Group:
    """`async with Group("bank", ordering="sequencer", registry="tcp://127.0.0.1:7400",
    size=3) as g: await g.broadcast(b"deposit 300"); async for m in g.deliveries(): …`

    Dynamic: `g = await Group.create("chat", ordering="matrix", registry=url)`,
    `g = await Group.join("chat", registry=url)`, `await g.leave()`; the end here,
    awaited rather than polled: `why = await g.ended()`."""

    def __init__(
        self,
        name: str,
        *,
        ordering: str = "fifo",
        transport: str | Transport | None = None,
        registry: str | RegistryClient | None = None,
        node: NodeId | None = None,
        peers: Mapping[NodeId, str] | None = None,
        size: int | None = None,
        options: OrderingOptions | None = None,
        host: Node | None = None,
        recorder: TraceRecorder | None = None,
        wan: str | None = None,
        on_deliver: Callable[[Deliver], None] | None = None,
        join_timeout_s: float | None = None,
        get_state: Callable[[], bytes] | None = None,
        set_state: Callable[[bytes], None] | None = None,
        on_view: Callable[[View], None] | None = None,
        app: GroupApp | None = None,
        recheck_s: float = RECHECK_S,
        partitions: str | None = None,
        merge_state: Callable[[list[bytes]], bytes] | None = None,
        on_opt_deliver: Callable[[Deliver], None] | None = None,
        metrics_port: int | None = None,
        probe: bool | str = False,
        secret: bytes | str | None = None,
    ) -> None:
        if not isinstance(name, str) or not 1 <= len(name) <= 128:
            raise ConfigError(f"group name must be a 1..128 char string, got {name!r}")
        get_ordering(ordering)  # unknown names fail here, with the list of known ones
        if (host is not None and any(
            x is not None for x in (transport, registry, node, recorder, wan, metrics_port)
        )) or (host is not None and probe):
            raise ConfigError("give either host= (a running Node) or transport/registry/"
                              "node/recorder/wan/metrics_port/probe for a node of the "
                              "group's own, not both")
        if host is not None and load_secret(secret) not in (None, host.secret):
            raise ConfigError("secret= differs from the host node's: a node has one secret "
                              "(Node(..., secret=...)) for every group it hosts")
        if size is not None and size < 1:
            raise ConfigError(f"size must be >= 1, got {size}")
        if peers is not None:
            if size is not None and size != len(peers) + 1:
                raise ConfigError(f"size={size} but peers name {len(peers) + 1} members")
        elif registry is None and (host is None or host.registry is None):
            raise ConfigError(f"group {name!r} needs peers={{node: url}} or a registry")
        if host is None and registry is None and node is None:
            raise ConfigError("a group without a registry needs node= (this node's id)")
        if app is not None and any(
            x is not None for x in (on_deliver, get_state, set_state)
        ):
            raise ConfigError("give either app= or on_deliver/get_state/set_state, not both")
        if partitions is not None:
            # "evs": every partition goes on and they merge on heal (sequencer family);
            # the registry keeps it with the other options, so joiners run the same.
            options = dataclasses.replace(options or OrderingOptions(), partitions=partitions)
        if options is not None:
            get_ordering(ordering).check_options(options)
        self.name = name
        self.ordering = ordering
        self.options = options
        #: extended virtual synchrony: the application's state merge (the sides' states,
        #: the side holding the lowest member first); None keeps that side's state
        self._merge_state = merge_state
        self.size = size
        self._peers = dict(peers) if peers is not None else None
        self._app = app
        self._app_bound = False  # app.bind(self) returned: it hears group_ended
        self._end_why: str | None = None  # why the group ended here (see _end)
        self._ended = asyncio.Event()  # set with _end_why: what ended() waits for
        self._user_hook = app.on_deliver if app is not None else on_deliver
        self._opt_hook = on_opt_deliver
        #: opt-deliveries for deliveries(stage="optimistic"), when no on_opt_deliver
        self._opt_queue: asyncio.Queue[Deliver | None] | None = None
        self._get_state = app.get_state if app is not None else get_state
        self._set_state = app.set_state if app is not None else set_state
        self._on_view = on_view
        self._recheck_s = recheck_s
        self._join_timeout_s = join_timeout_s
        self._own_host = host is None
        self._host = host or Node(
            transport if transport is not None else DEFAULT_TRANSPORT,
            node=node, registry=registry, recorder=recorder, wan=wan,
            metrics_port=metrics_port, probe=probe, secret=secret,
        )
        self._driver: GroupDriver | None = None
        self._registered = False
        self._queue: asyncio.Queue[Deliver | None] | None = None
        self._waiting: set[str] = set()  # the stages a deliveries() reader is parked on
        self._mode = "static"  # static | create | join
        self._ordering_given: str | None = None  # join: the ordering the caller expects
        self._admitted: asyncio.Event | None = None
        self._departed: asyncio.Event | None = None
        self._registrar: Registrar | None = None
        self.removed_view: View | None = None  # the view without this node, if any
        self.refused: str | None = None  # why the registry stopped taking our record
        self._state = "new"
        self._opener: asyncio.Task[None] | None = None  # opening: what close() cancels
        self._open_over = asyncio.Event()
        self._close_asked = False  # close() came while opening: open() raises

    # ----------------------------------------------------------------- dynamic groups

    @classmethod
    async def create(cls, name: str, *, ordering: str, **kwargs: Any) -> Group:
        """A new dynamic group of one (this node, its leader), registered under `name`;
        ConfigError if the registry already has a group of that name, TimeoutError if
        the registry has not answered within `join_timeout_s` (JOIN_TIMEOUT_S)."""
        group = cls(name, ordering=ordering, **kwargs)
        group._mode = "create"
        return await group.open()

    @classmethod
    async def join(cls, name: str, *, ordering: str | None = None, **kwargs: Any) -> Group:
        """Join the dynamic group `name` as the registry describes it (ordering and
        options from its creator; passing `ordering` only checks it). Returns once a
        view holding this node is installed."""
        group = cls(name, ordering=ordering or "fifo", **kwargs)
        group._mode = "join"
        group._ordering_given = ordering
        return await group.open()

    # ----------------------------------------------------------------- lifecycle

    async def open(self) -> Group:
        """Open (create, join) the group; a `close()` meanwhile makes it raise."""
        if self._state != "new":
            raise LocalProtocolError(f"group {self.name!r} already {self._state}")
        self._state = "opening"
        host = self._host
        reserved = False
        try:
            if self._own_host:
                await host.start()
            host.reserve(self.name, self.close)  # held frames; Node.close() closes us too
            reserved = True
            if self._close_asked:  # came while the own node started
                raise self._closed_while_opening()
            if self._peers is not None:
                await self._open_steps(host)  # static, members given: never waits (below)
            else:
                # Steps that wait (registry, admission): a task close() can cancel, not the
                # caller (a task's loop turn would drop early frames of the static ones).
                self._opener = asyncio.get_running_loop().create_task(
                    self._open_steps(host), name=f"open-{self.name}")
                await self._opener
            if self._close_asked:  # as the steps were done
                raise self._closed_while_opening()
        except BaseException as exc:
            # Said first: no waiter depends on the cleanup below (slow, or failing).
            self._end(self._why_not_opened(exc))
            if reserved:
                host.unreserve(self.name)
            await self._stop_registrar()
            if self._driver is not None:
                host.detach(self.name)
            await self._leave_registry()
            if self._own_host:
                await host.close()
            self._state = "closed"
            current = asyncio.current_task()
            if (self._close_asked and isinstance(exc, asyncio.CancelledError)
                    and current is not None and not current.cancelling()):
                raise self._closed_while_opening() from None
            raise
        finally:
            self._opener = None
            self._open_over.set()
        self._state = "open"
        return self

    def _closed_while_opening(self) -> LocalProtocolError:
        return LocalProtocolError(f"group {self.name!r} was closed while opening")

    def _why_not_opened(self, exc: BaseException) -> str:
        if self._close_asked:
            return "the group was closed here while opening"
        if isinstance(exc, asyncio.CancelledError):
            return "the group's opening was cancelled"
        return f"the group did not open: {type(exc).__name__}: {exc}"

    async def _open_steps(self, host: Node) -> None:
        if self._app is not None and self._mode != "join":
            self._app.bind(self)  # a joiner binds once the registry named the ordering
            self._app_bound = True
        if self._user_hook is None:
            self._queue = asyncio.Queue()
        if self._opt_hook is None:
            self._opt_queue = asyncio.Queue()
        if self._mode == "static":
            await self._open_static(host)
        elif self._mode == "create":
            await self._open_created(host)
        else:
            await self._open_joined(host)

    async def _open_static(self, host: Node) -> None:
        async with asyncio.timeout(self._join_timeout_s):
            members = await self._members(host)
        host.add_peers(members)
        self._attach(host, View(1, tuple(members)))

    def _attach(self, host: Node, view: View) -> GroupDriver:
        transport = host.transport
        options = for_streams(self.options, transport.scheme, transport.max_frame_bytes,
                              transport.datagram_frame_bytes, envelope_bytes(self.name, host.id))
        if self.ordering == "ticket" and options.ticket:
            host.pin_peer(TICKET_NODE, options.ticket)  # the group's ticket server
        stack = build_stack(host.id, self.name, self.ordering, view, options)
        hooks = AppHooks(get_state=self._get_state, set_state=self._set_state,
                         on_view=self._view_installed, on_removed=self._removed,
                         merge_state=self._merge_state)
        self._admitted = asyncio.Event()
        self._departed = asyncio.Event()
        # the application's callbacks (or queues) straight to the driver: no forwarding
        # call per delivery (at saturation one was ~5 % of a node's time)
        final = self._user_hook if self._user_hook is not None else self._queue_of("final")
        optimistic = self._opt_hook if self._opt_hook is not None else self._queue_of(
            "optimistic")
        self._driver = GroupDriver(host, stack, final, hooks, on_opt_deliver=optimistic)
        self._driver.config = {"ordering": self.ordering,
                               "options": msgspec.to_builtins(for_streams(self.options))}
        host.attach(self._driver)
        return self._driver

    def _dynamic_registry(self, host: Node) -> RegistryClient:
        if host.registry is None:
            raise ConfigError(f"a dynamic group ({self.name!r}) needs a registry")
        if self._peers is not None or self.size is not None:
            raise ConfigError("peers= and size= are for static groups, not create/join")
        return host.registry

    def _deadline(self) -> tuple[float, float]:
        """A dynamic open's one deadline (joining.within) and the timeout it is made of."""
        timeout_s = self._join_timeout_s or JOIN_TIMEOUT_S
        return asyncio.get_running_loop().time() + timeout_s, timeout_s

    async def _open_created(self, host: Node) -> None:
        registry = self._dynamic_registry(host)
        options = encode_options(self.options)
        self._attach(host, View(1, (host.id,)))
        # Maybe listed once the Announce is sent: closing (a failed open too) leaves,
        # unless the registry refused it (nothing stored).
        self._registered = True
        try:
            async with within(*self._deadline(), f"the registry {registry.url} did not answer"):
                await registry.announce(self.name, self.ordering, 1, {host.id: host.address},
                                        create=True, options=options)
        except ConfigError:
            self._registered = False
            raise
        self._start_registrar(registry, options)

    async def _open_joined(self, host: Node) -> None:
        registry = self._dynamic_registry(host)
        deadline = self._deadline()  # one for finding the group and being admitted
        async with within(*deadline, f"the registry {registry.url} did not answer"):
            info = await registry.lookup(self.name)
        check_joinable(self.name, info, host.id, host.secret is not None,
                       self._ordering_given)
        self.ordering = info.ordering
        if self.options is None:
            self.options = decode_options(info.options)
        if self._app is not None:
            self._app.bind(self)
            self._app_bound = True
        contacts = self._contacts(host, info)
        driver = self._attach(host, View(0, (host.id,)))
        driver.join(contacts)
        assert self._admitted is not None and self._departed is not None
        log.info("%s asks %s to join %s", host.id, ",".join(contacts), self.name)
        try:
            async with within(*deadline, f"the members of {self.name!r} asked "
                              f"({','.join(contacts)}) did not admit {host.id}"):
                await self._admitted.wait()
        except BaseException:
            await self._abandon_join(driver, contacts)
            raise
        self._registered = True  # listed by the leader: closing takes this node off
        self._start_registrar(registry, info.options or encode_options(self.options))

    async def _abandon_join(self, driver: GroupDriver, contacts: tuple[NodeId, ...]) -> None:
        """The join was given up: leave nothing behind in the group (joining.withdraw)."""
        assert self._admitted is not None and self._departed is not None
        await withdraw(driver, self._host.transport, contacts, self._admitted.is_set(),
                       self._departed)

    def _contacts(self, host: Node, info: GroupInfo) -> tuple[NodeId, ...]:
        host.add_peers({m: url for m, url in info.members.items() if m != host.id})
        # The leader first: it is the likeliest to be alive (it keeps the record fresh).
        return tuple(m for m in info.members if m != host.id)

    def _start_registrar(self, registry: RegistryClient, options: bytes) -> None:
        host = self._host
        self._registrar = Registrar(
            registry, self.name, self.ordering, options, host.id, host.address,
            lambda: self._require_driver_any().stack.view, host.peer_url,
            recheck_s=self._recheck_s, on_refused=self._refused,
        )
        self._registrar.start()

    async def _stop_registrar(self) -> None:
        registrar, self._registrar = self._registrar, None
        if registrar is not None:
            await registrar.stop()

    async def leave(self) -> None:
        """Leave gracefully: the group installs a view without this node (what this node
        sent before is delivered everywhere), then the group closes here. For an ordering
        that cannot leave gracefully this is `close()`. The last member of a dynamic group
        removes it from the registry as it leaves."""
        driver = self._require_driver()
        departed = self._departed
        last = self._mode != "static" and driver.stack.view.members == (self.node,)
        if self.removed_view is not None:
            pass  # the group already went on without us
        elif "leave" in get_ordering(self.ordering).tolerates and departed is not None:
            driver.leave()
            try:
                async with asyncio.timeout(GRACEFUL_LEAVE_TIMEOUT_S):
                    await departed.wait()
            except TimeoutError:
                log.warning("%s: the leave from %s was not confirmed in %.0f s; closing",
                            self.node, self.name, GRACEFUL_LEAVE_TIMEOUT_S)
        registry = self._host.registry
        if last and registry is not None and registry.connected:
            await self._stop_registrar()
            with contextlib.suppress(Exception):
                async with asyncio.timeout(LEAVE_TIMEOUT_S):
                    await registry.remove(self.name)
        await self.close()

    async def close(self) -> None:
        """Close the group here at once, in any phase (the module's rules)."""
        if self._departed is not None:
            self._departed.set()  # a leave() or abandoned join waiting: nothing comes now
        if self._state == "opening":
            self._close_asked = True
            if self._opener is not None:
                self._opener.cancel()
            await self._open_over.wait()
        if self._state in ("closed", "new"):
            self._state = "closed"
            self._end("the group was closed here")  # never opened (or ended already)
            return
        self._state = "closed"
        await self._stop_registrar()
        self._host.detach(self.name)
        self._end("the group was closed here")
        await self._leave_registry()
        if self._own_host:
            await self._host.close()

    async def __aenter__(self) -> Group:
        if self._state == "new":
            return await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def _members(self, host: Node) -> dict[NodeId, str]:
        if self._peers is not None:
            return {host.id: host.address, **self._peers}
        registry = host.registry
        if registry is None:
            raise ConfigError(f"group {self.name!r} needs peers or a registry")
        self._registered = True
        info = await registry.join(self.name, host.address, self.size)
        if info.size is None:
            raise ConfigError(
                f"group {self.name!r} has no declared size yet: pass size=N (the first "
                "member to join fixes it; the view needs its members up front)"
            )
        self.size = info.size
        if len(info.members) < info.size:
            log.info("%s waits for %d members of %s (has %d)", host.id, info.size,
                     self.name, len(info.members))
            info = await registry.wait_members(self.name, info.size)
        return dict(info.members)

    async def _leave_registry(self) -> None:
        registry = self._host.registry
        if not self._registered or registry is None:
            return
        self._registered = False
        if registry.connected:
            with contextlib.suppress(Exception):
                async with asyncio.timeout(LEAVE_TIMEOUT_S):
                    await registry.leave(self.name)
                return
        registry.forget(self.name)  # away or slow: told (not re-joined) when reached again

    # ----------------------------------------------------------------- membership events

    def _view_installed(self, view: View) -> None:
        if self._mode == "join" and view.view_id == 0:
            return  # the joiner's own starting view, before the group admitted it
        if self._admitted is not None:
            self._admitted.set()
        if self._registrar is not None:
            self._registrar.view_changed()
        self._host.prune_later()
        if self._on_view is not None:
            self._on_view(view)

    def _removed(self, view: View, graceful: bool) -> None:
        self.removed_view = view
        if not graceful:
            log.warning("%s was removed from %s by the group (view %d)", self.node,
                        self.name, view.view_id)
        if self._departed is not None:
            self._departed.set()
        asyncio.get_running_loop().call_soon(self._host.detach, self.name)
        self._end("this member left the group" if graceful
                  else "the group removed this member")
        if self._registrar is not None:
            # The next leader announces the view without us; we stop at once.
            asyncio.get_running_loop().create_task(self._stop_registrar())
        if self._on_view is not None:
            self._on_view(view)

    def _refused(self, reason: str) -> None:
        self.refused = reason

    def _end(self, why: str) -> None:
        """The group ended here (closed, left, removed, or its opening failed), said once
        on every one of those paths: `deliveries()` ends, `ended()` returns `why`, and a
        bound `app=` object with `group_ended` hears it (an app a failed join never
        bound served no group: it stays usable)."""
        if self._end_why is not None:
            return
        self._end_why = why
        for queue in (self._queue, self._opt_queue):
            if queue is not None:
                queue.put_nowait(None)  # deliveries() ends: nothing more comes here
        self._ended.set()
        hook = getattr(self._app, "group_ended", None) if self._app_bound else None
        if callable(hook):
            try:
                hook(why)
            except Exception:
                log.exception("%s on %s: the app's group_ended raised", self.name, self.node)

    # ----------------------------------------------------------------- the API

    @property
    def host(self) -> Node:
        return self._host

    @property
    def node(self) -> NodeId:
        """This node's id."""
        return self._host.id

    @property
    def view(self) -> View:
        return self._require_driver().stack.view

    @property
    def members(self) -> tuple[NodeId, ...]:
        return self.view.members

    @property
    def leader(self) -> NodeId:
        return self.view.leader

    @property
    def driver(self) -> GroupDriver:
        return self._require_driver()

    def inspect(self) -> list[LayerSnapshot]:
        """This node's stack for the group, layer by layer, bottom first (read-only)."""
        return self._require_driver_any().stack.inspect()

    @property
    def registrar(self) -> Registrar | None:
        return self._registrar

    @property
    def active(self) -> bool:
        """Open and still a member (not removed, not departed)."""
        return self._state == "open" and self.removed_view is None

    @property
    def delivered(self) -> int:
        """Messages delivered (final stage) so far on this node."""
        return self._driver.delivered if self._driver is not None else 0

    async def broadcast(self, payload: bytes) -> MsgId:
        """Broadcast `payload` to the group (this node delivers it too, in order)."""
        driver = self._require_driver()
        await self._host.drain()
        await _await_credit(driver)
        return MsgId(self._host.id, self._require_driver().broadcast(bytes(payload)))

    def broadcast_nowait(self, payload: bytes) -> MsgId:
        """Broadcast without waiting for backpressure (callbacks, closed loops); raises
        `Backpressure` while the group's channel is past its credit bound."""
        driver = self._driver
        if driver is None or self._state != "open":
            driver = self._require_driver()  # raises
        if driver.backpressured():
            raise Backpressure(
                f"group {driver.name!r} on {self._host.id}: backpressured (a link's credit "
                "queue is full, or this member's broadcasts not yet stable reached "
                "max_unstable: a slow member); await broadcast() instead")
        if type(payload) is not bytes:
            payload = bytes(payload)  # (bytes(b) of a bytes object is a call for nothing)
        return MsgId(driver.stack.node, driver.broadcast(payload))

    def send_queued(self) -> None:
        """Send this loop turn's broadcasts now (still as one batch) instead of at the end
        of the turn: for a sender that knows its burst is over. Inside a delivery
        callback it waits for the end of the turn all the same."""
        self._require_driver().send_queued()

    async def deliveries(self, stage: str = "final") -> AsyncIterator[Deliver]:
        """Every delivery, in delivery order, until the group closes: the final ones, or
        with stage="optimistic" the tentative ones (ordering "optimistic")."""
        if stage not in ("final", "optimistic"):
            raise LocalProtocolError(f"stage must be 'final' or 'optimistic', not {stage!r}")
        queue = self._queue if stage == "final" else self._opt_queue
        if queue is None:
            hook = "on_deliver" if stage == "final" else "on_opt_deliver"
            raise LocalProtocolError(
                f"deliveries(stage={stage!r}) needs an open group made without {hook}= "
                f"(with {hook}, deliveries go to that callback)"
            )
        waiting = self._waiting
        while True:
            if not queue.empty():
                item = queue.get_nowait()
            else:
                # One reader per stage: a second would take some of the deliveries and
                # both would miss the rest. Counted while parked, so an iterator left by
                # `break` (finalized later) does not count; of two readers one fails.
                if stage in waiting:
                    raise LocalProtocolError(
                        f"group {self.name!r}: deliveries(stage={stage!r}) already has a "
                        "reader; a second would take some of the deliveries and both "
                        "would miss the rest: read them in one place and hand them on")
                waiting.add(stage)
                try:
                    item = await queue.get()
                finally:
                    waiting.discard(stage)
            if item is None:
                queue.put_nowait(None)  # let an iterator started later end too
                return
            yield item

    async def ended(self) -> str:
        """Wait for the group's end on this node; why: "the group was closed here", "this
        member left the group", "the group removed this member", or what stopped its
        opening (what `group_ended` hears). At once if it already ended; any number of
        waiters, one cancelled leaves the others (a close() may still be finishing)."""
        await self._ended.wait()
        assert self._end_why is not None
        return self._end_why

    def _queue_of(self, stage: str) -> Callable[[Deliver], None]:
        """Where `deliveries(stage)` reads from (made by `open` when there is no hook)."""
        queue = self._queue if stage == "final" else self._opt_queue
        if queue is None:
            raise LocalProtocolError(f"group {self.name!r}: no {stage} deliveries queue")
        return queue.put_nowait

    def _require_driver(self) -> GroupDriver:
        if self._driver is None or self._state != "open":
            raise LocalProtocolError(f"group {self.name!r} is {self._state}, not open")
        return self._driver

    def _require_driver_any(self) -> GroupDriver:
        if self._driver is None:
            raise LocalProtocolError(f"group {self.name!r} has no stack yet")
        return self._driver
