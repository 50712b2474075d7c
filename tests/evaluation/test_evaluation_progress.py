"""`abcast bench` with its output redirected (`./run main > log`) says a line per section
instead of nothing for minutes; on a terminal the bars do that job."""

from __future__ import annotations

import io

from rich.console import Console
from rich.progress import Progress

from abcast.evaluation.cli import RichProgress


def test_off_a_terminal_each_section_prints_one_line() -> None:
    out = io.StringIO()
    with Progress(console=Console(file=out, force_terminal=False)) as bars:
        progress = RichProgress(bars, 5)
        progress.begin("ping", 2)
        progress.advance()
        progress.advance()
        progress.begin("lone message", 3)
    lines = [line for line in out.getvalue().splitlines() if line.startswith("bench: ")]
    assert lines == ["bench: ping (2 steps; 0/5 done)", "bench: lone message (3 steps; 2/5 done)"]


def test_on_a_terminal_the_bars_say_it() -> None:
    out = io.StringIO()
    with Progress(console=Console(file=out, force_terminal=True)) as bars:
        RichProgress(bars, 1).begin("ping", 1)
    assert "bench: ping (" not in out.getvalue()
