"""`abcast demo certify`: a wrong guess is undone and the store ends as if executed in
the final order; every replica ends equal, with and without compensation."""

from __future__ import annotations

import json

from click.testing import CliRunner

from abcast.apps.certify import CertifyingReplica, Txn, apply, run_certify
from abcast.cli import cli
from abcast.ids import MsgId

A = Txn(MsgId("n2", 1), (("k1", 0), ("k2", 0)), ("k1",))
B = Txn(MsgId("n3", 1), (("k1", 0), ("k3", 0)), ("k1",))  # conflicts with A on k1


def test_a_wrong_guess_is_undone_and_the_final_order_wins() -> None:
    replica = CertifyingReplica()
    replica.opt_deliver(A, 10)
    replica.opt_deliver(B, 20)
    # the guess: A commits (k1 := 1, version 1), B read k1 at version 0 and aborts
    assert replica.tentative_store() == {"k1": (1, 1)}
    replica.final_deliver(B, 30)  # the sequencer put B first: the guess was wrong
    replica.final_deliver(A, 40)
    assert (replica.wrong, replica.undone, replica.right) == (1, 2, 1)
    serial: dict[str, tuple[int, int]] = {}
    assert apply(serial, B) and not apply(serial, A)  # in the final order B wins
    assert replica.committed == serial and replica.tentative == []
    assert (replica.committed_count, replica.aborted) == (1, 1)


def test_every_replica_ends_equal_even_when_many_guesses_are_wrong() -> None:
    outcome = run_certify(transactions=60, rate=50.0, seed=3, compensate=False)
    assert outcome.equal and len(outcome.stores) == 5
    assert outcome.wrong_guesses > 0 and outcome.undone > 0
    assert outcome.committed + outcome.aborted == outcome.transactions == 60


def test_the_command_prints_one_json_line() -> None:
    result = CliRunner().invoke(cli, ["demo", "certify", "--json", "--transactions", "40"])
    assert result.exit_code == 0, result.output
    line = json.loads(result.output)
    assert line["equal"] is True and line["transactions"] == 40
    assert {"committed", "aborted", "wrong_guesses", "undone", "saved_ms_mean"} <= set(line)
