"""Does compiling the hot path with mypyc pay? Builds a compiled copy of the package in a
temporary directory and compares it with the pure-Python source, A/B interleaved (issue 23).

Usage: .venv/bin/python bench/mypyc_ab.py [--rounds 3] [--messages 10000]
           [--modules stack.py,layer.py,...] [--with-runtime] [--serial-rounds N]
           [--keep DIR] [--no-build DIR]

What it does:

1. Copies `src/` and `pyproject.toml` into a temporary directory and runs the `mypyc`
   of this venv (it ships with mypy) over the chosen modules there, in place: the source
   tree is never touched. mypyc needs two things the sources do not say: the compiled
   `Layer` classes are subclassed by interpreted code (other layers, the tests' planted
   broken variants), so the copy gets `@mypyc_attr(allow_interpreted_subclasses=True)`
   on each of them. `--with-runtime` adds the runtime's per-frame modules (the driver,
   the node, the transports' shared base and framing, batching, the loop's clock) and
   the same decorator on the runtime classes interpreted code subclasses, plus the
   `__deletable__` mypyc wants for the driver's timer handle. `transport/tcp.py` stays
   interpreted: compiled, it fails at bind ("tuple object expected; got list": uvloop
   returns a socket name as a list where the annotation says tuple).
2. Checks that the copy imports the compiled modules (their `__file__` is a `.so`).
3. Runs `bench/micro_hotpath.py --only core,lone --uvloop` alternately against the
   compiled copy (PYTHONPATH) and the source, `--rounds` times each, and prints the
   median of each figure and the ratio compiled / pure. `core` is the CPU per ordered
   message of a 3-node group driven without IO (bursts of 1 and 64: the protocol cores
   and the stack alone); `lone` is the p50 and the process CPU per message of three real
   nodes on one uvloop exchanging one message at a time (the serial workload, runtime
   included). Both are process CPU time where they can be, so other load disturbs them
   less; compare only figures from one run.

The default module set is what compiles and imports: the stack, the layer base, the
sequencer and its parts, the membership layer, the reliable channel, the failure
detector and the small helpers they call. Left out because they do not survive
compilation: `codec.py` (mypyc drops the keyword arguments of a class statement, so
`Packet(msgspec.Struct, frozen=True)` is built mutable and the module fails to import)
and `ordering/_holdback.py` (a slotted generic dataclass: "attribute '__dict__' of
'type' objects is not writable" at import). Beware when reading the figures: mypyc
rewrites the annotations of the msgspec Structs in compiled modules (`Seq` becomes
`int`, `list[int]` becomes `list`), so the compiled `channel.py` and
`failure_detector.py` decode their headers with weaker checks than the source; a build
that shipped would have to keep the wire Structs in uncompiled modules.

Measured 2026-11-26 (mypy/mypyc 2.4.1, CPython 3.11.7, gcc 12, -O3; the shared 2-core VM
at load average 9-19, so only CPU figures and side-by-side ratios mean anything):

    .venv/bin/python bench/mypyc_ab.py --rounds 3            (the 15 modules above)
      core burst=1   65.4 vs 107.1 µs CPU/msg  0.61     lone p50      243.5 vs 256.8 µs  0.95
      core burst=64  42.9 vs  58.7             0.73     lone CPU/msg  426.0 vs 454.7 µs  0.94
    ... --modules <the 11 without channel, detector, open channel, rto>   (shippable:
        no wire Struct in a compiled module)
      core burst=1   81.1 vs 104.4             0.78     lone p50      241.8 vs 240.7     1.00
      core burst=64  47.4 vs  56.9             0.83     lone CPU/msg  406.3 vs 415.3     0.98
    abcast cluster --nodes 3 --ordering sequencer --serial --messages 1500 --trace off
      --loop uvloop, 3 interleaved runs each, PYTHONPATH=<the kept copy>/src or none:
      15 modules: p50 202-241 µs vs 249-261 (medians 206 vs 256); p99 506-626 vs 658-4938
      11 modules: p50 272-280 µs vs 248-307 (medians 274 vs 297; load ~20)
    abcast cluster ... --rate 1000000 --messages 150000 (saturation): 116-119 k msgs/s
      compiled vs 117-172 k pure: no difference visible through the noise (a saturated
      node sends one packet per ~127 broadcasts: the per-frame core code is not its cost).

    .venv/bin/python bench/mypyc_ab.py --with-runtime --rounds 0 --serial-rounds 3
      (2026-11-26, quiet machine; the 20 modules: the 14 above and the runtime's 6)
      lone-message p50: floor 60 µs, pure 152 µs (2.51x), mypyc 139 µs (2.30x)

Why it was not shipped (issue 23): the cores get 20-40 % cheaper, but the cores are about
a quarter of a lone message's CPU (core burst=1 ~100 µs for the group against ~400-450
µs for the whole lone path in one process): the runtime (driver, node, tcp, the loop's
wake-ups) is the rest, so the serial p50 moves 0-20 % and the target (1.5x the floor,
from 2.4x) is not reached by compiling the cores. And a compiled core behaves
differently where the tests look: the fast-path differential tests
(tests/unit/test_hotpath_sequencer.py) deep-copy layers (a native class has no
`__reduce__`: "__init__() missing required argument 'node'") and patch `Sequencer`'s
methods; the planted-bug tests (tests/sim/test_sequencer_relay.py and the other
`monkeypatch.setattr(sequencer_numbering, ...)` tests) patch module functions that
compiled callers never look up again. With the 15-module copy 31 of 92 tests of
test_hotpath_sequencer, test_sequencer_relay, test_stack_routing, test_channel,
test_hotpath_stack and test_failure_detector fail. Shipping would need those tests
run against the pure modules in a subprocess, the wire Structs moved out of the
compiled modules, and a guard against a stale .so in an editable install (a .so built
before an edit of its .py still wins the import).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_MODULES = (
    "stack.py,layer.py,reliability/channel.py,reliability/rto.py,group/failure_detector.py,"
    "ordering/_open_channel.py,ordering/_delivered.py,ordering/_credit.py,"
    "ordering/sequencer.py,ordering/sequencer_numbering.py,"
    "ordering/sequencer_state.py,ordering/sequencer_view.py,"
    "ordering/sequencer_optimistic.py,membership/layer.py"
)
RUNTIME_MODULES = (
    "runtime/driver.py,runtime/node.py,runtime/loop.py,transport/_common.py,"
    "transport/_framing.py,batching.py"
)
#: a class statement of a layer (the base or one deriving from a layer class), or of a
#: runtime class that interpreted code subclasses (the transports, the tests' fakes)
LAYER_CLASS = re.compile(
    r"^class (\w+\((ABC|Layer|ReliableChannel|FailureDetectorLayer)\)"
    r"|QueuedTransport\(Transport\)|Node|GroupDriver|FrameReader):", re.MULTILINE)
#: mypyc refuses `del timer.handle` unless the class says the attribute may be deleted
TIMER_SLOTS = '    __slots__ = ("armed", "due", "handle")\n'
#: the figures micro_hotpath prints, by name
FIGURES = {
    "core burst=1 µs CPU/msg": re.compile(r"burst=1 +([\d.]+) µs/msg"),
    "core burst=64 µs CPU/msg": re.compile(r"burst=64 +([\d.]+) µs/msg"),
    "lone p50 µs": re.compile(r"lone .* p50 +([\d.]+) µs"),
    "lone µs CPU/msg": re.compile(r"lone .*\) +([\d.]+) µs CPU/msg"),
}


def allow_interpreted_subclasses(path: Path) -> int:
    """Decorate the layer classes of `path` so interpreted code may subclass them."""
    text = path.read_text()
    text, count = LAYER_CLASS.subn(
        lambda m: "@mypyc_attr(allow_interpreted_subclasses=True)\n" + m.group(0), text)
    if count:
        text = text.replace(
            "from __future__ import annotations\n",
            "from __future__ import annotations\n\nfrom mypy_extensions import mypyc_attr\n", 1)
        path.write_text(text)
    return count


def build(modules: list[str], where: Path) -> float:
    """Copy the package to `where` and compile `modules` there: the build's wall seconds."""
    shutil.copytree(ROOT / "src", where / "src",
                    ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    shutil.copy(ROOT / "pyproject.toml", where / "pyproject.toml")
    paths = [f"src/abcast/{m}" for m in modules]
    for path in paths:
        allow_interpreted_subclasses(where / path)
    driver = where / "src/abcast/runtime/driver.py"
    if "src/abcast/runtime/driver.py" in paths:
        text = driver.read_text()
        if TIMER_SLOTS not in text:
            raise SystemExit("runtime/driver.py: the timer's __slots__ line moved; update "
                             "TIMER_SLOTS")
        driver.write_text(text.replace(
            TIMER_SLOTS, TIMER_SLOTS + '    __deletable__ = ("handle",)\n'))
    mypyc = Path(sys.executable).with_name("mypyc")
    started = time.perf_counter()
    result = subprocess.run([str(mypyc), *paths], cwd=where, capture_output=True, text=True,
                            check=False)
    elapsed = time.perf_counter() - started
    if result.returncode:
        sys.stdout.write(result.stdout[-4000:] + result.stderr[-4000:])
        raise SystemExit(f"mypyc failed ({result.returncode})")
    return elapsed


def check_compiled(modules: list[str], where: Path) -> None:
    names = ["abcast." + m.removesuffix(".py").replace("/", ".") for m in modules]
    probe = ("import importlib, sys\n"
             "bad = [n for n in sys.argv[1:] if not importlib.import_module(n).__file__"
             ".endswith('.so')]\n"
             "sys.exit(', '.join(bad) or None)")
    env = {**os.environ, "PYTHONPATH": str(where / "src")}
    subprocess.run([sys.executable, "-c", probe, *names], env=env, check=True)


def measure(pythonpath: Path | None, messages: int) -> dict[str, float]:
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if pythonpath is not None:
        env["PYTHONPATH"] = str(pythonpath)
    out = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "micro_hotpath.py"), "--only", "core,lone",
         "--uvloop", "--repeat", "3", "--messages", str(messages)],
        env=env, capture_output=True, text=True, check=True).stdout
    figures = {}
    for name, pattern in FIGURES.items():
        found = pattern.search(out)
        if found is None:
            raise SystemExit(f"no {name!r} in micro_hotpath's output:\n{out}")
        figures[name] = float(found.group(1))
    return figures


