"""`abcast probe`: ask live nodes on this host for their groups, views, leader, every
layer's snapshot, counters and config (abcast.runtime.probe), as tables or `--json`.

Rules: exit code 0 when at least one node answered, 1 when none did (no socket, or
every socket refused); with `--json` stdout holds one JSON line, a list of node
statuses (sockets that did not answer are named on stderr).
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
import msgspec

from abcast.runtime.probe import ProbeAnswer, probe, probe_dir
from abcast.runtime.status import GroupStatus, NodeStatus


@click.command("probe")
@click.argument("nodes", nargs=-1)
@click.option("--dir", "folder", default=None, type=click.Path(file_okay=False, path_type=Path),
              help="Where the nodes' control sockets are (default: $ABCAST_PROBE_DIR, "
                   "else <tmp>/abcast-probe-<uid>).")
@click.option("--socket", "paths", multiple=True, type=click.Path(path_type=Path),
              help="Ask the node at this socket (repeatable) instead of every one in --dir.")
@click.option("--json", "as_json", is_flag=True, help="One JSON line: a list of node statuses.")
def probe_command(
    nodes: tuple[str, ...], folder: Path | None, paths: tuple[Path, ...], as_json: bool,
) -> None:
    """Ask the live nodes on this host (all, or those named NODES) what they are doing."""
    answers = probe(nodes, folder, paths)
    statuses = [a.status for a in answers if a.status is not None]
    for answer in answers:
        if answer.status is None:
            click.echo(f"abcast probe: {answer.path}: no answer ({answer.error})", err=True)
    if as_json:
        click.echo(msgspec.json.encode(statuses).decode())
    else:
        _print(answers)
    if not statuses:
        where = ", ".join(map(str, paths)) if paths else str(folder or probe_dir())
        click.echo(f"abcast probe: no live node answered ({where})", err=True)
        sys.exit(1)


def _print(answers: list[ProbeAnswer]) -> None:
    from rich.console import Console

    console = Console()
    for answer in answers:
        if answer.status is not None:
            _print_node(console, answer.status)


def _print_node(console: object, status: NodeStatus) -> None:
    from rich.console import Console
    from rich.table import Table

    assert isinstance(console, Console)
    head = Table(title=f"node {status.node} (pid {status.pid})", show_header=False,
                 title_justify="left")
    head.add_row("address", status.address)
    head.add_row("metrics", status.metrics or "off")
    head.add_row("config", " ".join(f"{k}={v}" for k, v in status.config.items()))
    head.add_row("counters", _pairs(status.counters))
    for peer, t in status.peers.items():
        head.add_row(f"peer {peer}", f"out {t.frames_out} frames/{t.bytes_out} B, "
                                     f"in {t.frames_in} frames/{t.bytes_in} B")
    console.print(head)
    for group in status.groups:
        console.print(_group_table(group))


def _group_table(group: GroupStatus) -> object:
    from rich.table import Table

    table = Table(title=(f"group {group.name}: view {group.view_id} "
                         f"({', '.join(group.members)}), leader {group.leader}"
                         + (" (closed)" if group.closed else "")),
                  title_justify="left", caption=_pairs(group.counters), caption_justify="left")
    table.add_column("layer")
    table.add_column("phase")
    table.add_column("holdback", justify="right")
    table.add_column("counters")
    table.add_column("clock")
    for layer in group.layers:
        held = ", ".join(f"{h.origin}#{h.seq}: {h.waiting_for}" for h in layer.holdback[:3])
        table.add_row(layer.layer, layer.phase or "-",
                      str(len(layer.holdback)) + (f" ({held})" if held else ""),
                      _pairs(layer.counters), _short(msgspec.json.encode(layer.clock)))
    return table


def _pairs(values: dict[str, int]) -> str:
    return " ".join(f"{k}={v}" for k, v in values.items() if v) or "-"


def _short(data: bytes, limit: int = 80) -> str:
    text = data.decode()
    return "-" if text == "{}" else text if len(text) <= limit else text[: limit - 1] + "…"
