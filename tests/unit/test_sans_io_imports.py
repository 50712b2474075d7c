"""Protocol cores stay sans-IO: no asyncio, sockets, clocks or unseeded randomness."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src" / "abcast"
CORE_DIRS = ("ordering", "reliability", "group", "consensus", "membership", "security")
CORE_FILES = ("stack.py", "codec.py", "events.py", "effects.py", "ids.py", "workload.py",
              "batching.py", "snapshot.py", "layer.py", "rpc/voting.py", "rpc/executor.py",
              "rpc/wire.py")
BANNED = {"asyncio", "socket", "time", "random", "selectors", "threading", "trio", "uvloop"}


def _core_modules() -> list[Path]:
    files = [SRC / name for name in CORE_FILES]
    for d in CORE_DIRS:
        files.extend(sorted((SRC / d).rglob("*.py")))
    return [f for f in files if f.exists()]


def _imported_roots(path: Path) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            roots.add(node.module.split(".")[0])
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) == "__import__":
            roots.add("__import__")
    return roots


def test_there_are_core_modules_to_check() -> None:
    names = {p.name for p in _core_modules()}
    assert {"channel.py", "nak.py", "fifo.py", "unordered.py", "stack.py"} <= names


@pytest.mark.parametrize("path", _core_modules(), ids=lambda p: str(p.relative_to(SRC)))
def test_core_module_imports_nothing_banned(path: Path) -> None:
    bad = _imported_roots(path) & (BANNED | {"__import__"})
    assert not bad, f"{path.relative_to(SRC)} imports {sorted(bad)}"


def test_the_checker_itself_catches_a_banned_import(tmp_path: Path) -> None:
    sneaky = tmp_path / "sneaky.py"
    sneaky.write_text("import os\nfrom time import monotonic\nimport asyncio.events\n")
    assert _imported_roots(sneaky) & BANNED == {"time", "asyncio"}
