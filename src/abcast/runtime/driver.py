"""`GroupDriver`: one group's stack on a running node, and the carrying-out of its outputs.

Rules: this is the real-time twin of the simulator's `SimNode` (abcast.sim.cluster). It
turns `Transmit` into transport sends (through its `Node`), `SetTimer`/`CancelTimer` into
loop timers (`SetTimer.at` is absolute µs on the node's monotonic clock; lazily: a key
moved later or cancelled keeps its loop timer, which re-arms or lapses when it fires:
measured, that saves about 2 `call_later` and 2 `cancel` per message), and
`Deliver`/`InstallView` into trace rows and application deliveries, writing the same
rows as the simulator: a `send` row per message as it leaves with `deps` taken from this
node's delivered prefixes, a `deliver`/`opt_deliver` row per delivery, a `view` row per
installed view, all with t_ns = time.time_ns(). The rows of a batch's messages are
recorded as one run (TraceRecorder.record_run; t_ns counted up from the batch's), a
delivered batch's rows up to each callback before anything that callback does.
`receive` carries out a frame's outputs even when a layer refused the packet (what the
layers below it did with the frame stands: `Stack.receive`), then raises the refusal
(RemoteProtocolError, DecodeError included), so the caller drops the link that sent it.

State transfer and membership go to the application through `AppHooks`, each at its
exact place among the stack's outputs (outputs are carried out one at a time, in order,
except that protocol packets go ahead of the deliveries and timers before them):
`TakeSnapshot` is answered at once with `get_state()` (so the snapshot holds exactly the
deliveries before it), `InstallState` calls `set_state(state)` before any delivery
after it (a state for a node that was already a member — one the group cut off and
admitted again — writes `crash` and `recover` rows first, as the simulator does),
`InstallView` calls `on_view(view)`. A view without this node ends the
group here, as in the simulator: after a `leave()` that is a graceful departure, else
the group gave up on this node (a peer's `NotifyExcluded` makes the ordering install
such a view) and it must stop (the Isis rule; a `crash` row is written, as the
simulator does); either way `on_removed(view, graceful)` is called and the driver
closes. It knows nothing about sockets, registries or the application API.

Batching (abcast.batching): `broadcast` queues the payload and numbers it at once; the
queued broadcasts leave as one ordered message at the end of the loop turn (`call_soon`),
or earlier when the batch is full or the sender calls `send_queued`, and every member
unpacks a delivered batch into one delivery per message. A burst of broadcasts in one
turn therefore costs the ordering one message, and a lone broadcast waits one loop turn
at most. `join`, `leave` and `close` send what is queued first; `send` rows are written
when a batch leaves. A batch that does not unpack is logged and skipped — every member
skips it alike, so their sequences stay equal.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final, Protocol

from abcast.batching import Batcher, batch_deliveries, unpack_batch
from abcast.codec import Envelope
from abcast.effects import (
    CancelTimer,
    Deliver,
    InstallState,
    InstallView,
    MergeStates,
    Output,
    SetTimer,
    Stage,
    TakeSnapshot,
    Transmit,
)
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.ids import NodeId, View
from abcast.runtime.loop import MonotonicClock
from abcast.stack import Stack
from abcast.trace.recorder import DeliveredPrefix, TraceRecorder

if TYPE_CHECKING:
    from abcast.runtime.metrics import GroupMeter

DeliverHook = Callable[[Deliver], None]
#: an Enum member lookup costs ~0.17 µs on CPython 3.11: read once, not per batch
_FINAL: Final = Stage.FINAL

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class AppHooks:
    """What the application is told besides deliveries (every field optional).

    `get_state` answers a snapshot for a joiner (a group that can be joined needs it,
    else joiners start empty); `set_state` installs a joiner's starting state (and a
    merge view's merged state); `merge_state(states)` merges the states partitions
    reached apart (`partitions="evs"`; the side holding the lowest member first —
    without it that side's state is kept);
    `on_view` hears every installed view this node is in; `on_removed(view, graceful)`
    hears the view that no longer holds this node (graceful: after its own leave)."""

    get_state: Callable[[], bytes] | None = None
    set_state: Callable[[bytes], None] | None = None
    on_view: Callable[[View], None] | None = None
    on_removed: Callable[[View, bool], None] | None = None
    merge_state: Callable[[list[bytes]], bytes] | None = None


NO_HOOKS = AppHooks()


class Host(Protocol):
    """What a driver needs from the node hosting it."""

    @property
    def id(self) -> NodeId: ...

    @property
    def clock(self) -> MonotonicClock: ...

    @property
    def recorder(self) -> TraceRecorder | None: ...

    def transmit(self, dst: NodeId, data: bytes) -> None: ...

    def transmit_many(self, dsts: tuple[NodeId, ...], data: bytes) -> int: ...

    def transmit_run(self, run: list[Transmit]) -> int: ...


class GroupDriver:
    def __init__(
        self, host: Host, stack: Stack, on_deliver: DeliverHook | None = None,
        hooks: AppHooks = NO_HOOKS, on_opt_deliver: DeliverHook | None = None,
    ) -> None:
        if stack.node != host.id:
            raise LocalProtocolError(f"stack of {stack.node} driven by node {host.id}")
        self.host = host
        self.stack = stack
        # The view as the application has seen it so far: outputs of one stack call may
        # deliver in the old view and then install a new one, and each row must say which.
        self.view_id = stack.view.view_id
        self.name = stack.group
        self.on_deliver = on_deliver
        #: the optimistic (tentative) deliveries' callback; None: `on_deliver` gets them too
        self.on_opt_deliver = on_opt_deliver if on_opt_deliver is not None else on_deliver
        self.hooks = hooks
        self.leaving = False
        self.removed: View | None = None  # the view without this node, once installed
        self.snapshots = 0  # states handed to joiners
        self.rejoins = 0  # times this node was admitted again after being cut off
        self.prefix = DeliveredPrefix()
        self.delivered = 0  # FINAL deliveries
        self.opt_delivered = 0  # optimistic (early) deliveries
        self.views = 0  # views installed here
        #: what the group was opened with (ordering, options), for `abcast probe`
        self.config: dict[str, object] = {}
        #: latency and batch-size samples, only while metrics are on (abcast.runtime.metrics)
        self.meter: GroupMeter | None = None
        self.protocol_packets = 0
        self.control_packets = 0
        self.closed = False
        self.bad_batches = 0  # delivered batches that did not unpack (skipped)
        self.app_errors = 0  # application callbacks that raised (see _app_failed)
        self._batcher = Batcher()
        #: the native lane's broadcast step, when the node runs it for this group
        #: (abcast.runtime.lane); None: the stack's
        self.lane_broadcast: Callable[[Stack, bytes, int], list[Output] | None] | None = None
        #: carry_out(driver, outputs, now): `received` for a lane step's outputs, its
        #: packets written by C where tcp:// would write them at once (abcast.runtime.lane)
        self.lane_carry_out: Callable[[GroupDriver, list[Output], int], None] | None = None
        #: backpressured(stack) -> bool | None: `stack.backpressured()` in C for the lane's
        #: stack shape (abcast.runtime.lane)
        self.lane_backpressured: Callable[[Stack], bool | None] | None = None
        self._flush_scheduled = False  # a `_flush_soon` is due at the end of this turn
        self._applying = False  # carrying out a stack call's outputs (see send_queued)
        #: stack.backpressured() as of the stack's last step; None: not asked since
        self._pressure: bool | None = None
        self._timers: dict[Hashable, _Timer] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self._delivering: _DeliveredRun | None = None  # traced: the batch being delivered

    # ----------------------------------------------------------------- driving the stack

    def start(self) -> None:
        """Install the initial view (on the running loop)."""
        self._loop = asyncio.get_running_loop()
        self._apply(self.stack.start(self.host.clock.now_us()))

    @property
    def broadcasts(self) -> int:
        """Messages this node has broadcast in the group (queued ones included)."""
        return self._batcher.broadcasts

    def broadcast(self, payload: bytes) -> int:
        """Queue a broadcast for the end of this loop turn; returns this node's sequence
        number for the message."""
        if self.closed:
            raise LocalProtocolError(f"group {self.name!r} is closed on {self.host.id}")
        loop = self._loop
        if loop is None:
            raise LocalProtocolError(f"group {self.name!r} is not running on {self.host.id}")
        batcher = self._batcher
        seq = batcher.add(payload)
        if batcher.full:
            self.flush()
        elif not self._flush_scheduled:
            self._flush_scheduled = True
            loop.call_soon(self._flush_soon)
        return seq

    def backpressured(self) -> bool:
        """Whether a layer of the stack is backpressured (`Stack.backpressured`), asked
        once per stack step: the layers' state changes only when the stack is stepped, and
        every step of this driver's stack ends in `_apply`, which forgets the answer. So a
        turn's burst of `broadcast_nowait` asks the layers once, not once per message."""
        pressure = self._pressure
        if pressure is None:
            lane = self.lane_backpressured  # the native lane's answer (abcast.runtime.lane)
            answer = lane(self.stack) if lane is not None else None
            pressure = self._pressure = (self.stack.backpressured() if answer is None
                                         else answer)
        return pressure

    def send_queued(self) -> None:
        """Hand this turn's queued broadcasts to the ordering now instead of at the end of
        the turn: a sender that knows its burst is over saves a loop turn (the open-loop
        pacer does). From inside an application callback it does nothing: the stack is
        then past outputs the driver has not carried out yet, so a send row written now
        could name a view or deliveries the application has not seen.

        Not done for every broadcast: sending a turn's first broadcast at once was
        measured to halve a closed loop's throughput on this 2-core machine (n = 3)
        and to gain nothing on a lone message."""
        if not self._applying:
            self.flush()

    def flush(self) -> None:
        """Hand every queued broadcast to the ordering now.

        The `send` rows are written here, not in `broadcast`: frames handled between the
        two may deliver messages or install a view, and a message's row must name the
        view it was really sent in and the deliveries it really follows."""
        batcher, stack, clock = self._batcher, self.stack, self.host.clock
        if self._delivering is not None:  # called from a delivery callback (broadcast,
            self._write_delivered()  # join, leave, close): the rows delivered so far first
        while not self.closed:
            batch = batcher.take()
            if batch is None:
                return
            recorder = self.host.recorder
            if recorder is not None:
                node = stack.node
                recorder.record_run(node, "send", time.time_ns(), origin=node,
                                    first_seq=batch.first,
                                    sizes=list(map(len, batch.payloads)),
                                    group=self.name, view_id=self.view_id,
                                    deps=self.prefix.deps(node))
            now = clock.now_us()
            if self.meter is not None:
                self.meter.sent(batch.first, len(batch.payloads), now)
            lane = self.lane_broadcast  # the native lane first (abcast.runtime.lane)
            outputs = lane(stack, batch.data, now) if lane is not None else None
            if outputs is None:
                _, outputs = stack.broadcast(batch.data, now)
            elif self.lane_carry_out is not None and self.meter is None:
                self.lane_carry_out(self, outputs, now)  # its packets written by C
                continue
            self._apply(outputs)

    def _flush_soon(self) -> None:
        self._flush_scheduled = False
        self.flush()

    def join(self, contacts: tuple[NodeId, ...]) -> None:
        """Ask to be admitted through any of `contacts`; the stack was built with a view
        holding only this node. (An ordering that cannot admit members ignores it, which
        is why `Group.join` checks the ordering's `tolerates` first.)"""
        self._require_running()
        self.flush()
        self._apply(self.stack.join(contacts, self.host.clock.now_us()))

    def leave(self) -> None:
        """Start a graceful leave; `on_removed(view, True)` says when it is done."""
        self._require_running()
        self.leaving = True
        self.flush()
        self._apply(self.stack.leave(self.host.clock.now_us()))

    def abandon_join(self) -> None:
        """Give a join up (Group.join timed out): the stack withdraws its ask, or leaves
        if it was admitted meanwhile."""
        self._require_running()
        self.flush()
        self._apply(self.stack.abandon_join(self.host.clock.now_us()))

    def _require_running(self) -> None:
        if self._loop is None or self.closed:
            raise LocalProtocolError(f"group {self.name!r} is not running on {self.host.id}")

    def receive(self, env: Envelope) -> None:
        """One frame of this group; its outputs are carried out, then RemoteProtocolError
        is raised if a layer refused it."""
        now = self.host.clock.now_us()
        outputs, refused = self.stack.receive(env, now)
        self.received(outputs, now)
        if refused is not None:
            raise refused

    def received(self, outputs: list[Output], now: int) -> None:
        """Carry out a frame's outputs: the stack's, or the native lane's
        (abcast.runtime.lane) for a frame it stepped at `now`."""
        self._apply(outputs)
        meter = self.meter  # metrics on: a flush begins after a frame or a timer
        if meter is not None and now >= meter.look_at:
            meter.watch(self.stack.top, now)

    def close(self) -> None:
        if not self.closed and self.removed is None:
            self.flush()  # what was broadcast before close() is not lost in the queue
        self.closed = True
        for timer in self._timers.values():
            timer.handle.cancel()
        self._timers.clear()

    @property
    def retransmissions(self) -> int:
        return sum(getattr(layer, "retransmissions", 0) for layer in self.stack.layers)

    # ----------------------------------------------------------------- outputs

    def _apply(self, outputs: list[Output]) -> None:
        self._pressure = None  # the stack was just stepped (see backpressured)
        if self.closed:
            return
        applying, self._applying = self._applying, True
        try:
            self._carry_out(outputs)
        finally:
            self._applying = applying

    def _carry_out(self, outputs: list[Output]) -> None:
        """One at a time, in order, except that protocol `Transmit`s go ahead of the
        deliveries and timers before them: the stack emits a delivery (and the timers of
        the layers above) as soon as a layer decides it, and the packets announcing it
        only once they have come down every layer, so carrying them out in order would
        make the whole group wait for this node's application callback and timer
        bookkeeping (at the sequencer ~20 µs of a lone message's ~170). Nothing the
        application sees moves: deliveries keep their order and still come before any
        view, state, snapshot or control packet after them, and timers keep theirs.

        Each run of protocol packets goes to the host in one call (`Host.transmit_run`):
        a peer's packets of one step leave in one write, before anything else is
        carried out."""
        host = self.host
        run: list[Transmit] = []  # protocol packets, sent before anything else
        held: list[Output] = []  # deliveries and timers waiting for the packets after them
        for out in outputs:
            if self.closed:
                return  # removed from the group by an earlier output of this batch
            kind = type(out)
            if kind is Transmit and not out.control:  # type: ignore[union-attr]
                run.append(out)  # type: ignore[arg-type]
                continue
            if kind is Deliver or kind is SetTimer or kind is CancelTimer:
                held.append(out)
                continue
            if run:
                self.protocol_packets += host.transmit_run(run)
                run = []
            if held and not self._carry_out_held(held):
                return
            match out:
                case Transmit(to, data):  # a control packet (acks, retransmissions)
                    if len(to) == 1:
                        self.control_packets += 1
                        host.transmit(to[0], data)
                    else:
                        self.control_packets += host.transmit_many(to, data)
                case Deliver() | SetTimer() | CancelTimer():  # a subclass: no holding
                    self._carry_out_held([out])
                case InstallView(view) if host.id not in view.members:
                    self._removed(view)
                case InstallView(view):
                    self.view_id = view.view_id
                    self.views += 1
                    if self.meter is not None:
                        self.meter.view_installed(host.clock.now_us())
                    log.info("view %d installed: %s", view.view_id, ",".join(view.members),
                             extra={"node": host.id, "group": self.name,
                                    "view": view.view_id, "event": "view"})
                    recorder = host.recorder
                    if recorder is not None:
                        recorder.record(
                            host.id, "view", time.time_ns(), group=self.name,
                            view_id=view.view_id, members=view.members,
                        )
                    if self.hooks.on_view is not None:
                        try:
                            self.hooks.on_view(view)
                        except Exception as exc:
                            self._app_failed("on_view", exc)
                case TakeSnapshot(token):
                    state = self._app_state()
                    if state is not None:  # else not answered: see _app_failed
                        self.snapshots += 1
                        self._apply(self.stack.snapshot_taken(token, state,
                                                              host.clock.now_us()))
                case MergeStates(token, states):
                    merged = self._merged_state(states)
                    self._apply(self.stack.states_merged(token, merged, host.clock.now_us()))
                case InstallState(state, merged):
                    if self.view_id > 0 and not merged:
                        self._rejoined()
                    if self.hooks.set_state is not None:
                        try:
                            self.hooks.set_state(state)
                        except Exception as exc:
                            self._app_failed("set_state", exc)
        if run:
            self.protocol_packets += host.transmit_run(run)
        if held:
            self._carry_out_held(held)

    def _carry_out_held(self, held: list[Output]) -> bool:
        """Carry out (and clear) the held deliveries and timers, in their order; False
        once the group is closed."""
        for out in held:
            if self.closed:
                return False
            kind = type(out)
            if kind is Deliver:
                self._deliver(out)  # type: ignore[arg-type]
            elif kind is SetTimer:
                self._set_timer(out.key, out.at)  # type: ignore[union-attr]
            else:
                self._cancel_timer(out.key)  # type: ignore[union-attr]
        held.clear()
        return not self.closed

    def _deliver(self, delivered: Deliver) -> None:
        """Hand the application the messages of one delivered batch, one `Deliver` each,
        in order (the untraced path makes each as it goes: no list, no per-message
        bookkeeping beyond the count)."""
        try:
            batch = unpack_batch(delivered)
        except RemoteProtocolError as exc:
            self.bad_batches += 1
            log.error("group %s on %s: skipping a delivered message: %s",
                      self.name, self.host.id, exc)
            return
        host = self.host
        origin, stage, first, payloads = (delivered.origin, delivered.stage, batch.first,
                                          batch.payloads)
        final = stage is _FINAL
        meter = self.meter
        if meter is not None and final and origin == host.id:
            meter.delivered(first, host.clock)
        if host.recorder is not None:
            self._deliver_traced(batch_deliveries(batch, origin, stage), final)
            return
        on_deliver = self.on_deliver if final else self.on_opt_deliver
        if on_deliver is None:  # nothing can close the group in between: count them all
            if final:
                self.delivered += len(payloads)
            else:
                self.opt_delivered += len(payloads)
        elif final:
            for seq, payload in enumerate(payloads, first):
                self.delivered += 1
                try:
                    on_deliver(Deliver(origin, seq, payload, stage))
                except Exception as exc:
                    self._app_failed("on_deliver", exc)
                if self.closed:
                    return  # the application closed the group from its delivery callback
        else:
            for seq, payload in enumerate(payloads, first):
                self.opt_delivered += 1
                try:
                    on_deliver(Deliver(origin, seq, payload, stage))
                except Exception as exc:
                    self._app_failed("on_opt_deliver", exc)
                if self.closed:
                    return

    def _deliver_traced(self, deliveries: list[Deliver], final: bool) -> None:
        """`_deliver` on a traced node: each delivery's row is due before its callback
        runs (written per batch by `_write_delivered`)."""
        on_deliver = self.on_deliver if final else self.on_opt_deliver
        outer = self._delivering
        run = self._delivering = _DeliveredRun(deliveries, final, time.time_ns())
        try:
            for done, delivery in enumerate(deliveries, 1):
                run.done = done  # its row comes before anything its callback does
                if final:
                    self.delivered += 1
                else:
                    self.opt_delivered += 1
                if on_deliver is not None:
                    try:
                        on_deliver(delivery)
                    except Exception as exc:
                        self._app_failed("on_deliver" if final else "on_opt_deliver", exc)
                if self.closed:
                    return  # the application closed the group from its delivery callback
        finally:
            self._write_delivered()
            self._delivering = outer

    def _write_delivered(self) -> None:
        """Record the rows of the batch being delivered that are due and not yet written:
        one run for all of them (their t_ns: the batch's, counted up), and note them in
        the delivered prefixes (which only feed the `deps` of send rows: untraced, the
        driver skips that cost)."""
        run, recorder = self._delivering, self.host.recorder
        if run is None or recorder is None or run.done == run.written:
            return
        part = run.deliveries
        if run.written or run.done < len(part):
            part = part[run.written:run.done]
        run.written = run.done
        first = part[0]
        recorder.record_run(self.host.id, first.stage.value, run.t_ns, origin=first.origin,
                            first_seq=first.seq, sizes=[len(d.payload) for d in part],
                            group=self.name, view_id=self.view_id)
        if run.final:
            self.prefix.note_run(first.origin, first.seq, len(part))

    def _rejoined(self) -> None:
        """A member the group had left out (cut off) is admitted again with a fresh
        state: as in the simulator, its first incarnation ended there, so the trace says
        it crashed and recovered (it is not a member present throughout)."""
        self.rejoins += 1
        recorder = self.host.recorder
        if recorder is not None:
            now = time.time_ns()
            recorder.record(self.host.id, "crash", now, group=self.name)
            recorder.record(self.host.id, "recover", now, group=self.name)

    def _removed(self, view: View) -> None:
        # A leaver the group removed before its leave was decided did not leave gracefully.
        graceful = self.leaving and not self.stack.cut_off
        self.removed = view
        recorder = self.host.recorder
        if not graceful and recorder is not None:
            # The simulator's rule: a member the group gave up on counts as crashed.
            recorder.record(self.host.id, "crash", time.time_ns(), group=self.name)
        self.close()
        if self.hooks.on_removed is not None:
            try:
                self.hooks.on_removed(view, graceful)
            except Exception as exc:
                self._app_failed("on_removed", exc)

    # ----------------------------------------------------------- the application's code

    def _app_state(self) -> bytes | None:
        """The application's state for a joiner (`get_state`; b"" without one), or None
        when it raised or answered something other than bytes."""
        get_state = self.hooks.get_state
        if get_state is None:
            return b""
        try:
            return self._app_bytes("get_state", get_state())
        except Exception as exc:
            self._app_failed("get_state", exc)
            return None

    def _merged_state(self, states: tuple[bytes, ...]) -> bytes:
        """The application's merge of the sides' states (`merge_state`), or the first
        side's, as without a hook, when it raised or answered something not bytes."""
        merge = self.hooks.merge_state
        if merge is None:
            return states[0]
        try:
            merged = self._app_bytes("merge_state", merge(list(states)))
        except Exception as exc:
            self._app_failed("merge_state", exc)
            return states[0]
        return states[0] if merged is None else merged

    def _app_bytes(self, hook: str, answer: object) -> bytes | None:
        """`answer` as bytes, or None (counted and logged) when it is not bytes-like."""
        if isinstance(answer, bytes):
            return answer
        if isinstance(answer, bytearray | memoryview):
            return bytes(answer)
        self._app_failed(hook, TypeError(
            f"{hook}() must return bytes, not {type(answer).__name__}"))
        return None

    def _app_failed(self, hook: str, exc: Exception) -> None:
        """An application callback raised. The stack has moved past the outputs being
        carried out, on every member alike, so the driver goes on with the rest of them:
        letting the exception out would lose them (deliveries, views, timers) here only.
        Logged with its traceback at the 1st, 2nd, 4th, 8th... failure (a callback that
        always raises must not flood the log), all of them counted in `app_errors`.
        A `get_state` that fails leaves the joiner's snapshot unanswered: its join does
        not complete here, and the group goes on without it once it gives up."""
        self.app_errors = count = self.app_errors + 1
        if count & (count - 1) == 0:
            log.error("group %s on %s: the application's %s raised %s: %s (%d so far; "
                      "the group goes on)", self.name, self.host.id, hook,
                      type(exc).__name__, exc, count, exc_info=exc)

    def _set_timer(self, key: Hashable, at: int) -> None:
        loop = self._loop
        if loop is None:
            raise LocalProtocolError("a timer was set before the driver started")
        timer = self._timers.get(key)
        if timer is not None:
            timer.due = at
            if timer.armed <= at:
                return  # the loop timer fires first and re-arms for `at` (moved later)
            timer.handle.cancel()  # moved earlier: a new loop timer
        else:
            timer = self._timers[key] = _Timer(at)
        self._arm(loop, key, timer, at)

    def _arm(self, loop: asyncio.AbstractEventLoop, key: Hashable, timer: _Timer, at: int) -> None:
        timer.armed = at
        delay_s = max(0, at - self.host.clock.now_us()) / 1_000_000
        timer.handle = loop.call_later(delay_s, self._fire, key, timer)

    def _cancel_timer(self, key: Hashable) -> None:
        timer = self._timers.get(key)
        if timer is not None:
            timer.due = None  # lazily: the loop timer stays, finds nothing due and goes

    def _fire(self, key: Hashable, timer: _Timer) -> None:
        if self.closed or self._timers.get(key) is not timer:
            return
        at = timer.due
        if at is None:
            del self._timers[key]  # cancelled since armed
            del timer.handle  # the handle's args hold the timer: no cycle left for the GC
            return
        loop = self._loop
        if at > timer.armed and loop is not None:  # (the loop is set: it called us)
            self._arm(loop, key, timer, at)  # moved later since armed
            return
        del self._timers[key]
        del timer.handle
        # Loop timers may fire a little early (uvloop rounds to ms): the stack is told the
        # time is at least the deadline it asked for, and the clock never runs backwards.
        now = self.host.clock.at_least(at)
        self._apply(self.stack.fire(key, now))
        meter = self.meter
        if meter is not None and now >= meter.look_at:
            meter.watch(self.stack.top, now)


class _DeliveredRun:
    """A delivered batch on a traced node: the rows of deliveries[written:done] are due
    (their callbacks have begun) and not yet written."""

    __slots__ = ("deliveries", "done", "final", "t_ns", "written")

    def __init__(self, deliveries: list[Deliver], final: bool, t_ns: int) -> None:
        self.deliveries = deliveries
        self.final = final
        self.t_ns = t_ns
        self.done = 0
        self.written = 0


class _Timer:
    """One key's loop timer: armed for `armed`; `due` is what the stack last asked for
    (None: cancelled). Moving a key later or cancelling it does not touch the loop."""

    __slots__ = ("armed", "due", "handle")

    def __init__(self, at: int) -> None:
        self.due: int | None = at
        self.armed = at
        self.handle: asyncio.TimerHandle
