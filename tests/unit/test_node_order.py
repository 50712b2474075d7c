"""`node_sort_key` (the order that picks leaders, sequencers and coordinators) is total
and strict over every string a node id may be on the wire (NodeField: 1 to 64 characters
of anything): it never raises, two different ids never tie, and ordinary ids keep their
natural order (n2 < n10). Before, "²" (str.isdigit() but no int) raised, and "n7"/"n07"
tied, so the leader depended on the order members were listed in."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from abcast.ids import node_sort_key, sorted_nodes

NODE_IDS = st.text(min_size=1, max_size=64)


@given(NODE_IDS, NODE_IDS)
def test_the_order_is_total_and_strict_over_every_wire_node_id(a: str, b: str) -> None:
    ka, kb = node_sort_key(a), node_sort_key(b)
    assert (ka == kb) == (a == b)
    assert (ka < kb) != (kb < ka) or a == b


@given(st.lists(NODE_IDS, min_size=1, max_size=8, unique=True), st.randoms())
def test_the_lowest_node_does_not_depend_on_input_order(ids: list[str], rnd: object) -> None:
    shuffled = list(ids)
    rnd.shuffle(shuffled)  # type: ignore[attr-defined]
    assert sorted_nodes(shuffled) == sorted_nodes(ids)


def test_ordinary_ids_keep_their_natural_order() -> None:
    names = ["n10", "n2", "n1", "a", "n1x", "b20c", "b3c", "n02", "z", "10", "n7", "n07",
             "²", "n²", "①", "n" + "9" * 63]
    assert list(sorted_nodes(names)) == [
        "a", "b3c", "b20c", "n1", "n1x", "n02", "n2", "n07", "n7", "n10", "n" + "9" * 63,
        "n²", "z", "²", "①", "10"]