def serial_rounds(rounds: int, compiled_src: Path, messages: int = 3000) -> None:
    """`abcast cluster --serial`'s lone-message p50 (n = 3, tcp, uvloop, tracing off) of
    the floor, the source and the compiled copy, interleaved (bench/lone_path.py's run)."""
    import asyncio

    sys.path.insert(0, str(ROOT / "bench"))
    from lone_path import lone_run

    async def run() -> dict[str, list[float]]:
        p50s: dict[str, list[float]] = {"floor": [], "pure": [], "mypyc": []}
        saved = os.environ.pop("PYTHONPATH", None)
        try:
            for k in range(rounds):
                order = ("floor", "pure", "mypyc") if k % 2 == 0 else ("mypyc", "pure", "floor")
                for variant in order:
                    os.environ.pop("PYTHONPATH", None)
                    if variant == "mypyc":
                        os.environ["PYTHONPATH"] = str(compiled_src)
                    p50s[variant].append(
                        await lone_run(messages, "uvloop", variant == "floor", None))
                print(f"  serial round {k + 1}: " + "  ".join(
                    f"{name} {values[-1]:.0f} µs" for name, values in p50s.items()))
        finally:
            os.environ.pop("PYTHONPATH", None)
            if saved is not None:
                os.environ["PYTHONPATH"] = saved
        return p50s

    p50s = asyncio.run(run())
    floor = statistics.median(p50s["floor"])
    print(f"\nlone-message p50, medians of {rounds} interleaved serial runs: floor {floor:.0f} µs,"
          f" pure {statistics.median(p50s['pure']):.0f} µs"
          f" ({statistics.median(p50s['pure']) / floor:.2f}x), mypyc"
          f" {statistics.median(p50s['mypyc']):.0f} µs"
          f" ({statistics.median(p50s['mypyc']) / floor:.2f}x)")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--modules", default=DEFAULT_MODULES,
                        help="comma-separated, relative to src/abcast/")
    parser.add_argument("--with-runtime", action="store_true",
                        help="compile the runtime's per-frame modules too")
    parser.add_argument("--serial-rounds", type=int, default=0, metavar="N",
                        help="then N interleaved `abcast cluster --serial` runs each of the "
                             "floor, the source and the compiled copy")
    parser.add_argument("--keep", type=Path, help="build here and keep it")
    parser.add_argument("--no-build", type=Path, metavar="DIR",
                        help="reuse a copy built by an earlier --keep")
    args = parser.parse_args(argv)
    modules = args.modules.split(",") + (RUNTIME_MODULES.split(",") if args.with_runtime
                                         else [])
    with tempfile.TemporaryDirectory(prefix="abcast-mypyc-") as scratch:
        where = args.no_build or args.keep or Path(scratch)
        if args.no_build is None:
            seconds = build(modules, where)
            print(f"mypyc: {len(modules)} modules compiled in {seconds:.0f} s (wall)")
        check_compiled(modules, where)
        runs: dict[str, list[dict[str, float]]] = {"mypyc": [], "pure": []}
        for k in range(args.rounds):
            for variant in ("mypyc", "pure") if k % 2 == 0 else ("pure", "mypyc"):
                load = os.getloadavg()[0]
                figures = measure(where / "src" if variant == "mypyc" else None,
                                  args.messages)
                runs[variant].append(figures)
                print(f"  round {k + 1} {variant:5} (load {load:4.1f}): "
                      + "  ".join(f"{name} {value:.1f}" for name, value in figures.items()))
        if runs["mypyc"]:
            print(f"\nmedians of {args.rounds} interleaved rounds (compiled / pure):")
            for name in FIGURES:
                compiled = statistics.median(r[name] for r in runs["mypyc"])
                pure = statistics.median(r[name] for r in runs["pure"])
                print(f"  {name:26} mypyc {compiled:7.1f}   pure {pure:7.1f}"
                      f"   ratio {compiled / pure:.2f}")
        if args.serial_rounds:  # before the scratch copy goes
            serial_rounds(args.serial_rounds, where / "src")
    return 0


if __name__ == "__main__":
    sys.exit(main())
