"""The `abcast` command line. Thin: parse, call the library, print, pick the exit code.

Exit codes: 0 clean, 1 the run or the check found violations, 2 bad arguments or input
(one clear line on stderr, no traceback). With `--json` the last stdout line is a single
JSON object; progress and tables go to stderr then, so stdout stays machine-readable.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from abcast.errors import AbcastError
from abcast.ordering.registry import ORDERINGS, OrderingOptions

EXIT_VIOLATIONS = 1
EXIT_USAGE = 2


def fail(message: str) -> NoReturn:
    click.echo(f"abcast: error: {message}", err=True)
    sys.exit(EXIT_USAGE)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="abcast")
def cli() -> None:
    """abcast: group communication with the delivery guarantee you choose."""


@cli.command()
@click.option("--ordering", required=True, type=click.Choice(sorted(ORDERINGS)),
              help="Ordering protocol in the ordering slot of the stack.")
@click.option("--nodes", default=3, show_default=True, type=click.IntRange(1, 256))
@click.option("--messages", default=1000, show_default=True, type=click.IntRange(0))
@click.option("--seed", default=1, show_default=True, type=int)
@click.option("--faults", default="", help="e.g. drop=0.1,dup=0.05,delay=1-30ms,"
              "crash=n2@300ms,partition=n1+n2|n3@100ms-400ms")
@click.option("--payload", default=64, show_default=True, type=click.IntRange(0),
              help="Payload bytes per message.")
@click.option("--rate", default=None, type=float,
              help="Open loop: broadcasts per second over the whole group.")
@click.option("--batch", default=None, type=click.IntRange(1),
              help="Message ids per order packet (sequencer family; default adaptive).")
@click.option("--safe", is_flag=True, help="Deliver only once a majority has the order.")
@click.option("--net-trace", is_flag=True, help="Record net_send/net_recv rows.")
@click.option("--out", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="Trace directory (runs.parquet + events/).")
@click.option("--json", "as_json", is_flag=True, help="Last stdout line is a JSON summary.")
def sim(
    ordering: str, nodes: int, messages: int, seed: int, faults: str, payload: int,
    rate: float | None, batch: int | None, safe: bool, net_trace: bool, out: Path,
    as_json: bool,
) -> None:
    """Simulate N nodes broadcasting M messages round-robin; write and check the trace."""
    from abcast.sim import SimConfig, run_simulation

    config = SimConfig(
        ordering=ordering, nodes=nodes, messages=messages, seed=seed, faults=faults,
        payload=payload, rate=rate, net_trace=net_trace,
        options=OrderingOptions(batch=batch, safe=safe),
    )
    console = Console(stderr=True)
    try:
        with _Progress(console, "simulating") as advance:
            result = run_simulation(config, on_progress=advance)
        result.write(out)
    except AbcastError as exc:
        fail(str(exc))
    summary = result.summary()
    _print_summary(console if as_json else Console(), summary, out)
    if as_json:
        click.echo(json.dumps(summary, sort_keys=False))
    sys.exit(EXIT_VIOLATIONS if result.violations else 0)


class _Progress:
    """A rich progress bar for `on_progress(done, total)` callbacks."""

    def __init__(self, console: Console, label: str) -> None:
        self._bar = Progress(
            TextColumn(f"[bold]{label}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
            TimeElapsedColumn(), console=console, transient=True,
        )
        self._task = self._bar.add_task(label, total=None)

    def __enter__(self) -> Callable[[int, int], None]:
        self._bar.start()

        def advance(done: int, total: int) -> None:
            self._bar.update(self._task, completed=done, total=total)

        return advance

    def __exit__(self, *exc: object) -> None:
        self._bar.stop()


def _print_summary(console: Console, summary: dict[str, Any], out: Path) -> None:
    table = Table(title=f"run {summary['run_id']}", show_header=False)
    for key in ("ordering", "nodes", "messages", "delivered", "packets_per_broadcast",
                "retransmissions", "virtual_ms", "quiescent"):
        table.add_row(key, str(summary[key]))
    violations = summary["violations"]
    verdict = (
        "[green]none[/green]" if not violations
        else "[red]" + ", ".join(f"{c}={n}" for c, n in violations.items()) + "[/red]"
    )
    table.add_row("violations", verdict)
    table.add_row("trace", str(out))
    console.print(table)


def _register_optional() -> None:
    """Commands whose modules live in optional parts of the package."""
    try:
        from abcast.pipeline.commands import check, report
    except ImportError:  # the pipeline package is optional at import time
        return
    cli.add_command(check)
    cli.add_command(report)


_register_optional()


def main() -> None:
    cli(prog_name="abcast")


if __name__ == "__main__":
    main()
