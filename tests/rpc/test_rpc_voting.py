"""Reply voting (abcast.rpc.voting): the names, the table, and a Hypothesis state machine
that feeds a ballot replies (from targets, strangers and repeaters), views and the
deadline, checking after every step that a decision is never missed, never wrong and
never revised. Planted ballots that count a server's second reply, or a departed
target's reply toward a vote over the live targets (all, majority, percent), must be
caught."""

from __future__ import annotations

from typing import ClassVar

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from abcast.errors import ConfigError
from abcast.rpc.voting import Ballot, Reply, Status, Vote

SERVERS = ("n1", "n2", "n3", "n4", "n5")


def ballot(vote: str, consistency: str = "any", targets: tuple[str, ...] = SERVERS[:3]
           ) -> Ballot:
    return Ballot(Vote.parse(vote), consistency, frozenset(targets))


@pytest.mark.parametrize(("text", "needed"), [
    ("first", [1, 1, 1]), ("all", [1, 3, 5]), ("majority", [1, 2, 3]),
    ("quorum(2)", [2, 2, 2]), ("percent(51)", [1, 2, 3]), ("percent(100)", [1, 3, 5]),
    ("PERCENT( 34 )", [1, 2, 2]),
])
def test_needed(text: str, needed: list[int]) -> None:
    vote = Vote.parse(text)
    assert [vote.needed(n) for n in (1, 3, 5)] == needed
    assert Vote.parse(str(vote)) == vote


@pytest.mark.parametrize(("text", "says"), [
    ("most", "choose one of: first, all, majority, quorum(k), percent(p)"),
    ("quorum(0)", "whole k >= 1"), ("quorum(1.5)", "whole k >= 1"),
    ("percent(0)", "0 < p <= 100"), ("percent(101)", "0 < p <= 100"),
    ("quorum(x)", "choose one of"),
    ("quorum(" + "9" * 400 + ")", "whole k >= 1"),  # a float of inf: was OverflowError
])
def test_bad_votes_name_the_allowed_values(text: str, says: str) -> None:
    with pytest.raises(ConfigError, match=says.replace("(", r"\(").replace(")", r"\)")):
        Vote.parse(text)


@pytest.mark.parametrize(("kind", "param", "says"), [
    ("quorum", 0, "whole k >= 1"), ("quorum", 1.5, "whole k >= 1"),
    ("quorum", float("nan"), "whole k >= 1"), ("quorum", float("inf"), "whole k >= 1"),
    ("percent", 0, "0 < p <= 100"),
    ("percent", 101, "0 < p <= 100"), ("most", 0, "choose one of"),
    ("first", 2, "takes no parameter"),
])
def test_a_vote_built_directly_is_checked_alike(kind: str, param: float, says: str) -> None:
    with pytest.raises(ConfigError, match=says):
        Vote(kind, param)


def test_bad_consistency_and_oversized_quorum() -> None:
    with pytest.raises(ConfigError, match="any, all_same, majority_same, all_different"):
        ballot("first", "same")
    with pytest.raises(ConfigError, match=r"quorum\(4\) needs more servers than the 3"):
        Vote.parse("quorum(4)").check_targets(3)
    assert ballot("quorum(4)").on_view(SERVERS[:3]) is Status.MEMBERS_LOST


