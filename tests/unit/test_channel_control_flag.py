"""A control multicast stays control through every channel (reliable, open, basic, NAK).

The layers above mark some traffic `control` (merge probes, stability reports): the
runtime counts it apart from protocol packets and carries it out in its turn, where
protocol packets go ahead of the deliveries before them. Each channel's
multicast path dropped the flag (its unicast path kept it), so a control multicast was
counted and reordered as a protocol packet. Latent so far: no layer of ours multicasts
control (the membership layer's control traffic is sent one by one), but
`MulticastRequested` promises the flag to any layer. Checked on each kind of channel; a
planted channel that drops the flag again is caught."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from abcast.codec import Packet
from abcast.effects import Effect, Multicast, Send
from abcast.events import MulticastRequested, ViewInstalled
from abcast.ids import View
from abcast.layer import Layer
from abcast.ordering._open_channel import OpenChannel
from abcast.reliability.basic_channel import BasicChannel
from abcast.reliability.channel import ReliableChannel
from abcast.reliability.nak import NakChannel

MEMBERS = ("a", "b", "c")
CHANNELS: dict[str, Callable[[], Layer]] = {
    "reliable": lambda: ReliableChannel("a"),
    "open": lambda: OpenChannel("a"),
    "basic": lambda: BasicChannel("a"),
    "nak": lambda: NakChannel("a"),
}


class DropsTheFlag(ReliableChannel):
    """Planted bug: the channel as it was — a multicast's packets leave as protocol."""

    def _multicast(self, to: tuple[str, ...], packet: Packet, now: int,
                   control: bool = False) -> list[Effect]:
        return super()._multicast(to, packet, now)


def _controls(effects: list[Effect]) -> list[bool]:
    return [e.control for e in effects if isinstance(e, Send | Multicast)]


def check_a_control_multicast_stays_control(make: Callable[[], Layer]) -> None:
    channel = make()
    channel.handle(ViewInstalled(View(1, MEMBERS)), 0)
    for control in (True, False):
        out = channel.handle(MulticastRequested(("b", "c"), Packet((), b"x"), control), 1)
        flags = _controls(out)
        assert flags and set(flags) == {control}, (control, out)


@pytest.mark.parametrize("kind", sorted(CHANNELS))
def test_a_control_multicast_stays_control(kind: str) -> None:
    check_a_control_multicast_stays_control(CHANNELS[kind])


def test_a_channel_that_drops_the_flag_is_caught() -> None:
    with pytest.raises(AssertionError):
        check_a_control_multicast_stays_control(lambda: DropsTheFlag("a"))
