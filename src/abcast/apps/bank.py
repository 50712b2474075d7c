"""`abcast demo bank`: the thesis's accounts example — N processes, one replicated Account.

Rules: the command starts a registry (in this process) and N nodes — OS processes for
network transports, tasks of this process for mem:// — that open group "bank" with the
chosen ordering, each hold a replica of `Account` (abcast.replicated.batteries) and
together apply K random deposits and withdrawals: node i issues its share one at a time,
each awaited until executed on its own copy (RepMI's synchronous invocation), amounts
drawn from `random.Random(f"{seed}:{node}")`. With `--ordering ticket` the command also
starts the group's ticket server (abcast.apps.ticket_server) in this process. A node
that has executed all K operations reports its balance, tells the registry it is done
and waits for every other node before closing (a matrix group needs every member's
heartbeats until the end). The command prints every replica's final balance, or with
--json one line
`{"balances": {"n1": …}, "equal": true|false}`; exit code 0 when every replica reported
and all balances are equal, 1 otherwise, 2 for bad arguments.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import random
import sys
from dataclasses import dataclass, field
from typing import Any, Final

import click

from abcast.cli_params import (
    SECONDS,
    SEED,
    TRANSPORT,
    Number,
    count,
    fail,
    scheme_of,
    transport_help,
)
from abcast.errors import AbcastError, ConfigError
from abcast.ordering.registry import OrderingOptions
from abcast.replicated.batteries import Account
from abcast.replicated.handle import ReplicatedHandle, require_total_order, total_orderings

GROUP: Final = "bank"
MAX_AMOUNT: Final = 100
START_TIMEOUT_S: Final = 60.0


@dataclass(frozen=True, slots=True)
class BankConfig:
    nodes: int
    ordering: str
    operations: int
    transport: str = "tcp"  # a scheme
    seed: int = 1
    timeout_s: float = 120.0
    options: OrderingOptions = field(default_factory=OrderingOptions)
    #: node i serves Prometheus /metrics on metrics_port + i (0: each a free port)
    metrics_port: int | None = None

    def validate(self) -> None:
        from abcast.transport import known_schemes

        if self.nodes < 1:
            raise ConfigError("--nodes must be at least 1")
        if self.operations < 0:
            raise ConfigError("--operations must be >= 0")
        if self.timeout_s <= 0:
            raise ConfigError("--timeout must be positive")
        require_total_order(self.ordering, self.options)
        if self.transport not in known_schemes():
            raise ConfigError(f"unknown transport {self.transport!r}; choose one of: "
                              f"{', '.join(known_schemes())}")

    def bind_url(self) -> str:
        return "mem://" if self.transport == "mem" else f"{self.transport}://127.0.0.1:0"

    def share(self, index: int) -> int:
        """Operations node `index` (0-based) issues."""
        return len(range(index, self.operations, self.nodes))


@dataclass(frozen=True, slots=True)
class BankReport:
    node: str
    balance: int
    applied: int
    refused: int  # withdrawals this node issued that would have overdrawn


async def run_bank_node(config: BankConfig, index: int, registry: str) -> BankReport:
    """One node of the demo (a process, or a task for mem://)."""
    from abcast.runtime.group import Group

    node = f"n{index + 1}"
    handle = ReplicatedHandle(Account())
    group = Group(GROUP, ordering=config.ordering, transport=config.bind_url(),
                  registry=registry, node=node, size=config.nodes,
                  on_deliver=handle.on_deliver, options=config.options,
                  metrics_port=None if config.metrics_port is None
                  else config.metrics_port and config.metrics_port + index)
    async with group:
        handle.bind(group)
        rng = random.Random(f"{config.seed}:{node}")
        refused = 0
        for _ in range(config.share(index)):
            amount = rng.randint(1, MAX_AMOUNT)
            if rng.random() < 0.5:
                await handle.call_write("deposit", amount)
            elif not await handle.call_write("withdraw", amount):
                refused += 1
        await handle.wait_until(lambda _acc: handle.applied >= config.operations)
        balance = await handle.call_read("get")
        client = group.host.registry
        if client is not None:
            await client.done(GROUP)
            await client.wait_done(GROUP, config.nodes)
    return BankReport(node, balance, handle.applied, refused)


@dataclass(slots=True)
class BankResult:
    reports: dict[str, BankReport]
    errors: list[str]

    @property
    def balances(self) -> dict[str, int]:
        return {n: r.balance for n, r in sorted(self.reports.items(),
                                                key=lambda kv: int(kv[0][1:]))}

    @property
    def equal(self) -> bool:
        return bool(self.reports) and len(set(self.balances.values())) == 1

    def summary(self) -> dict[str, Any]:
        return {"balances": self.balances, "equal": self.equal,
                "refused_withdrawals": sum(r.refused for r in self.reports.values()),
                "errors": self.errors}


async def run_bank(config: BankConfig) -> BankResult:
    """The whole demo: registry, N nodes, their reports."""
    from abcast.registry.server import RegistryServer

    config.validate()
    result = BankResult({}, [])
    async with RegistryServer() as server, contextlib.AsyncExitStack() as stack:
        if config.ordering == "ticket" and not config.options.ticket:
            # ordering "ticket" numbers from a server outside the group: start one
            from abcast.apps.ticket_server import TicketService

            ticket = await stack.enter_async_context(TicketService(
                [GROUP], registry=server.url, listen=config.bind_url()))
            config = dataclasses.replace(config, options=dataclasses.replace(
                config.options, ticket=ticket.url))
        try:
            async with asyncio.timeout(config.timeout_s):
                if config.transport == "mem":
                    await _in_process(config, server.url, result)
                else:
                    await _processes(config, server.url, result)
        except TimeoutError:
            result.errors.append(f"timed out after {config.timeout_s:g}s with "
                                 f"{len(result.reports)} of {config.nodes} reports")
    if len(result.reports) < config.nodes and not result.errors:
        result.errors.append(f"only {len(result.reports)} of {config.nodes} nodes reported")
    return result


async def _in_process(config: BankConfig, registry: str, result: BankResult) -> None:
    outcomes = await asyncio.gather(
        *(run_bank_node(config, i, registry) for i in range(config.nodes)),
        return_exceptions=True)
    for i, outcome in enumerate(outcomes):
        if isinstance(outcome, BankReport):
            result.reports[outcome.node] = outcome
        else:
            result.errors.append(f"n{i + 1}: {type(outcome).__name__}: {outcome}")


def _worker_command(config: BankConfig, index: int, registry: str) -> list[str]:
    cmd = [sys.executable, "-m", "abcast.apps.bank", "bank-node", "--index", str(index),
           "--registry", registry, "--nodes", str(config.nodes), "--ordering",
           config.ordering, "--operations", str(config.operations), "--transport",
           config.transport, "--seed", str(config.seed)]
    matrix = config.options.matrix
    cmd += ["--heartbeat-ms", repr(matrix.period_us / 1000)]
    if not matrix.adaptive:
        cmd.append("--fixed-heartbeat")
    if config.options.ticket:
        cmd += ["--ticket", config.options.ticket]
    if config.metrics_port is not None:
        cmd += ["--metrics-port", str(config.metrics_port)]
    return cmd


async def _processes(config: BankConfig, registry: str, result: BankResult) -> None:
    procs = [await asyncio.create_subprocess_exec(
        *_worker_command(config, i, registry), stdout=asyncio.subprocess.PIPE)
        for i in range(config.nodes)]
    try:
        lines = await asyncio.gather(*(_last_line(p) for p in procs))
    finally:
        for proc in procs:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
            await proc.wait()
    for i, line in enumerate(lines):
        try:
            raw = json.loads(line)
            report = BankReport(str(raw["node"]), int(raw["balance"]), int(raw["applied"]),
                                int(raw["refused"]))
        except (ValueError, KeyError, TypeError):
            result.errors.append(f"n{i + 1}: {line.strip()[:300] or 'no report'}")
            continue
        result.reports[report.node] = report


async def _last_line(proc: asyncio.subprocess.Process) -> str:
    assert proc.stdout is not None
    last = ""
    while line := await proc.stdout.readline():
        last = line.decode(errors="replace")
    await proc.wait()
    return last


def _options(heartbeat_ms: float, fixed: bool) -> OrderingOptions:
    from abcast.ordering.matrix import MatrixConfig

    period = round(heartbeat_ms * 1000)
    return OrderingOptions(matrix=MatrixConfig(
        period_us=period, adaptive=not fixed, idle_max_us=max(period, 2_400_000)))


# ---------------------------------------------------------------- the command line

@click.group()
def demo() -> None:
    """Demonstrations built on abcast."""


@demo.command()
@click.option("--nodes", default=3, show_default=True, type=count(1, 64),
              help="Processes (replicas) in the group.")
@click.option("--ordering", default="matrix", show_default=True,
              type=click.Choice(total_orderings()),
              help="The group's ordering (one that claims total order).")
@click.option("--operations", default=100, show_default=True, type=count(0),
              help="Deposits and withdrawals over the whole group (K).")
@click.option("--transport", default="tcp", show_default=True, type=TRANSPORT,
              help=transport_help("The nodes' transport (only its scheme is used); mem runs "
                                  "every node in this process"))
@click.option("--seed", default=1, show_default=True, type=SEED,
              help="Seed of the random amounts.")
@click.option("--heartbeat-ms", default=300.0, show_default=True,
              type=Number(float, low=0.001, what="ms"),  # MatrixConfig: whole µs, >= 1
              help="matrix: the NOPE heartbeat period (adaptive: its idle start).")
@click.option("--fixed-heartbeat", is_flag=True, help="matrix: the thesis's fixed period.")
@click.option("--timeout", default=120.0, show_default=True, type=SECONDS,
              help="Seconds before the demo gives up on the nodes.")
@click.option("--json", "as_json", is_flag=True, help="One JSON line on stdout.")
@click.option("--metrics-port", default=None, type=count(0, 65_000, "port"),  # + i <= 65_535
              help="Node i serves Prometheus /metrics on this port + i (0: free ports).")
def bank(nodes: int, ordering: str, operations: int, transport: str, seed: int,
         heartbeat_ms: float, fixed_heartbeat: bool, timeout: float, as_json: bool,
         metrics_port: int | None) -> None:
    """N processes apply K random deposits and withdrawals to one replicated Account."""
    try:
        config = BankConfig(nodes, ordering, operations, scheme_of(transport), seed, timeout,
                            _options(heartbeat_ms, fixed_heartbeat), metrics_port)
        result = asyncio.run(run_bank(config))
    except AbcastError as exc:
        fail(str(exc))
    summary = result.summary()
    if as_json:
        click.echo(json.dumps(summary))
    else:
        for node, balance in summary["balances"].items():
            click.echo(f"{node}: {balance}")
        click.echo("balances equal" if result.equal else "BALANCES DIFFER", err=not result.equal)
        for error in result.errors:
            click.echo(f"error: {error}", err=True)
    sys.exit(0 if result.equal and not result.errors else 1)


@demo.command("bank-node", hidden=True)
@click.option("--index", required=True, type=click.IntRange(0))
@click.option("--registry", required=True)
@click.option("--nodes", required=True, type=click.IntRange(1))
@click.option("--ordering", required=True)
@click.option("--operations", required=True, type=click.IntRange(0))
@click.option("--transport", default="tcp")
@click.option("--seed", default=1, type=int)
@click.option("--heartbeat-ms", default=300.0, type=float)
@click.option("--fixed-heartbeat", is_flag=True)
@click.option("--metrics-port", default=None, type=int)
@click.option("--ticket", default="")
def bank_node(index: int, registry: str, nodes: int, ordering: str, operations: int,
              transport: str, seed: int, heartbeat_ms: float, fixed_heartbeat: bool,
              metrics_port: int | None, ticket: str) -> None:
    """One node of `demo bank` (started by it): prints one JSON report line."""
    config = BankConfig(nodes, ordering, operations, transport, seed,
                        options=dataclasses.replace(_options(heartbeat_ms, fixed_heartbeat),
                                                    ticket=ticket),
                        metrics_port=metrics_port)
    try:
        report = asyncio.run(run_bank_node(config, index, registry))
    except Exception as exc:  # reported to the parent, which prints it
        click.echo(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
        sys.exit(1)
    click.echo(json.dumps({"node": report.node, "balance": report.balance,
                           "applied": report.applied, "refused": report.refused}))


if __name__ == "__main__":
    demo()
