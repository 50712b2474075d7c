"""What an ordering plugs into the membership layer: the narrow, typed interface.

Rules: the membership layer (abcast.membership.layer) owns views — join, leave, removal
on suspicion, and the flush that makes each view change virtually synchronous. An
ordering running under it keeps doing its own job (`handle`: broadcasts, its packets,
`ViewInstalled`) and adds seven methods, all about its *own* state and nothing about
views:

- `report()`: what this member holds of the closing view (frozen: the layer stopped
  feeding it packets);
- `settle(reports)`: the coordinator's pure function from every survivor's report to
  the messages of the closing view that every survivor delivers, in delivery order;
- `conclude(outcome)`: deliver, in that order, those of them not delivered here, then
  forget the closing view (its holdback and clocks settle on the outcome);
- `join_cut()` / `start_from(cut)`: what a joiner needs (per origin, how many messages
  the state it is given holds; the ordering's clock) and how it starts from it;
- `stable_point()` / `forget(stable)`: per origin, how many messages (1..k) it
  delivered, and dropping from its log what every member delivered (the layer gathers
  the points and hands down their minimum now and then, so a long view's log stays
  small).

Optional: `owes_own() -> bool` — this member's own broadcasts are not all delivered
yet and the ordering may deliver some of them only in the next view (the sequencer under
SAFE); a leaver asks to leave once it owes none, so that it delivers its own messages.

Under `partitions="evs"` (abcast.membership.merge) an ordering also implements
`MergingOrdering`: a side's flush settles the reports of that side only
(`settle_side(reports, members, old)`: what it keeps, and `spent`, the numbers used up,
which the next view's numbering skips), `conclude_side(outcome, spent)` takes it, and a
merge of sides restarts the ordering from a cut computed over every side
(`merge_cut`, `start_merged`). Today the sequencer family implements it.

A later ordering decides views another way through the same records: the sequencer
reports numbers and bodies (`FlushMessage.stamp` = its global number), chandra-toueg
keeps deciding views by consensus in its delivery sequence and uses only the join and
leave messages (see docs/orderings.md).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Protocol, runtime_checkable

from abcast.effects import Effect
from abcast.events import Event
from abcast.ids import NodeId, View
from abcast.membership.wire import FlushMessage, JoinCut, ViewReport
from abcast.snapshot import LayerSnapshot


@runtime_checkable
class ViewOrdering(Protocol):
    """An ordering core the membership layer drives (see the module's rules)."""

    name: ClassVar[str]
    header_type: ClassVar[Any]

    def handle(self, event: Event, now: int) -> list[Effect]: ...

    def inspect(self) -> LayerSnapshot: ...

    def backpressured(self) -> bool: ...

    def report(self) -> ViewReport: ...

    def settle(self, reports: Sequence[ViewReport]) -> list[FlushMessage]: ...

    def conclude(self, outcome: Sequence[FlushMessage]) -> list[Effect]: ...

    def join_cut(self) -> JoinCut: ...

    def start_from(self, cut: JoinCut) -> None: ...

    def stable_point(self) -> dict[NodeId, int]: ...

    def forget(self, stable: Mapping[NodeId, int]) -> None: ...


@runtime_checkable
class MergingOrdering(ViewOrdering, Protocol):
    """An ordering that can run under `partitions="evs"` (see the module's rules);
    `evs` says whether it was built for it (the membership layer's policy must agree)."""

    @property
    def evs(self) -> bool: ...

    def settle_side(
        self, reports: Sequence[ViewReport], members: tuple[NodeId, ...], old: View
    ) -> tuple[list[FlushMessage], int]: ...

    def conclude_side(self, outcome: Sequence[FlushMessage], spent: int) -> list[Effect]: ...

    def merge_cut(
        self, reports: Sequence[ViewReport], outcomes: Sequence[Sequence[FlushMessage]],
        spent: int,
    ) -> JoinCut: ...

    def start_merged(self, cut: JoinCut) -> None: ...
