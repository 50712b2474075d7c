"""Composition: a group on a node is a stack of sans-IO layers, bottom to top.

Rules: the stack routes effects between layers and never decides anything itself. A
layer's `Send`/`Multicast` becomes an event for the layer below (its header pushed onto
the packet); `Up` becomes `Received` for the layer above (that layer's header popped);
timers are namespaced per layer; `InstallView` reaches every other layer and the
application. Only the bottom touches bytes (encoding to `Transmit`) and only the top talks
to the application. Effects are processed breadth-first in emission order, so one input
always yields the same outputs. No clocks, no I/O: `now` comes in with every call.

Shortcuts (`Layer.pass_up`/`pass_down`/`pass_down_each`): a bottom layer that would only
pass a packet through (the failure detector, for a member's packet: stamp a time, add or
drop its header; the reliable channel where a stack has no detector, going up) is asked
that directly, and no event is built for it; so is the layer above it (the reliable
channel, for a member's next packet in sequence, or a packet numbered on each
destination's link) when the bottom passed. Each answer changes its
layer's state exactly as `handle` would, and the outputs and their order stay the same:
a frame let down is queued like the event it replaces and emitted in its turn (a frame
let down by both layers two turns later, as the two events would have been), and the
second layer is asked going down only when no event is queued (frames may be), so that
no event queued before reaches it after. A layer class that overrides `handle` below the
class defining the shortcuts gets none; a subclass that changes what `handle` does with
a steady-state packet must override the shortcuts too. Where both lower layers of a
three-layer stack have them, the top layer's step for a packet both let up, and for a
broadcast, is routed without the event queue while its effects are the steady ones
(deliveries, timers, multicasts both lower layers let down): `_top_step`, which hands
the rest to the queue at the first other effect, so the outputs stay `_drain`'s.

Refusals: a layer refuses a peer's packet by raising RemoteProtocolError (DecodeError
included). `receive` stops only that event — the layers below already took the packet
(a channel numbered it and armed its ack) — handles the rest of the frame's events and
returns `(outputs, refusal or None)`, never raising for what a peer sent; drivers carry
the outputs out, then drop the link. A pair, not an exception carrying the outputs:
strict mypy makes every caller unpack it, where an `except RemoteProtocolError` kept
from the old contract would drop them unseen; it costs one tuple per frame and one
`try` around the drain, none per effect. An `Up` with no header left for the layer
above is that layer's refusal, in its turn; the first refusal is returned, later ones
noted on it. `fire`, `broadcast` and the rest take no frame and raise as before.
A frame naming this node as its sender is refused before any layer sees it: a node never
sends itself a frame (a layer's `Send`/`Multicast` to its own node is local misuse, and
the udp transport drops its own multicasts looped back), so it is forged or corrupted,
and the layers would take it for a stranger's (the failure detector probed "it" with a
`Send` to itself: LocalProtocolError out of `receive`; under ticket it was delivered as
this node's own message).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Hashable, Sequence
from typing import Any

from abcast.codec import Envelope, HeaderCodec, Packet, encode_frame
from abcast.effects import (
    CancelTimer,
    Deliver,
    Effect,
    Forget,
    InstallState,
    InstallView,
    MergeStates,
    Multicast,
    NotifyExcluded,
    Output,
    Restore,
    Send,
    SetTimer,
    Suspect,
    TakeSnapshot,
    Transmit,
    Up,
)
from abcast.errors import LocalProtocolError, RemoteProtocolError
from abcast.events import (
    BroadcastRequested,
    Event,
    Excluded,
    Forgotten,
    JoinAbandoned,
    JoinRequested,
    LeaveRequested,
    MulticastRequested,
    Received,
    Restored,
    SendRequested,
    SnapshotTaken,
    StatesMerged,
    Suspected,
    TimerFired,
    ViewInstalled,
)
from abcast.ids import GroupName, NodeId, View
from abcast.layer import Layer
from abcast.snapshot import LayerSnapshot

__all__ = ["Layer", "Stack", "TimerKey"]

TimerKey = tuple[int, Hashable]


class Stack:
    """One group's layers on one node. Drivers call `start`, `broadcast`, `receive` and
    `fire`; each returns the outputs (`Transmit`, `Deliver`, timers, views) to carry out."""

    __slots__ = (
        "_credit_layers", "_next_seq", "_pass_down", "_pass_down_each", "_pass_up", "_pass_up2",
        "codec", "group", "layers", "node", "view",
    )

    def __init__(
        self, node: NodeId, group: GroupName, layers: Sequence[Layer], view: View
    ) -> None:
        if not layers:
            raise LocalProtocolError("a stack needs at least one layer")
        if node not in view.members:
            raise LocalProtocolError(f"{node} is not a member of {view}")
        self.node = node
        self.group = group
        self.layers = list(layers)
        self.view = view
        self.codec = HeaderCodec([layer.header_type for layer in self.layers])
        self._next_seq = 1
        #: the layers that queue for credit (override `backpressured`): asked on every
        #: non-waiting broadcast, so the others are not asked at all
        self._credit_layers = tuple(layer for layer in self.layers
                                    if type(layer).backpressured is not Layer.backpressured)
        bottom = self.layers[0]
        #: the bottom layer's shortcuts (see the rules), None where it has none
        self._pass_up: Callable[[NodeId, object, int], bool] | None = (
            bottom.pass_up if _shortcut(bottom, "pass_up") else None)
        self._pass_down: Callable[[tuple[NodeId, ...], int], object | None] | None = (
            bottom.pass_down if _shortcut(bottom, "pass_down") and len(self.layers) > 1
            else None)
        #: the second layer's, used only where the bottom's are (and a layer above both)
        second = self.layers[1] if len(self.layers) > 2 else None
        self._pass_up2: Callable[[NodeId, object, int], bool] | None = (
            second.pass_up if second is not None and self._pass_up is not None
            and _shortcut(second, "pass_up") else None)
        self._pass_down_each: Callable[
            [tuple[NodeId, ...], Packet, int], list[object] | None] | None = (
            second.pass_down_each if second is not None and self._pass_down is not None
            and _shortcut(second, "pass_down_each") else None)

    @property
    def top(self) -> Layer:
        return self.layers[-1]

    @property
    def broadcasts(self) -> int:
        """How many messages this node has broadcast in this group."""
        return self._next_seq - 1

    @property
    def cut_off(self) -> bool:
        """A layer says the group removed this node before its leave was decided (a
        leaver cut off by a partition): its departure is then a removal, not a graceful
        leave, and drivers record it as such."""
        return any(getattr(layer, "cut_off", False) is True for layer in self.layers)

    def backpressured(self) -> bool:
        """Some layer's send queue is past its bound (see `Layer.backpressured`)."""
        for layer in self._credit_layers:  # noqa: SIM110 (any() + a generator: 2.6× slower)
            if layer.backpressured():
                return True
        return False

    def in_flight(self) -> int:
        """Packets its layers sent and were not yet told arrived (the channels that count
        them: `in_flight()`); 0 with none that does."""
        return sum(count() for layer in self.layers
                   if callable(count := getattr(layer, "in_flight", None)))

    def peers(self) -> set[NodeId]:
        """The nodes this stack still talks to: its view's members, and the nodes outside
        it a layer keeps links to or may send to (`kept_peers()`: an open channel's guests
        and removed members lingering; under evs, the nodes the membership layer probes
        for the other side of a partition, for ever: abcast.membership.discovery). A
        runtime keeps their addresses."""
        peers = set(self.view.members)
        for layer in self.layers:
            kept = getattr(layer, "kept_peers", None)
            if callable(kept):
                peers |= kept()
        return peers

    def inspect(self) -> list[LayerSnapshot]:
        """Every layer's snapshot, bottom first."""
        return [snap for layer in self.layers for snap in layer.snapshots()]

    def start(self, now: int) -> list[Output]:
        """Give every layer the initial view, bottom first."""
        return self._run([(i, ViewInstalled(self.view)) for i in range(len(self.layers))],
                         now, [InstallView(self.view)])

    def broadcast(self, payload: bytes, now: int) -> tuple[int, list[Output]]:
        seq = self._next_seq
        self._next_seq += 1
        if self._pass_down_each is not None and len(self.layers) == 3:  # see _top_step
            out: list[Output] = []
            self._top_step(BroadcastRequested(seq, payload), now, deque(), out)
            return seq, out
        return seq, self._run([(len(self.layers) - 1, BroadcastRequested(seq, payload))], now)

    def join(self, contacts: tuple[NodeId, ...], now: int) -> list[Output]:
        """Join the group through one of `contacts`; the stack was built with a view that
        holds only this node, and the ordering installs the real one when admitted."""
        return self._run([(len(self.layers) - 1, JoinRequested(contacts))], now)

    def leave(self, now: int) -> list[Output]:
        return self._run([(len(self.layers) - 1, LeaveRequested())], now)

    def abandon_join(self, now: int) -> list[Output]:
        """Give a join up (it timed out): withdrawn if not admitted yet, else a leave."""
        return self._run([(len(self.layers) - 1, JoinAbandoned())], now)

    def snapshot_taken(self, token: int, state: bytes, now: int) -> list[Output]:
        """The application's answer to a `TakeSnapshot(token)` output."""
        return self._run([(len(self.layers) - 1, SnapshotTaken(token, state))], now)

    def states_merged(self, token: int, state: bytes, now: int) -> list[Output]:
        """The application's answer to a `MergeStates(token, states)` output."""
        return self._run([(len(self.layers) - 1, StatesMerged(token, state))], now)

    def receive(
        self, env: Envelope, now: int
    ) -> tuple[list[Output], RemoteProtocolError | None]:
        """An envelope addressed to this group: the outputs to carry out, and the refusal
        if a layer refused the packet (bad headers included; see the rules)."""
        out: list[Output] = []
        queue: deque[tuple[int, Any]] = deque()
        try:
            if env.sender == self.node:  # see the rules: forged or corrupted
                raise RemoteProtocolError(f"frame claims {env.sender}, this node, as its sender")
            headers = self.codec.headers(env)
            if not headers:
                raise RemoteProtocolError(f"frame from {env.sender} carries no header")
            # Straight to the bottom layer's event (no Frame, no whole-packet Packet), or
            # past it, and past the second, when they let the packet through (see the
            # rules).
            pass_up = self._pass_up
            if (pass_up is not None and len(headers) > 1
                    and pass_up(env.sender, headers[0], now)):
                pass_up2 = self._pass_up2
                if (pass_up2 is not None and len(headers) > 2
                        and pass_up2(env.sender, headers[1], now)):
                    event = Received(env.sender, headers[2], Packet(headers[3:], env.payload))
                    if self._pass_down_each is not None and len(self.layers) == 3:
                        self._top_step(event, now, queue, out)
                        return out, None
                    queue.append((2, event))
                else:
                    event = Received(env.sender, headers[1], Packet(headers[2:], env.payload))
                    queue.append((1, event))
            else:
                event = Received(env.sender, headers[0], Packet(headers[1:], env.payload))
                queue.append((0, event))
            self._drain(queue, now, out)
        except RemoteProtocolError as refusal:
            return out, self._refused(refusal, queue, now, out)
        return out, None

    def _refused(
        self, refusal: RemoteProtocolError, queue: deque[tuple[int, Any]], now: int,
        out: list[Output],
    ) -> RemoteProtocolError:
        """A layer refused an event of a frame (its raise took the event off the queue):
        the rest of the queue is handled as if it had not, each further refusal stopping
        only its own event too."""
        while queue:
            try:
                self._drain(queue, now, out)
            except RemoteProtocolError as also:
                refusal.add_note(f"also refused: {also}")
        return refusal

    def fire(self, key: Hashable, now: int) -> list[Output]:
        """A timer this stack set (its key as output in `SetTimer`) is due."""
        match key:
            case (int(index), inner) if 0 <= index < len(self.layers):
                return self._run([(index, TimerFired(inner))], now)
            case _:
                raise LocalProtocolError(f"{key!r} is not a timer of this stack")

    def _run(
        self, initial: list[tuple[int, Any]], now: int, outputs: list[Output] | None = None
    ) -> list[Output]:
        out: list[Output] = outputs if outputs is not None else []
        self._drain(deque(initial), now, out)
        return out

    def _top_step(self, event: Event, now: int, queue: deque[tuple[int, Any]],
                  out: list[Output]) -> None:
        """`_drain` of `[(2, event)]` for the top of a three-layer stack whose lower
        layers have their shortcuts, without the queue while the top's effects are the
        steady ones: deliveries and timers emitted as they come, each non-control
        multicast that both lower layers let down (`pass_down_each`) made into its
        frames, emitted after them. At the first effect of another kind, or a multicast
        they do not let down, the frames so far are queued and the rest of the effects
        routed by `_route` and `_drain`, as if they had been all along (the queue held
        only frames, and `pass_down_each` changes nothing when it refuses)."""
        effects = self.layers[2].handle(event, now)
        me, group = self.node, self.group
        each, pass_down = self._pass_down_each, self._pass_down
        frames: list[Transmit] = []
        for i, effect in enumerate(effects):
            kind = type(effect)
            if kind is Deliver:
                out.append(effect)  # type: ignore[arg-type]
                continue
            if kind is Multicast:
                multicast: Multicast = effect  # type: ignore[assignment]
                dests, inner = multicast.to, multicast.inner
                if not multicast.control and dests and me not in dests:
                    packet = Packet((multicast.header, *inner.headers), inner.payload)
                    heads = each(dests, packet, now)  # type: ignore[misc]  # (the caller's test)
                    if heads is not None:
                        for dest, head in zip(dests, heads, strict=True):
                            below = pass_down((dest,), now)  # type: ignore[misc]
                            frames.append(Transmit((dest,), encode_frame(group, me, Packet(
                                (below, head, *packet.headers), inner.payload)), False))
                        continue
            elif kind is SetTimer:
                timer: SetTimer = effect  # type: ignore[assignment]
                out.append(SetTimer((2, timer.key), timer.at))
                continue
            elif kind is CancelTimer:
                cancel: CancelTimer = effect  # type: ignore[assignment]
                out.append(CancelTimer((2, cancel.key)))
                continue
            queue.extend((-3, frame) for frame in frames)
            self._route(2, effects[i:], queue, now, out)
            self._drain(queue, now, out)
            return
        out.extend(frames)

    def _drain(self, queue: deque[tuple[int, Any]], now: int, out: list[Output]) -> None:
        """Handle queued events breadth-first, each event's effects routed by `_route`
        as they come. A queued index of -1 holds a `Transmit` the bottom layer let down
        (`pass_down`): it is emitted in its turn; -3 one both lower layers let down
        (`pass_down_each`), queued again as -1 in its turn; -2 holds a refusal, raised in
        its turn. (Queue items are (layer index, Event) otherwise.) A layer's
        RemoteProtocolError leaves the loop with the queue as it stands; `receive`
        catches it outside (see the rules).
        """
        layers, route = self.layers, self._route
        pop, push, emit = queue.popleft, queue.append, out.append
        while queue:
            index, event = pop()
            if index < 0:
                if index == -1:
                    emit(event)
                    continue
                if index == -3:
                    push((-1, event))
                    continue
                raise event  # -2: a refusal queued in its turn (an Up with no header)
            route(index, layers[index].handle(event, now), queue, now, out)

    def _route(self, index: int, effects: Sequence[Effect], queue: deque[tuple[int, Any]],
               now: int, out: list[Output]) -> None:
        """Route the effects of layer `index`'s step, as they come (see `_drain`).

        This runs for every effect of every message, so the effects each message causes
        are routed inline, by exact type (no isinstance chain, no pattern match, no call
        per effect); anything else, subclasses of these included, goes through
        `_route_other`. The annotated rebindings only inform mypy of the type tested."""
        layers = self.layers
        top = len(layers) - 1
        me, group = self.node, self.group
        pass_down, each = self._pass_down, self._pass_down_each
        push, emit = queue.append, out.append
        for effect in effects:
            kind = type(effect)
            if kind is Send:
                send: Send = effect  # type: ignore[assignment]
                to, inner = send.to, send.inner
                if to == me:
                    raise LocalProtocolError(f"{layers[index].name} sent to itself")
                if index == 2 and each is not None and (not queue or _no_events(queue)):
                    packet = Packet((send.header, *inner.headers), inner.payload)
                    heads = each((to,), packet, now)
                    if heads is not None:
                        below = pass_down((to,), now)  # type: ignore[misc]  # (each)
                        data = encode_frame(group, me, Packet(
                            (below, heads[0], *packet.headers), inner.payload),
                            control=send.control)
                        push((-3, Transmit((to,), data, send.control)))
                        continue
                if index == 1 and pass_down is not None:
                    header = pass_down((to,), now)
                    if header is not None:
                        packet = Packet((header, send.header, *inner.headers),
                                        inner.payload)
                        data = encode_frame(group, me, packet, control=send.control)
                        push((-1, Transmit((to,), data, send.control)))
                        continue
                packet = Packet((send.header, *inner.headers), inner.payload)
                if index:
                    push((index - 1, SendRequested(to, packet, send.control)))
                else:
                    data = encode_frame(group, me, packet, control=send.control)
                    emit(Transmit((to,), data, send.control))
            elif kind is Up:
                up: Up = effect  # type: ignore[assignment]
                if index == top:
                    raise LocalProtocolError(f"top layer {layers[index].name} sent Up")
                headers = up.packet.headers
                if headers:
                    rest = Packet(headers[1:], up.packet.payload)
                    push((index + 1, Received(up.sender, headers[0], rest)))
                else:
                    push((-2, _headless(up.sender, layers[index + 1])))
            elif kind is Multicast:
                multicast: Multicast = effect  # type: ignore[assignment]
                dests, inner = multicast.to, multicast.inner
                if not dests:
                    continue
                if me in dests:
                    raise LocalProtocolError(f"{layers[index].name} multicast to itself")
                control = multicast.control
                if (index == 2 and each is not None and not control
                        and (not queue or _no_events(queue))):
                    packet = Packet((multicast.header, *inner.headers), inner.payload)
                    heads = each(dests, packet, now)
                    if heads is not None:
                        for dest, head in zip(dests, heads, strict=True):
                            below = pass_down((dest,), now)  # type: ignore[misc]
                            data = encode_frame(group, me, Packet(
                                (below, head, *packet.headers), inner.payload))
                            push((-3, Transmit((dest,), data, False)))
                        continue
                if index == 1 and pass_down is not None:
                    header = pass_down(dests, now)
                    if header is not None:
                        packet = Packet((header, multicast.header, *inner.headers),
                                        inner.payload)
                        data = encode_frame(group, me, packet, control=control)
                        push((-1, Transmit(dests, data, control)))
                        continue
                packet = Packet((multicast.header, *inner.headers), inner.payload)
                if index:
                    push((index - 1, MulticastRequested(dests, packet, control)))
                else:
                    emit(Transmit(dests, encode_frame(group, me, packet, control=control),
                                  control))
            elif kind is Deliver:
                emit(effect)  # type: ignore[arg-type]
            elif kind is SetTimer:
                timer: SetTimer = effect  # type: ignore[assignment]
                emit(SetTimer((index, timer.key), timer.at))
            elif kind is CancelTimer:
                cancel: CancelTimer = effect  # type: ignore[assignment]
                emit(CancelTimer((index, cancel.key)))
            else:
                self._route_other(index, effect, queue, out)

    def _route_other(
        self, index: int, effect: Effect, queue: deque[tuple[int, Any]], out: list[Output]
    ) -> None:
        match effect:
            case Send(to, header, inner, control):
                if to == self.node:
                    raise LocalProtocolError(f"{self.layers[index].name} sent to itself")
                packet = inner.push(header)
                if index == 0:
                    data = encode_frame(self.group, self.node, packet, control=control)
                    out.append(Transmit((to,), data, control))
                else:
                    queue.append((index - 1, SendRequested(to, packet, control)))
            case Multicast(to, header, inner, control):
                if not to:
                    return
                if self.node in to:
                    raise LocalProtocolError(f"{self.layers[index].name} multicast to itself")
                packet = inner.push(header)
                if index == 0:
                    data = encode_frame(self.group, self.node, packet, control=control)
                    out.append(Transmit(to, data, control))
                else:
                    queue.append((index - 1, MulticastRequested(to, packet, control)))
            case Up(sender, packet):
                if index == len(self.layers) - 1:
                    raise LocalProtocolError(f"top layer {self.layers[index].name} sent Up")
                if not packet.headers:
                    queue.append((-2, _headless(sender, self.layers[index + 1])))
                    return
                rest = Packet(packet.headers[1:], packet.payload)
                queue.append((index + 1, Received(sender, packet.headers[0], rest)))
            case Deliver() | TakeSnapshot() | InstallState() | MergeStates():
                out.append(effect)
            case SetTimer(key, at):
                out.append(SetTimer((index, key), at))
            case CancelTimer(key):
                out.append(CancelTimer((index, key)))
            case InstallView(view):
                self.view = view
                others = (j for j in range(len(self.layers)) if j != index)
                queue.extend((j, ViewInstalled(view)) for j in others)
                out.append(effect)
            case Suspect(node):
                queue.extend((j, Suspected(node)) for j in range(index + 1, len(self.layers)))
            case Restore(node):
                queue.extend((j, Restored(node)) for j in range(index + 1, len(self.layers)))
            case NotifyExcluded(by, view_id):
                above = range(index + 1, len(self.layers))
                queue.extend((j, Excluded(by, view_id)) for j in above)
            case Forget(node):
                queue.extend((j, Forgotten(node)) for j in range(index))
            case _:
                raise LocalProtocolError(f"unknown effect {effect!r}")


def _no_events(queue: deque[tuple[int, Any]]) -> bool:
    """The queue holds frames and refusals only (negative indices), no layer's event."""
    for index, _ in queue:  # noqa: SIM110 (all(<generator>): slower, on the hot path)
        if index >= 0:
            return False
    return True


def _headless(sender: NodeId, above: Layer) -> RemoteProtocolError:
    """The refusal of a packet passed up with no header left for the layer above."""
    return RemoteProtocolError(f"packet from {sender} has no header for layer {above.name}")


def _shortcut(layer: Layer, name: str) -> bool:
    """Whether `layer` offers the shortcut `name` (see the rules): it overrides it, in
    the class that defines its `handle` or below it."""
    mro = type(layer).__mro__
    owner = next(klass for klass in mro if name in vars(klass))
    handler = next(klass for klass in mro if "handle" in vars(klass))
    return owner is not Layer and issubclass(owner, handler)