def test_table() -> None:
    b = ballot("majority")
    assert b.on_reply(Reply("n1", b"x")) is Status.WAITING
    assert b.on_reply(Reply("n1", b"x")) is Status.WAITING  # a repeat: not a second vote
    assert b.on_reply(Reply("n9", b"x")) is Status.WAITING  # not a target
    assert (b.ignored_duplicate, b.ignored_foreign, len(b.replies)) == (1, 1, 1)
    assert b.on_reply(Reply("n2", b"x")) is Status.OK
    assert b.on_reply(Reply("n3", b"y")) is Status.OK and b.late == 1
    assert b.outcome().value == b"x"

    b = ballot("all", "all_same")
    b.on_reply(Reply("n1", b"x"))
    assert b.on_reply(Reply("n2", b"y")) is Status.INCONSISTENT

    b = ballot("quorum(3)")
    b.on_reply(Reply("n1", b"x"))
    assert b.on_view(["n1", "n2"]) is Status.MEMBERS_LOST

    b = ballot("all")
    b.on_reply(Reply("n1", b"x"))
    b.on_reply(Reply("n2", b"x"))
    assert b.on_view(["n1", "n2"]) is Status.OK  # the view shrank to who answered

    assert ballot("first").on_deadline() is Status.TIMEOUT
    b = ballot("all")
    b.on_reply(Reply("n1", b"x"))
    assert b.on_deadline() is Status.NO_QUORUM

    b = ballot("all", "majority_same")
    for server, value in (("n1", b"a"), ("n2", b"b"), ("n3", b"a")):
        b.on_reply(Reply(server, value))
    assert (b.status, b.value) == (Status.OK, b"a")
    b = ballot("all", "majority_same")
    b.on_reply(Reply("n1", b"a"))
    b.on_reply(Reply("n2", b"b"))
    assert b.on_reply(Reply("n3", b"c")) is Status.INCONSISTENT

    b = ballot("all", "all_different")
    b.on_reply(Reply("n1", b"a"))
    assert b.on_reply(Reply("n2", b"a")) is Status.INCONSISTENT


def test_majority_same_counts_the_live_targets_replies_only(
        ballot_type: type[Ballot] = Ballot) -> None:
    """Two of five answer "bad" and leave: the value must still be held by a majority of
    the three live targets, who have not answered yet."""
    b = ballot_type(Vote.parse("majority"), "majority_same", frozenset(SERVERS))
    b.on_reply(Reply("n4", b"bad"))
    b.on_reply(Reply("n5", b"bad"))
    assert b.on_view(SERVERS[:3]) is Status.WAITING
    assert b.on_reply(Reply("n1", b"good")) is Status.WAITING
    assert b.on_reply(Reply("n2", b"good")) is Status.OK and b.value == b"good"
    b = ballot("first", "majority_same", SERVERS[:3])
    b.on_reply(Reply("n1", b"a"))
    assert b.on_view([]) is Status.MEMBERS_LOST  # nobody left to hold a value


def test_vote_all_waits_for_every_live_target(ballot_type: type[Ballot] = Ballot) -> None:
    """n1 answers and leaves: `all` is then n2's and n3's replies, and n1's stands in for
    neither (main decided OK on n1's and n2's, n3 unheard). What n1 said still shows in
    the outcome's replies and still counts for all_same."""
    b = ballot_type(Vote.parse("all"), "any", frozenset(SERVERS[:3]))
    b.on_reply(Reply("n1", b"x"))
    assert b.on_view(SERVERS[1:3]) is Status.WAITING
    assert b.on_reply(Reply("n2", b"x")) is Status.WAITING
    assert b.on_reply(Reply("n3", b"x")) is Status.OK
    assert [r.server for r in b.outcome().replies] == ["n1", "n2", "n3"]
    b = ballot_type(Vote.parse("all"), "all_same", frozenset(SERVERS[:3]))
    b.on_reply(Reply("n1", b"x"))
    b.on_view(SERVERS[1:3])
    assert b.on_reply(Reply("n2", b"y")) is Status.INCONSISTENT


