"""The chat demo keeps a bounded history: the latest lines within a count and a byte
budget, trimmed in delivery order so every member holds the same window, and a joiner is
handed that window with the members' delivery indices — however long the group has run,
its state stays small enough to join."""

from __future__ import annotations

import asyncio
import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from abcast.apps.chat.node import HISTORY_BYTES, HISTORY_LINES, ChatNode, History, _Line
from abcast.apps.chat.protocol import Delivered, ServerMessage
from abcast.errors import RemoteProtocolError
from abcast.registry.server import RegistryServer

pytestmark = pytest.mark.timeout(120)

lines = st.lists(st.builds(_Line, st.sampled_from(["n1", "n2", "n3"]),
                           st.integers(1, 10**6), st.text(max_size=40)), max_size=60)


@given(lines, st.integers(1, 10), st.integers(1, 200))
def test_the_window_is_the_latest_lines_within_both_bounds(
        seen: list[_Line], max_lines: int, max_bytes: int) -> None:
    history = History(max_lines, max_bytes)
    indices = [history.add(line) for line in seen]
    assert indices == list(range(1, len(seen) + 1))
    kept = list(history.lines)
    assert len(kept) <= max_lines
    assert sum(len(x.text.encode()) + len(x.origin) for x in kept) <= max_bytes
    assert kept == (seen[len(seen) - len(kept):] if kept else [])
    # the latest lines that fit: one more would break a bound
    if len(kept) < len(seen):
        more = seen[len(seen) - len(kept) - 1:]
        assert (len(more) > max_lines
                or sum(len(x.text.encode()) + len(x.origin) for x in more) > max_bytes)
    assert [i for i, _ in history.indexed()] == indices[len(indices) - len(kept):]


@given(lines, st.integers(0, 60), st.integers(1, 10), st.integers(1, 200))
def test_a_joiner_holds_what_the_member_holds_and_goes_on_alike(
        seen: list[_Line], cut: int, max_lines: int, max_bytes: int) -> None:
    """The member's state at any point, loaded by a joiner, then the same deliveries:
    both hold the same window with the same indices (the replicas stay equal)."""
    member = History(max_lines, max_bytes)
    for line in seen[:cut]:
        member.add(line)
    joiner = History(max_lines, max_bytes)
    joiner.load(member.encode())
    for line in seen[cut:]:
        assert member.add(line) == joiner.add(line)
    assert member.indexed() == joiner.indexed()
    assert (member.delivered, member.size) == (joiner.delivered, joiner.size)


def test_a_long_history_keeps_a_joiners_state_small() -> None:
    """100,000 lines of 4 KiB (400 MB delivered): the state stays under the byte budget."""
    history = History()
    text = "y" * 4096
    for seq in range(1, 100_001):
        history.add(_Line("n1", seq, text))
    assert history.delivered == 100_000
    assert len(history.lines) == HISTORY_BYTES // (4096 + 2) < HISTORY_LINES
    assert len(history.encode()) < HISTORY_BYTES + 16 * len(history.lines)
    assert history.indexed()[-1][0] == 100_000


@pytest.mark.parametrize("state", [b"", b"\xc1", b"\x92\x01\x93\xa1a\x01\xa1b"])
def test_a_state_that_is_not_a_history_is_refused(state: bytes) -> None:
    with pytest.raises(RemoteProtocolError):
        History().load(state)


def test_a_history_claiming_fewer_deliveries_than_lines_is_refused() -> None:
    import msgspec

    bad = msgspec.msgpack.encode([1, [["n1", 1, "a"], ["n1", 2, "b"]]])
    with pytest.raises(RemoteProtocolError):
        History().load(bad)


def test_a_joiner_is_handed_the_window_with_the_members_indices() -> None:
    async def main() -> None:
        async with RegistryServer() as registry, \
                ChatNode(registry.url, history_lines=5) as a, \
                ChatNode(registry.url, history_lines=5) as b:
            heard_a: list[ServerMessage] = []
            heard_b: list[ServerMessage] = []
            a.subscribe(heard_a.append)
            b.subscribe(heard_b.append)

            def shown(heard: list[ServerMessage]) -> list[tuple[int, str]]:
                return [(m.index, m.text) for m in heard if isinstance(m, Delivered)]

            async def until(cond: object) -> None:
                async with asyncio.timeout(60):
                    while not cond():  # type: ignore[operator]
                        await asyncio.sleep(0.02)

            await a.request('{"type": "create", "group": "g", "ordering": "sequencer"}',
                            heard_a.append)
            await until(lambda: "g" in a.rooms and a.rooms["g"].group is not None)
            for i in range(1, 9):
                await a.request(json.dumps({"type": "send", "group": "g", "text": f"m{i}"}),
                                heard_a.append)
            await until(lambda: len(shown(heard_a)) == 8)
            assert shown(heard_a) == [(i, f"m{i}") for i in range(1, 9)]
            await b.request('{"type": "join", "group": "g"}', heard_b.append)
            await until(lambda: len(shown(heard_b)) >= 5)
            assert shown(heard_b) == [(i, f"m{i}") for i in range(4, 9)]
            await b.request('{"type": "send", "group": "g", "text": "m9"}', heard_b.append)
            await until(lambda: len(shown(heard_a)) == 9 and len(shown(heard_b)) == 6)
            assert shown(heard_b)[-1] == shown(heard_a)[-1] == (9, "m9")
            assert a.rooms["g"].history.indexed() == b.rooms["g"].history.indexed()
            assert [i for i, _ in a.rooms["g"].history.indexed()] == [5, 6, 7, 8, 9]
            hello = b.hello()
            assert hello.history_lines == 5

    asyncio.run(main())
