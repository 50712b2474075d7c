"""Every code block of README.md and docs/*.md marked runnable runs as written and ends.

A block is runnable when its fence's info string says so: ```` ```python run ```` or
```` ```bash run ```` (GitHub highlights by the first word only). ```` ```bash run spark ````
needs Java and is marked `spark`. Each block runs in a fresh temporary directory with a
time limit: Python blocks with this interpreter (the project's venv), shell blocks under
`bash -euo pipefail` with the venv's bin directory first on PATH, so `abcast` is the
project's own. Blocks not marked (the two-terminal walk-through, `./run main`, the full
bench) are covered elsewhere: tests/cli/test_cli_groups.py runs the walk-through.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")))
TIMEOUT_S = 180
#: Spark's start-up and jobs take minutes on a loaded 2-core machine
SPARK_TIMEOUT_S = 900
_FENCE = re.compile(r"^```(\w+)((?: [\w-]+)*)\s*$")


@dataclass(frozen=True, slots=True)
class Block:
    doc: str
    line: int
    language: str
    tags: frozenset[str]
    text: str

    @property
    def name(self) -> str:
        return f"{self.doc}:{self.line}"


def runnable_blocks(path: Path) -> list[Block]:
    """The fenced blocks of `path` whose info string holds `run`."""
    blocks: list[Block] = []
    lines = path.read_text().splitlines()
    i = 0
    while i < len(lines):
        match = _FENCE.match(lines[i])
        if match is None:
            i += 1
            continue
        start = i
        i += 1
        body: list[str] = []
        while i < len(lines) and lines[i].rstrip() != "```":
            body.append(lines[i])
            i += 1
        i += 1
        tags = frozenset(match.group(2).split())
        if "run" in tags:
            blocks.append(Block(path.relative_to(ROOT).as_posix(), start + 1, match.group(1),
                                tags, "\n".join(body) + "\n"))
    return blocks


BLOCKS = [block for doc in DOCS for block in runnable_blocks(doc)]


def _param(block: Block) -> object:
    marks = [pytest.mark.spark, pytest.mark.timeout(SPARK_TIMEOUT_S + 60)] \
        if "spark" in block.tags else []
    return pytest.param(block, id=block.name, marks=marks)


def test_the_docs_have_runnable_blocks_in_both_languages() -> None:
    assert {b.language for b in BLOCKS} == {"python", "bash"}
    assert {b.doc for b in BLOCKS} >= {"README.md", "docs/groups.md"}


@pytest.mark.parametrize("block", [_param(b) for b in BLOCKS])
def test_a_runnable_block_runs_as_written_and_ends(block: Block, tmp_path: Path) -> None:
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env.pop("ABCAST_REGISTRY", None)
    if block.language == "python":
        script = tmp_path / "example.py"
        script.write_text(block.text)
        command = [sys.executable, str(script)]
    elif block.language == "bash":
        command = ["bash", "-euo", "pipefail", "-c", block.text]
    else:
        pytest.fail(f"{block.name}: no runner for {block.language!r} blocks")
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=SPARK_TIMEOUT_S if "spark" in block.tags else TIMEOUT_S,
                          check=False)
    assert done.returncode == 0, (
        f"{block.name} exited {done.returncode}\n--- stdout\n{done.stdout[-3000:]}"
        f"\n--- stderr\n{done.stderr[-3000:]}")
    assert "Traceback" not in done.stderr, done.stderr