def test_majority_and_percent_are_taken_over_the_live_targets(
        ballot_type: type[Ballot] = Ballot) -> None:
    """majority and percent(p), like all, count the live targets' replies only (main
    counted a departed target's reply toward the live targets' n, so percent(100) was
    not all, and a majority of three live targets could be two departed ones)."""
    # departs after replying: n4 and n5 answer and leave; a majority of n1..n3 is 2 of them
    b = ballot_type(Vote.parse("majority"), "any", frozenset(SERVERS))
    b.on_reply(Reply("n4", b"old"))
    b.on_reply(Reply("n5", b"old"))
    assert b.on_view(SERVERS[:3]) is Status.WAITING  # main: OK, none of the live heard
    assert b.on_reply(Reply("n1", b"new")) is Status.WAITING
    assert b.on_reply(Reply("n2", b"new")) is Status.OK
    assert b.value == b"new"  # the first counted reply's, not the departed n4's
    assert [r.server for r in b.outcome().replies] == ["n4", "n5", "n1", "n2"]
    # departs before replying: n3 leaves, then its reply (sent before it went) arrives
    b = ballot_type(Vote.parse("percent(60)"), "any", frozenset(SERVERS[:3]))
    assert b.on_view(SERVERS[:2]) is Status.WAITING  # 2 live: ⌈1.2⌉ = 2 needed
    assert b.on_reply(Reply("n3", b"x")) is Status.WAITING
    assert b.on_reply(Reply("n1", b"x")) is Status.WAITING  # main: OK with n3's
    assert b.on_reply(Reply("n2", b"x")) is Status.OK
    # percent(100) is all: n1 answers and leaves, n2 answers, n3 not yet
    for vote in ("percent(100)", "all"):
        b = ballot_type(Vote.parse(vote), "any", frozenset(SERVERS[:3]))
        b.on_reply(Reply("n1", b"x"))
        b.on_view(SERVERS[1:3])
        assert b.on_reply(Reply("n2", b"x")) is Status.WAITING, vote
        assert b.on_reply(Reply("n3", b"x")) is Status.OK, vote
    # every live target gone: nobody left to vote
    b = ballot_type(Vote.parse("majority"), "any", frozenset(SERVERS[:3]))
    b.on_reply(Reply("n1", b"x"))
    assert b.on_view([]) is Status.MEMBERS_LOST


def test_quorum_counts_a_departed_targets_reply() -> None:
    """quorum(k) is absolute (k servers answered), not a share of the live targets: a
    reply from a server that has since left still counts, as the module says."""
    b = ballot("quorum(2)")
    b.on_reply(Reply("n1", b"x"))
    assert b.on_view(["n2", "n3"]) is Status.WAITING
    assert b.on_reply(Reply("n2", b"x")) is Status.OK


_STEPS = st.lists(st.one_of(
    st.tuples(st.just("reply"), st.sampled_from(SERVERS[:4]), st.sampled_from([b"a", b"b"])),
    st.tuples(st.just("leave"), st.sampled_from(SERVERS[:4]), st.just(b""))), max_size=12)


@given(steps=_STEPS, consistency=st.sampled_from(["any", "all_same", "majority_same",
                                                  "all_different"]))
@settings(max_examples=300, deadline=None)
def test_percent_100_is_all(steps: list[tuple[str, str, bytes]], consistency: str) -> None:
    """Whatever replies and departures come, percent(100) decides as all does, step by
    step, with the same value."""
    _percent_100_as_all(steps, consistency)


def _percent_100_as_all(steps: list[tuple[str, str, bytes]], consistency: str,
                        ballot_type: type[Ballot] = Ballot) -> None:
    ballots = [ballot_type(Vote.parse(v), consistency, frozenset(SERVERS[:4]))
               for v in ("percent(100)", "all")]
    for what, server, value in steps:
        for b in ballots:
            if what == "reply":
                b.on_reply(Reply(server, value))
            else:
                b.on_view(sorted(b.live - {server}))
        percent, every = ballots
        assert (percent.status, percent.value) == (every.status, every.value), steps


def test_a_handler_error_is_an_ok_outcome_that_failed() -> None:
    failed = ballot("first")
    failed.on_reply(Reply("n1", b"ValueError: no", ok=False))
    assert failed.outcome().ok and failed.outcome().failed


