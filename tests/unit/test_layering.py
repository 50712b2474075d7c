"""The import contract (docs/design.md, "The import contract"): imports flow one way,
bottom to top, and no module imports itself back through others.

Rules: every module of the package belongs to one layer of `LAYERS` (the longest
prefix listed wins, so `abcast.ordering.registry` sits above the other `ordering`
modules); a module may import its own layer and the layers below, never above; no module
imports `abcast.testing` (the public test kit) but the kit itself; the module graph has
no cycle. Every import counts: top-level, inside functions and under TYPE_CHECKING.
`IGNORED` lists the edges tolerated for now, each with who removes it; an ignored edge
that no longer exists fails too, so the list cannot go stale. Nothing is imported: the
checker reads the source with `ast`.
"""

from __future__ import annotations

import ast
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src"

#: bottom to top; a module may import its own layer and the ones below it
LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("vocabulary", ("abcast.errors", "abcast.ids", "abcast.codec", "abcast.events",
                    "abcast.effects", "abcast.snapshot", "abcast.layer")),
    # the sans-IO protocol cores, and the sans-IO helpers the drivers share with them
    # (abcast.membership: the membership layer issue #19 introduces, on branch `mem`)
    # (abcast.security: the link handshake, frame MACs/AEAD and key derivation, sans-IO)
    ("cores", ("abcast.ordering", "abcast.reliability", "abcast.group", "abcast.consensus",
               "abcast.membership", "abcast.batching", "abcast.workload", "abcast.security")),
    # composition: the stack, and the registry of orderings that builds stacks
    ("stack", ("abcast.stack", "abcast.ordering.registry")),
    ("trace/checks", ("abcast.trace", "abcast.checks")),
    # (abcast.tasks: stopping a background task without losing the caller's cancellation)
    # (the native lane: abcast._lane and abcast._steady_codec, compiled from
    # src/abcast/_native, and abcast.native_sources, which sources and their hash; its glue
    # is abcast.runtime.lane)
    ("sim/runtime/transport/registry", ("abcast.sim", "abcast.runtime", "abcast.transport",
                                        "abcast.registry", "abcast.tasks", "abcast._lane",
                                        "abcast._steady_codec", "abcast.native_sources")),
    # (abcast.rpc: where DESIGN places client/server requests, being built on branch `rpc`)
    # (abcast.cli_params: the command-line parameter types and the one error line, used by
    # the commands that live in pipeline/ and evaluation/ as well as by cli and apps)
    ("replicated/pipeline/evaluation", ("abcast.replicated", "abcast.rpc", "abcast.pipeline",
                                        "abcast.evaluation", "abcast.cli_params")),
    # the entry points: the command line, its apps, the package's public face, the test kit
    ("cli/apps", ("abcast.cli", "abcast.cli_probe", "abcast.logs", "abcast.apps", "abcast.testing",
                  "abcast")),
)

#: packages only they themselves may import (production code never imports the test kit)
PRIVATE = ("abcast.testing",)

#: (importer, imported) edges tolerated for now, and who removes each
IGNORED: Mapping[tuple[str, str], str] = {}


@dataclass(frozen=True, slots=True)
class Import:
    importer: str
    imported: str
    line: int


def modules(src: Path, package: str = "abcast") -> dict[str, Path]:
    """Dotted module name -> file, for every module of `package` under `src` (a compiled
    extension by its type stub, `.pyi` without a `.py`)."""
    out: dict[str, Path] = {}
    sources = sorted((src / package).rglob("*.py"))
    stubs = [stub for stub in sorted((src / package).rglob("*.pyi"))
             if not stub.with_suffix(".py").exists()]
    for path in sources + stubs:
        parts = path.relative_to(src).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _resolve(name: str, known: Mapping[str, Path]) -> str | None:
    """The longest prefix of `name` that is a module (`abcast.x.Name` -> `abcast.x`)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def imports(known: Mapping[str, Path], package: str = "abcast") -> list[Import]:
    """Every import of a module of `package` by one, wherever it is written."""
    out: list[Import] = []
    for module, path in known.items():
        is_package = path.name == "__init__.py"
        here = module if is_package else module.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = here.split(".")[: len(here.split(".")) - (node.level - 1)]
                    origin = ".".join([*base, *([node.module] if node.module else [])])
                else:
                    origin = node.module or ""
                # `from abcast.x import y` imports module abcast.x.y when there is one
                targets = [f"{origin}.{alias.name}" for alias in node.names]
            for target in targets:
                if target != package and not target.startswith(package + "."):
                    continue
                resolved = _resolve(target, known)
                if resolved is not None and resolved != module:
                    out.append(Import(module, resolved, node.lineno))
    return list(dict.fromkeys(out))  # `from m import a, b` is one import of m


def layer_of(module: str, layers: tuple[tuple[str, tuple[str, ...]], ...]) -> int | None:
    """The index of the layer whose longest listed prefix matches `module`; the bare
    package name matches only the package's own `__init__`."""
    best: tuple[int, int] | None = None  # (prefix length, layer index)
    for index, (_, prefixes) in enumerate(layers):
        for prefix in prefixes:
            matches = module == prefix or (
                module.startswith(prefix + ".") and prefix.count(".") > 0)
            if matches and (best is None or len(prefix) > best[0]):
                best = (len(prefix), index)
    return None if best is None else best[1]


