"""Causal total order: the sequencer, numbering messages in causal order (GCom's way).

Rules: exactly the fixed sequencer (abcast.ordering.sequencer) — same packets, 2(n−1) per
broadcast (n in relay mode) — except that each data packet carries its origin's vector
clock (how many of each other origin's messages it had delivered when it sent) and the
sequencer admits a message for numbering only after every message in that vector, and
the origin's earlier ones, have been numbered. Delivery in number order then respects
causality. Guarantees: integrity, validity, agreement, fifo, causal, total.

With a fixed sequencer the vector is already met whenever a message arrives (its
dependencies were numbered before their origin could deliver them); it is carried so that
a new sequencer after a fail-over, which learns the old numbers late, still numbers in
causal order. (In relay mode only the sequencer sees it; a flush then finds no vector for
a message held only at its origin, which is harmless: everything it depends on was
delivered at its origin before it was sent, so the flush fixes that first.) Membership
(join with state transfer, leave, rejoin) is the sequencer's:
abcast.ordering.sequencer_membership; so are partitions (`evs`: both sides go on and
merge on heal, abcast.ordering.sequencer_merge).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from abcast.codec import Header, Seq
from abcast.ids import NodeId
from abcast.ordering.causal import DepsField
from abcast.ordering.sequencer import SOrder
from abcast.ordering.sequencer_failover import FAILOVER_HEADERS
from abcast.ordering.sequencer_membership import MEMBERSHIP_HEADERS
from abcast.ordering.sequencer_merge import MERGE_HEADERS, EvsSequencer


class CTData(Header, frozen=True):
    """A broadcast message and its origin's vector clock when it was sent."""

    seq: Seq
    deps: DepsField = {}


class CausalTotal(EvsSequencer):
    name = "causal-total"
    header_type = CTData | SOrder | FAILOVER_HEADERS | MEMBERSHIP_HEADERS | MERGE_HEADERS

    def data_header(self, seq: int) -> Header:
        return CTData(seq, self.delivered_vector())

    def parse_data(self, header: Any) -> tuple[int, Mapping[NodeId, int]] | None:
        if type(header) is CTData:
            return header.seq, header.deps
        return None