def _consistent(consistency: str, replies: list[Reply], live: set[str]) -> bool:
    values = [(r.ok, r.value) for r in replies]
    if consistency == "all_same":
        return len(set(values)) <= 1
    if consistency == "all_different":
        return len(set(values)) == len(values)
    if consistency == "majority_same":  # the live targets' replies only
        held = [(r.ok, r.value) for r in replies if r.server in live]
        return any(held.count(v) >= len(live) // 2 + 1 for v in held)
    return True


def _counted(b: Ballot) -> int:
    """The replies that count toward the vote: for a vote over n (all, majority,
    percent), the live targets' only."""
    if b.vote.kind in ("all", "majority", "percent"):
        return sum(1 for r in b.replies if r.server in b.live)
    return len(b.replies)


class BallotMachine(RuleBasedStateMachine):
    ballot_type: ClassVar[type[Ballot]] = Ballot

    def __init__(self) -> None:
        super().__init__()
        self.b: Ballot | None = None
        self.decided_as: Status | None = None

    @initialize(vote=st.sampled_from(["first", "all", "majority", "quorum(2)", "quorum(3)",
                                      "percent(51)", "percent(80)",
                                      "percent(100)"]),
                consistency=st.sampled_from(["any", "all_same", "majority_same",
                                             "all_different"]),
                n=st.integers(3, 5))
    def start(self, vote: str, consistency: str, n: int) -> None:
        self.b = self.ballot_type(Vote.parse(vote), consistency, frozenset(SERVERS[:n]))

    def _b(self) -> Ballot:
        assert self.b is not None
        return self.b

    @rule(server=st.sampled_from([*SERVERS, "n9"]), value=st.sampled_from([b"a", b"b"]),
          ok=st.booleans())
    def reply(self, server: str, value: bytes, ok: bool) -> None:
        self._b().on_reply(Reply(server, value, ok))

    @rule(members=st.sets(st.sampled_from(SERVERS)))
    def view(self, members: set[str]) -> None:
        b = self._b()
        # views only shrink the live set (servers never come back within one request)
        b.on_view(sorted(members & b.live))

    @rule(server=st.sampled_from(SERVERS))
    def leave(self, server: str) -> None:
        """One server leaves the view (a view that keeps most of the targets)."""
        b = self._b()
        b.on_view(sorted(b.live - {server}))

    @rule()
    def deadline(self) -> None:
        self._b().on_deadline()

    @invariant()
    def sound(self) -> None:
        b = self.b
        if b is None:
            return
        servers = [r.server for r in b.replies]
        assert len(servers) == len(set(servers)), "a server voted twice"
        assert set(servers) <= b.targets, "a stranger voted"
        if self.decided_as is not None:
            assert b.status is self.decided_as, "a decision was revised"
            return
        counted = _counted(b)
        holds = _consistent(b.consistency, b.replies, b.live)
        if b.status is Status.WAITING:
            assert not (counted >= b.needed and holds), "a decision was missed"
        else:
            self.decided_as = b.status
        if b.status is Status.OK:
            assert counted >= b.needed and holds, "decided on too few counted replies"
        if b.status is Status.MEMBERS_LOST:
            heard = set(servers)
            assert counted + len(b.live - heard) < b.needed or not b.live


BallotMachine.TestCase.settings = settings(
    max_examples=150, stateful_step_count=20, deadline=None,
    suppress_health_check=[HealthCheck.too_slow])
TestBallot = BallotMachine.TestCase


class CountsRepeats(Ballot):
    """Planted bug: a server's second reply counts as a second vote."""

    def on_reply(self, reply: Reply) -> Status:
        if self.decided or reply.server not in self.targets:
            return super().on_reply(reply)
        self.replies.append(reply)
        return self._judge()


def test_the_machine_catches_a_ballot_that_counts_repeats() -> None:
    class Planted(BallotMachine):
        ballot_type = CountsRepeats

    Planted.TestCase.settings = settings(max_examples=200, stateful_step_count=20,
                                         deadline=None, database=None,
                                         suppress_health_check=[HealthCheck.too_slow],
                                         phases=[Phase.generate])  # caught: no shrinking
    with pytest.raises(AssertionError, match="voted twice"):
        Planted.TestCase().runTest()


class CountsTheDeparted(Ballot):
    """Planted bug: majority_same counts the replies of servers that have left."""

    def _consistency(self) -> tuple[bool, bool, bytes | None]:
        if self.consistency != "majority_same":
            return super()._consistency()
        majority = len(self.live) // 2 + 1
        remaining = len(self.live - {r.server for r in self.replies})
        values = [(r.ok, r.value) for r in self.replies]
        top = max((values.count(v) for v in values), default=0)
        best = next((v for v in values if values.count(v) == top), (True, b""))
        return top >= majority, top + remaining < majority, best[1] if top else None


def test_a_majority_of_departed_servers_is_caught() -> None:
    with pytest.raises(AssertionError):
        test_majority_same_counts_the_live_targets_replies_only(CountsTheDeparted)
    b = CountsTheDeparted(Vote.parse("first"), "majority_same", frozenset(SERVERS[:4]))
    b.on_reply(Reply("n3", b"a"))
    b.on_reply(Reply("n4", b"a"))
    b.on_view(SERVERS[:2])
    assert b.status is Status.OK  # and the machine's oracle says it does not hold:
    assert not _consistent("majority_same", b.replies, b.live)


class AllCountsTheDeparted(Ballot):
    """Planted bug (main's ballot): vote all counts a departed target's reply."""

    @property
    def counted(self) -> int:
        return len(self.replies)


def test_the_machine_catches_vote_all_counting_the_departed() -> None:
    with pytest.raises(AssertionError):
        test_vote_all_waits_for_every_live_target(AllCountsTheDeparted)

    class Planted(BallotMachine):
        ballot_type = AllCountsTheDeparted

        @initialize(consistency=st.sampled_from(["any", "all_same"]), n=st.integers(3, 5))
        def start(self, consistency: str, n: int) -> None:  # type: ignore[override]
            self.b = self.ballot_type(Vote.parse("all"), consistency, frozenset(SERVERS[:n]))

    Planted.TestCase.settings = settings(max_examples=300, stateful_step_count=20,
                                         deadline=None, database=None,
                                         suppress_health_check=[HealthCheck.too_slow],
                                         phases=[Phase.generate])  # caught: no shrinking
    with pytest.raises(AssertionError, match=r"too few counted replies|decision was missed"):
        Planted.TestCase().runTest()


class ShareCountsTheDeparted(Ballot):
    """Planted bug (main's ballot): majority and percent count a departed target's reply
    toward the live targets' n (only vote all counted the live ones)."""

    @property
    def counted(self) -> int:
        if self.vote.kind == "all":
            return sum(1 for r in self.replies if r.server in self.live)
        return len(self.replies)


def test_the_machine_catches_a_share_counting_the_departed() -> None:
    with pytest.raises(AssertionError):
        test_majority_and_percent_are_taken_over_the_live_targets(ShareCountsTheDeparted)
    with pytest.raises(AssertionError):
        _percent_100_as_all([("reply", "n1", b"a"), ("leave", "n1", b""),
                             ("reply", "n2", b"a"), ("reply", "n3", b"a")], "any",
                            ShareCountsTheDeparted)

    class Planted(BallotMachine):
        ballot_type = ShareCountsTheDeparted

        @initialize(vote=st.sampled_from(["majority", "percent(51)", "percent(100)"]),
                    consistency=st.sampled_from(["any", "all_same"]), n=st.integers(3, 5))
        def start(self, vote: str, consistency: str, n: int) -> None:  # type: ignore[override]
            self.b = self.ballot_type(Vote.parse(vote), consistency, frozenset(SERVERS[:n]))

    Planted.TestCase.settings = settings(max_examples=300, stateful_step_count=20,
                                         deadline=None, database=None,
                                         suppress_health_check=[HealthCheck.too_slow],
                                         phases=[Phase.generate])  # caught: no shrinking
    with pytest.raises(AssertionError, match=r"too few counted replies|decision was missed"):
        Planted.TestCase().runTest()
