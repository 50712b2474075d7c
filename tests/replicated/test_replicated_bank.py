"""`abcast demo bank`: every replica of the Account ends with the same balance — in one
process over mem:// (ordering ticket with its own ticket server too), and as real
processes over TCP (matrix) — and arguments that cannot work are refused with exit
code 2."""

from __future__ import annotations

import asyncio
import json

import pytest
from click.testing import CliRunner

from abcast.apps.bank import BankConfig, demo, run_bank
from abcast.errors import ConfigError


@pytest.mark.parametrize("ordering", ["matrix", "sequencer", "chandra-toueg", "ticket"])
def test_balances_are_equal_in_process(ordering: str) -> None:
    result = asyncio.run(run_bank(BankConfig(3, ordering, 45, "mem", seed=3,
                                             timeout_s=60)))
    assert result.errors == []
    assert sorted(result.reports) == ["n1", "n2", "n3"]
    assert all(r.applied == 45 for r in result.reports.values())
    assert result.equal


def test_balances_are_equal_over_tcp_processes() -> None:
    out = CliRunner().invoke(demo, ["bank", "--nodes", "3", "--ordering", "matrix",
                                    "--operations", "30", "--json", "--timeout", "90"])
    assert out.exit_code == 0, out.output
    summary = json.loads(out.output.strip().splitlines()[-1])
    assert set(summary["balances"]) == {"n1", "n2", "n3"}
    assert summary["equal"] is True and summary["errors"] == []


def test_orderings_without_total_order_and_bad_transports_are_refused() -> None:
    with pytest.raises(ConfigError, match="does not claim total order"):
        BankConfig(3, "fifo", 10).validate()
    with pytest.raises(ConfigError, match="unknown transport"):
        BankConfig(3, "matrix", 10, transport="carrier-pigeon").validate()
    out = CliRunner().invoke(demo, ["bank", "--ordering", "causal"])
    assert out.exit_code == 2
