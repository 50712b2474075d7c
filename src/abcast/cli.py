"""The `abcast` command line. Thin: parse, call the library, print, pick the exit code.

Exit codes: 0 clean, 1 the run or the check found violations, 2 bad arguments or input
(one line on stderr, `abcast: error: …`, no traceback; abcast.cli_params declares every
parameter and formats every refusal). With `--json` the last stdout line is a single
JSON object; progress and tables go to stderr then, so stdout stays machine-readable.
"""

from __future__ import annotations

import asyncio
import faulthandler
import importlib
import json
import os
import signal
import sys
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, Final, NoReturn, TypeVar

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from abcast.cli_params import (
    EXIT_USAGE,
    GROUP_SIZE,
    NAME,
    NAME_SIZE,
    OUT_DIR,
    PAYLOAD,
    PORT,
    RATE,
    REGISTRY_URL,
    SECONDS,
    SECONDS_OR_ZERO,
    SEED,
    TRANSPORT,
    GroupFlags,
    count,
    fail,
    group_options,
    group_secret,
    make_out_dir,
    ordering_options,
    scheme_of,
    secret_option,
    transport_help,
    usage_error,
)
from abcast.errors import AbcastError
from abcast.logs import FORMATS, LOG_FORMAT_ENV
from abcast.logs import configure as configure_logging
from abcast.ordering.registry import ORDERINGS

EXIT_VIOLATIONS: Final = 1
__all__ = ["EXIT_USAGE", "EXIT_VIOLATIONS", "cli", "fail", "main"]

T = TypeVar("T")

#: --ordering, the same wherever a group is made
_ORDERING: Final = click.option(
    "--ordering", required=True, type=click.Choice(sorted(ORDERINGS)),
    help="Ordering protocol in the ordering slot of the stack.")
_JSON: Final = click.option("--json", "as_json", is_flag=True,
                            help="Last stdout line is a JSON summary.")
_VERBOSE: Final = click.option("-v", "--verbose", is_flag=True,
                               help="Log at INFO level on stderr.")


#: commands that live beside their subject, imported only when named (or listed by
#: --help): `abcast node` loads neither the simulator, Spark nor pyarrow. name ->
#: (module, attribute, subcommands added to it as module:attribute)
_LAZY_COMMANDS: Final = {
    "bench": ("abcast.evaluation.cli", "bench", ()),
    "call": ("abcast.apps.rpc_commands", "call", ()),
    "check": ("abcast.pipeline.commands", "check", ()),
    "demo": ("abcast.apps.bank", "demo", ("abcast.apps.certify:certify",
                                          "abcast.apps.chat:chat")),
    "group": ("abcast.apps.groups", "group", ()),
    "probe": ("abcast.cli_probe", "probe_command", ()),
    "report": ("abcast.pipeline.commands", "report", ()),
    "serve": ("abcast.apps.rpc_commands", "serve", ()),
    "ticket-server": ("abcast.apps.ticket_server", "ticket_server", ()),
}


def _load(where: str, attribute: str) -> click.Command:
    command = getattr(importlib.import_module(where), attribute)
    assert isinstance(command, click.Command)
    return command