def _cycles(edges: Iterable[tuple[str, str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    graph: dict[str, set[str]] = {}
    for a, b in edges:
        graph.setdefault(a, set()).add(b)
        graph.setdefault(b, set())
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def check_contract(
    src: Path,
    layers: tuple[tuple[str, tuple[str, ...]], ...] = LAYERS,
    private: tuple[str, ...] = PRIVATE,
    ignored: Mapping[tuple[str, str], str] = IGNORED,
    package: str = "abcast",
) -> list[str]:
    """Every breach of the contract under `src`, one line each (empty: it holds)."""
    known = modules(src, package)
    found = imports(known, package)
    problems: list[str] = []
    for module in sorted(known):
        if layer_of(module, layers) is None:
            problems.append(f"{module} is in no layer: place it in LAYERS")
    edges = {(i.importer, i.imported) for i in found}
    for pair, who in ignored.items():
        if pair not in edges:
            problems.append(f"ignored edge {pair[0]} -> {pair[1]} ({who}) no longer exists: "
                            "remove it from IGNORED")
    for imp in found:
        if (imp.importer, imp.imported) in ignored:
            continue
        low, high = layer_of(imp.importer, layers), layer_of(imp.imported, layers)
        if low is not None and high is not None and high > low:
            problems.append(
                f"{imp.importer} ({layers[low][0]}) imports {imp.imported} "
                f"({layers[high][0]}) at line {imp.line}: an upward import")
        for kit in private:
            inside = imp.imported == kit or imp.imported.startswith(kit + ".")
            own = imp.importer == kit or imp.importer.startswith(kit + ".")
            if inside and not own:
                problems.append(f"{imp.importer} imports {imp.imported} at line {imp.line}: "
                                f"{kit} is the test kit, production code imports none of it")
    for component in _cycles(edge for edge in edges if edge not in ignored):
        problems.append("import cycle: " + " <-> ".join(component))
    return problems


# ---------------------------------------------------------------- the contract holds


def test_every_module_is_placed_and_imports_flow_one_way() -> None:
    assert check_contract(SRC) == []


def test_the_contract_sees_the_whole_package() -> None:
    known = modules(SRC)
    assert len(known) > 100
    assert layer_of("abcast.ordering.fifo", LAYERS) == 1
    assert layer_of("abcast.ordering.registry", LAYERS) == 2
    assert layer_of("abcast", LAYERS) == len(LAYERS) - 1
    assert layer_of("abcast.cli", LAYERS) == len(LAYERS) - 1


# ---------------------------------------------------------------- it catches breaches


def _tree(root: Path, files: Mapping[str, str]) -> Path:
    for name, text in files.items():
        path = root / "abcast" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


def test_a_planted_upward_import_in_the_real_package_is_caught(tmp_path: Path) -> None:
    shutil.copytree(SRC / "abcast", tmp_path / "abcast",
                    ignore=shutil.ignore_patterns("__pycache__"))
    fifo = tmp_path / "abcast" / "ordering" / "fifo.py"
    # abcast.logs imports nothing of abcast, so the planted edge is upward and closes no
    # cycle (an import of the runtime would also close one: the runtime uses the cores)
    fifo.write_text(fifo.read_text() + "\n\ndef _sneak() -> None:\n"
                    "    from abcast.logs import FORMATS  # noqa: F401\n")
    problems = check_contract(tmp_path)
    assert len(problems) == 1, problems
    assert problems[0].startswith("abcast.ordering.fifo (cores) imports abcast.logs (cli/apps)")


def test_a_planted_cycle_in_the_real_package_is_caught(tmp_path: Path) -> None:
    shutil.copytree(SRC / "abcast", tmp_path / "abcast",
                    ignore=shutil.ignore_patterns("__pycache__"))
    transport = tmp_path / "abcast" / "transport" / "__init__.py"
    transport.write_text(transport.read_text() + "\nfrom abcast.runtime import node\n")
    problems = check_contract(tmp_path)
    assert problems == ["import cycle: abcast.runtime.node <-> abcast.transport"], problems


def test_each_kind_of_breach_on_a_synthetic_tree(tmp_path: Path) -> None:
    layers = (("low", ("abcast.ids", "abcast.core")), ("mid", ("abcast.stack",)),
              ("top", ("abcast.app", "abcast.testing", "abcast")))
    _tree(tmp_path, {
        "__init__.py": "",
        "ids.py": "",
        "stack.py": "from abcast.ids import x\n",
        "core/__init__.py": "",
        "core/a.py": "from . import b\nfrom abcast.stack import Stack\n",  # up, and a cycle
        "core/b.py": "import abcast.core.a\n",
        "app.py": "from abcast.testing import kit\n",  # production importing the kit
        "testing/__init__.py": "from abcast.stack import Stack\n",
        "testing/kit.py": "",
        "stray.py": "",  # in no layer
    })
    problems = check_contract(tmp_path, layers, ("abcast.testing",), {})
    assert sorted(problems) == sorted([
        "abcast.stray is in no layer: place it in LAYERS",
        "abcast.core.a (low) imports abcast.stack (mid) at line 2: an upward import",
        "abcast.app imports abcast.testing.kit at line 1: abcast.testing is the test kit, "
        "production code imports none of it",
        "import cycle: abcast.core.a <-> abcast.core.b",
    ])


def test_an_ignored_edge_is_tolerated_until_it_goes_away(tmp_path: Path) -> None:
    layers = (("all", ("abcast", "abcast.a", "abcast.b")),)
    _tree(tmp_path, {"__init__.py": "", "a.py": "from abcast import b\n",
                     "b.py": "from abcast.a import f\n"})
    ignore = {("abcast.b", "abcast.a"): "branch x"}
    assert check_contract(tmp_path, layers, (), ignore) == []
    (tmp_path / "abcast" / "b.py").write_text("")
    assert check_contract(tmp_path, layers, (), ignore) == [
        "ignored edge abcast.b -> abcast.a (branch x) no longer exists: remove it from IGNORED"]