class _LazyGroup(click.Group):
    """The top-level group: the commands of _LAZY_COMMANDS are imported when asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *_LAZY_COMMANDS})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        lazy = _LAZY_COMMANDS.get(cmd_name)
        if lazy is not None and cmd_name not in self.commands:
            where, attribute, subcommands = lazy
            command = _load(where, attribute)
            for sub in subcommands:
                assert isinstance(command, click.Group)
                command.add_command(_load(*sub.split(":")))
            self.add_command(command, cmd_name)
        return super().get_command(ctx, cmd_name)


@click.group(cls=_LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="abcast")
@click.option("--log-format", type=click.Choice(FORMATS), default=None, envvar=LOG_FORMAT_ENV,
              help="Logs on stderr as text lines or one JSON object per line.")
def cli(log_format: str | None) -> None:
    """abcast: group communication with the delivery guarantee you choose."""
    if log_format is not None:
        os.environ[LOG_FORMAT_ENV] = log_format  # the nodes it starts log the same way


@cli.command()
@_ORDERING
@click.option("--nodes", default=3, show_default=True, type=count(1, 256),
              help="Nodes n1…nN in the group.")
@click.option("--messages", default=1000, show_default=True, type=count(0),
              help="Messages broadcast over the whole run, round-robin over the nodes.")
@click.option("--seed", default=1, show_default=True, type=SEED,
              help="The run's one seed: same arguments, same seed, the same trace.")
@click.option("--faults", default="", help="e.g. drop=0.1,dup=0.05,delay=1-30ms,"
              "crash=n2@300ms,partition=n1+n2|n3@100ms-400ms,hold=n1@100ms-200ms (a side "
              "'*': every other node, joiners included)")
@click.option("--payload", default=64, show_default=True, type=PAYLOAD,
              help="Payload bytes per message.")
@click.option("--rate", default=None, type=RATE,
              help="Open loop: broadcasts per second over the whole group.")
@ordering_options()
@click.option("--net-trace", is_flag=True, help="Record net_send/net_recv rows.")
@click.option("--out", required=True, type=OUT_DIR,
              help="Trace directory (runs.parquet + events/).")
@_JSON
def sim(
    ordering: str, nodes: int, messages: int, seed: int, faults: str, payload: int,
    rate: float | None, flags: GroupFlags, net_trace: bool, out: Path, as_json: bool,
) -> None:
    """Simulate N nodes broadcasting M messages round-robin; write and check the trace."""
    from abcast.sim import SimConfig, run_simulation

    console = Console(stderr=True)
    options = group_options(ordering, flags)
    try:
        config = SimConfig(
            ordering=ordering, nodes=nodes, messages=messages, seed=seed, faults=faults,
            payload=payload, rate=rate, net_trace=net_trace, options=options,
        )
        with _Progress(console, "simulating") as advance:
            result = run_simulation(config, on_progress=advance)
        result.write(make_out_dir(out))
    except AbcastError as exc:
        fail(str(exc))
    summary = result.summary()
    _print_summary(console if as_json else Console(), summary, out)
    if as_json:
        click.echo(json.dumps(summary, sort_keys=False))
    _exit_run(bool(result.violations),
              None if result.quiescent else
              f"not quiescent: stopped at {result.end_us / 1e6:g} virtual s, "
              f"{result.delivered} deliveries (on all nodes), still pending or stalled")


def _exit_run(violations: bool, unfinished: str | None) -> NoReturn:
    """The one exit rule of a run (sim, cluster): 0 only when it finished and its trace
    is clean; an unfinished run also says why, in one line on stderr."""
    if unfinished is not None:
        click.echo(f"abcast: run incomplete: {unfinished}", err=True)
    sys.exit(EXIT_VIOLATIONS if violations or unfinished is not None else 0)


class _Progress:
    """A rich progress bar for `on_progress(done, total)` callbacks; off a terminal, no
    bar (a bar that is not redrawn would only leave a blank line)."""

    def __init__(self, console: Console, label: str) -> None:
        self._bar = Progress(
            TextColumn(f"[bold]{label}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(), console=console, transient=True,
            disable=not console.is_terminal,
        )
        self._task = self._bar.add_task(label, total=None)

    def __enter__(self) -> Callable[[int, int], None]:
        self._bar.start()

        def advance(done: int, total: int) -> None:
            self._bar.update(self._task, completed=done, total=total)

        return advance

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()


#: how the summary tables name a key whose bare name misleads
_SHOWN: Final = {"delivered": "delivered (on all nodes)"}


def _print_summary(console: Console, summary: dict[str, Any], out: Path) -> None:
    table = Table(title=f"run {summary['run_id']}", show_header=False)
    for key in ("ordering", "nodes", "messages", "delivered", "packets_per_broadcast",
                "retransmissions", "virtual_ms", "quiescent"):
        table.add_row(_SHOWN.get(key, key), str(summary[key]))
    violations = summary["violations"]
    verdict = (
        "[green]none[/green]" if not violations
        else "[red]" + ", ".join(f"{c}={n}" for c, n in violations.items()) + "[/red]"
    )
    table.add_row("violations", verdict)
    table.add_row("trace", str(out))
    console.print(table)


# ---------------------------------------------------------------- the real runtime


_WAN: Final = click.option(
    "--wan", default=None, type=click.Path(dir_okay=False, exists=True),
    help="Emulate WAN links (transport/wan.py) as this RTT-matrix file describes.")


def _run_async(main: Coroutine[Any, Any, T]) -> T:
    from abcast.runtime.loop import run_async

    return run_async(main)


def _logging(verbose: bool) -> None:
    configure_logging(verbose)


@cli.command()
@click.option("--nodes", default=3, show_default=True, type=count(1, 256),
              help="Nodes n1…nN in the group.")
@_ORDERING
@click.option("--transport", default="tcp", show_default=True, type=TRANSPORT,
              help=transport_help("The nodes' transport (only its scheme is used: each "
                                  "node binds 127.0.0.1, a free port); mem runs every "
                                  "node in this one process"))
@click.option("--messages", default=1000, show_default=True, type=count(0),
              help="Messages broadcast over the whole run, round-robin over the nodes.")
@click.option("--payload", default=64, show_default=True, type=PAYLOAD,
              help="Payload bytes per message (>= 8 stamps the send time into it).")
@click.option("--rate", default=None, type=RATE,
              help="Open loop: broadcasts per second over the whole group.")
@click.option("--serial", is_flag=True,
              help="One message in flight: message k leaves once its sender delivered "
                   "message k-1 (the lone-message latency).")
@click.option("--trace", default="on", show_default=True, type=click.Choice(["on", "off"]),
              help="off: record only counters and latencies, write no trace.")
@click.option("--loop", "event_loop", default=None, type=click.Choice(["asyncio", "uvloop"]),
              help="The node processes' event loop (default: uvloop when installed).")
@click.option("--busy-poll", "busy_poll_us", default=0, show_default=True,
              type=count(0, 10_000, "us"),
              help="µs the node processes keep polling their sockets after each read or "
                   "write instead of sleeping (lower latency, more CPU); 0: off.")
@_WAN
@ordering_options(suspect_after_default=2000)
@click.option("--registry", default=None, type=REGISTRY_URL,
              help="Use this running registry (tcp://host:port) instead of starting one.")
@click.option("--timeout", default=600.0, show_default=True, type=SECONDS,
              help="Seconds before an unfinished run is stopped (and reported incomplete).")
@click.option("--out", required=True, type=OUT_DIR,
              help="Trace directory (runs.parquet + events/).")
@_JSON
@click.option("--metrics", is_flag=True, help="Every node serves Prometheus /metrics.")
@_VERBOSE
def cluster(
    nodes: int, ordering: str, transport: str, messages: int, payload: int,
    rate: float | None, serial: bool, trace: str, event_loop: str | None, busy_poll_us: int,
    wan: str | None, flags: GroupFlags, registry: str | None, timeout: float, out: Path,
    as_json: bool, metrics: bool, verbose: bool,
) -> None:
    """Run N real nodes on 127.0.0.1 broadcasting M messages round-robin; check the trace."""
    from abcast.evaluation.cluster import ClusterConfig
    from abcast.evaluation.launcher import run_cluster

    _logging(verbose)
    scheme = scheme_of(transport)
    options = group_options(ordering, flags)
    config = ClusterConfig(
        nodes=nodes, ordering=ordering, transport=scheme, messages=messages, out=out,
        payload=payload, rate=rate, serial=serial, trace=trace == "on", wan=wan,
        event_loop=event_loop, busy_poll_us=busy_poll_us, options=options,
        timeout_s=timeout, registry=registry, metrics=metrics,
    )
    console = Console(stderr=True)
    try:
        config.validate()
        make_out_dir(out)
        with console.status(f"running {nodes} nodes over {scheme}"):
            result = _run_async(run_cluster(config))
    except AbcastError as exc:
        fail(str(exc))
    summary = result.summary()
    _print_cluster_summary(console if as_json else Console(), summary, out)
    if as_json:
        click.echo(json.dumps(summary, sort_keys=False))
    _exit_run(bool(result.violations),
              None if result.complete else
              "; ".join(result.errors) or "a node did not deliver every message")


def _print_cluster_summary(console: Console, summary: dict[str, Any], out: Path) -> None:
    table = Table(title=f"run {summary['run_id']}", show_header=False)
    for key in ("ordering", "transport", "nodes", "messages", "delivered",
                "packets_per_broadcast", "retransmissions", "wall_ms",
                "throughput_msgs_per_s", "latency_p50_us", "latency_p99_us", "bad_frames",
                "quiescent"):
        table.add_row(_SHOWN.get(key, key), str(summary[key]))
    violations = summary["violations"]
    verdict = (
        ("[green]none[/green]" if summary["traced"] else "not checked (--trace off)")
        if not violations
        else "[red]" + ", ".join(f"{c}={n}" for c, n in violations.items()) + "[/red]"
    )
    table.add_row("violations", verdict)
    for error in summary["errors"]:
        table.add_row("[red]error[/red]", error)
    table.add_row("trace", str(out) if summary["traced"] else "-")
    console.print(table)


@cli.command()
@click.option("--listen", default="tcp://127.0.0.1:7400", show_default=True, type=REGISTRY_URL,
              help="Address to serve on (port 0: any free one).")
@click.option("--json", "as_json", is_flag=True,
              help='First stdout line is {"url": ...}, the address actually bound.')
@click.option("--recovery-grace", default=1.0, show_default=True, type=SECONDS_OR_ZERO,
              help="Seconds new nodes wait after start, so that after a restart running "
                   "members re-claim their ids before any id is handed out again.")
@click.option("--group", "groups", multiple=True, type=NAME_SIZE,
              help="Declare a group's size up front (repeatable), so members may join "
                   "without naming it.")
@click.option("--stop-on-eof", is_flag=True, hidden=True,
              help="Stop when stdin closes (the cluster launcher's lifeline).")
@secret_option("every group and node id here (only its holders may change anything)")
@_VERBOSE
def registry(
    listen: str, as_json: bool, recovery_grace: float, groups: tuple[tuple[str, int], ...],
    stop_on_eof: bool, secret_file: Path | None, verbose: bool,
) -> None:
    """Run the registration server (node ids, group members, leaders) until interrupted."""
    from abcast.registry import RegistryServer, parse_registry_url

    _logging(verbose)
    secret = group_secret(secret_file)
    sizes = dict(groups)
    host, port = parse_registry_url(listen)  # (REGISTRY_URL checked it)

    async def serve() -> None:
        server = RegistryServer(host, port, recovery_grace_s=recovery_grace, sizes=sizes,
                                secret=secret)
        try:
            url = await server.start()
        except OSError as exc:
            fail(f"cannot listen on {listen}: {exc.strerror or exc}")
        click.echo(json.dumps({"url": url}) if as_json else f"registry listening on {url}")
        sys.stdout.flush()
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        if stop_on_eof:
            loop.add_reader(sys.stdin.fileno(), stop.set)  # readable at EOF
        try:
            await stop.wait()
        finally:
            await server.close()

    _run_async(serve())


@cli.command()
@click.option("--registry", "registry_url", required=True, type=REGISTRY_URL,
              help="The registry to join through (tcp://host:port).")
@click.option("--group", default="g", show_default=True, type=NAME,
              help="The group's name at the registry.")
@_ORDERING
@click.option("--transport", default="tcp://127.0.0.1:0", show_default=True, type=TRANSPORT,
              help=transport_help("Address to bind (advertised to the group through the "
                                  "registry)"))
@click.option("--size", required=True, type=GROUP_SIZE,
              help="Members the group has; the run starts once all have joined.")
@click.option("--messages", required=True, type=count(0),
              help="Messages of the whole run (M): this node is done once it delivered M.")
@click.option("--payload", default=64, show_default=True, type=PAYLOAD,
              help="Payload bytes per message.")
@click.option("--rate", default=None, type=RATE,
              help="Open loop: broadcasts per second over the whole group.")
@click.option("--serial", is_flag=True,
              help="One message in flight: send message k once message k-1 is delivered.")
@click.option("--node", "claim", default=None, type=NAME,
              help="Claim this node id (default: assigned).")
@click.option("--run-id", default=None, type=NAME,
              help="Trace run id shared by every node of the run.")
@click.option("--out", default=None, type=OUT_DIR, help="Write this node's trace rows here.")
@click.option("--trace", default="on", show_default=True, type=click.Choice(["on", "off"]),
              help="off: record only counters and latencies, write no trace.")
@_WAN
@ordering_options()
@click.option("--control", default="registry", show_default=True,
              type=click.Choice(["registry", "pipe"]),
              help="registry: start and stop through the registry (nodes started by hand); "
                   "pipe: go/stop lines on stdin (the cluster launcher).")
@click.option("--metrics-port", default=None, type=PORT,
              help="Serve Prometheus /metrics on this port (0: any free one; default off).")
@click.option("--metrics-host", default="127.0.0.1", show_default=True,
              help="Address /metrics listens on (0.0.0.0: every interface).")
@click.option("--probe/--no-probe", default=True, show_default=True,
              help="Answer `abcast probe` on a local control socket.")
@secret_option()
@_VERBOSE
def node(
    registry_url: str, group: str, ordering: str, transport: str, size: int, messages: int,
    payload: int, rate: float | None, serial: bool, claim: str | None, run_id: str | None,
    out: Path | None, trace: str, wan: str | None, flags: GroupFlags,
    control: str, metrics_port: int | None, metrics_host: str, probe: bool,
    secret_file: Path | None, verbose: bool,
) -> None:
    """Run one node of a round-robin run; prints JSON lines (ready, done, result)."""
    from abcast.evaluation.worker import (
        Failed,
        Result,
        StoppedError,
        WorkerConfig,
        emit,
        run_manual_node,
        run_pipe_node,
    )

    if serial and rate is not None:
        fail("--serial is a closed loop: it takes no --rate")
    options = group_options(ordering, flags)
    _logging(verbose)
    faulthandler.register(signal.SIGUSR1)  # `kill -USR1 <pid>` prints where a node is stuck
    if out is not None and trace == "on":
        make_out_dir(out)
    config = WorkerConfig(
        group=group, ordering=ordering, transport=transport, size=size, messages=messages,
        registry=registry_url, run_id=run_id or f"{group}-{ordering}-n{size}-m{messages}",
        node=claim, payload=payload, rate=rate, serial=serial,
        out=out if trace == "on" else None,
        options=options, wan=wan, metrics_port=metrics_port, metrics_host=metrics_host,
        probe=probe, secret=group_secret(secret_file),
    )
    runner = run_pipe_node if control == "pipe" else run_manual_node
    try:
        outcome = _run_async(runner(config))
    except StoppedError:
        sys.exit(EXIT_VIOLATIONS)
    except AbcastError as exc:
        emit(Failed(str(exc)))
        fail(str(exc))
    emit(Result(outcome))
    sys.exit(0 if outcome.complete else EXIT_VIOLATIONS)


def main() -> None:
    """The `abcast` entry point: click's own refusals in the one error format."""
    try:
        code = cli.main(prog_name="abcast", standalone_mode=False)
    except click.ClickException as exc:
        usage_error(exc)
    except click.exceptions.Abort:
        click.echo("", err=True)
        sys.exit(130)
    sys.exit(code if isinstance(code, int) else 0)


if __name__ == "__main__":
    main()
