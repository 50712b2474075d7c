"""RepMI's four scenarios on real processes: time per replicated write for matrix clocks
(fixed 300 ms and adaptive heartbeats), the sequencer and the ticket server, n = 2…16.

Rules: one run = one static group of n OS processes (tcp on loopback, one registry and,
for ordering "ticket", one ticket server in this process), each holding a Counter
replica. OneToMany = the last node (nN) writes, the others hold copies; ManyToMany =
every node writes. A writer issues its next write once the previous one has executed on
its own copy (RepMI's synchronous invocation) for `--seconds` after a `--warmup`, and
records each write's issue → executed-here time (ms/op: over all writes; "mean per
writer": each writer's mean, averaged — in ManyToMany a sequencer's own writes execute at
once, so it issues many more than the others and weighs on the plain mean); then every
node waits for every other (a matrix group needs heartbeats until the end) and reports.
LAN = loopback as it is; WAN = every process behind the runtime's WAN wrapper
(transport/wan.py) with the RTT matrix transport/wan_matrices/five_sites.json (n1 →
virginia, n2 → oregon, …, n6 → virginia again): 2–5 sites as n grows. The ticket server
sits with n1 (virginia), and in the WAN runs also in tokyo: placement matters there. Each run's
replicas must end equal (checked: every node reports the same counter). The machine's
2 cores run all n processes, so figures at n = 16 include CPU queueing on a shared box:
compare variants within one report. Writes out/repmi_processes.md and one PNG per
scenario; a benchmark, not a test.

    .venv/bin/python bench/repmi_processes.py                       # the full grid
    .venv/bin/python bench/repmi_processes.py --nodes 2,4 --seconds 1.5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

GROUP = "repmi"
FIXED_PERIOD_US = 300_000
MATRIX_FILE = (Path(__file__).resolve().parents[1]
               / "src/abcast/transport/wan_matrices/five_sites.json")
SCENARIOS = (("OneToMany", False), ("ManyToMany", False), ("OneToMany", True),
             ("ManyToMany", True))


@dataclass(frozen=True, slots=True)
class Variant:
    label: str
    ordering: str
    ticket_site: str = ""  # ordering "ticket": where the server sits (WAN)
    wan_only: bool = False


VARIANTS = (
    Variant("matrix, fixed 300 ms", "matrix"),
    Variant("matrix, adaptive", "matrix"),
    Variant("sequencer", "sequencer"),
    Variant("ticket (server with n1)", "ticket", "virginia"),
    Variant("ticket (server in tokyo)", "ticket", "tokyo", wan_only=True),
)


def options_for(label: str, ticket_url: str = "") -> Any:
    from abcast.ordering.matrix import MatrixConfig
    from abcast.ordering.registry import OrderingOptions

    if label.startswith("matrix"):
        adaptive = "adaptive" in label
        return OrderingOptions(matrix=MatrixConfig(period_us=FIXED_PERIOD_US, adaptive=adaptive))
    return OrderingOptions(ticket=ticket_url)


# ------------------------------------------------------------------- one process

async def worker(args: argparse.Namespace) -> dict[str, Any]:
    from abcast.replicated import Counter, ReplicatedHandle
    from abcast.runtime.group import Group

    node = f"n{args.index + 1}"
    handle = ReplicatedHandle(Counter())
    group = Group(GROUP, ordering=args.ordering, transport="tcp://127.0.0.1:0",
                  registry=args.registry, node=node, size=args.nodes,
                  on_deliver=handle.on_deliver, wan=args.wan or None,
                  options=options_for(args.variant, args.ticket))
    latencies: list[float] = []
    async with group:
        handle.bind(group)
        writer = args.scenario == "ManyToMany" or args.index == args.nodes - 1
        if writer:
            start = time.perf_counter()
            warm_until = start + args.warmup
            stop_at = warm_until + args.seconds
            while (now := time.perf_counter()) < stop_at:
                await handle.add(1)
                if now >= warm_until:
                    latencies.append(time.perf_counter() - now)
        client = group.host.registry
        assert client is not None
        await client.done(GROUP)
        await client.wait_done(GROUP, args.nodes)
        # every writer is done; the last writes may still be on their way here: wait
        # until nothing new executes for a second
        last = -1
        while handle.applied != last:
            last = handle.applied
            await asyncio.sleep(1.0)
        value = await handle.get()
        # ordering ticket: 0 while the server issued every number (1: a member took over)
        epoch = group.inspect()[-1].clock.get("epoch", 0)
    return {"node": node, "latencies": latencies, "value": value, "applied": handle.applied,
            "epoch": epoch}


# ------------------------------------------------------------------- one run

@dataclass(slots=True)
class Row:
    scenario: str
    wan: bool
    variant: str
    nodes: int
    latencies: list[float] = field(default_factory=list)
    writer_means: list[float] = field(default_factory=list)  # one per writer (s)
    equal: bool = False
    error: str = ""

    @property
    def links(self) -> str:
        return "WAN" if self.wan else "LAN"

    def ms(self, q: str) -> float:
        lat = sorted(self.latencies)
        if not lat:
            return float("nan")
        if q == "mean":
            return statistics.fmean(lat) * 1000
        if q == "writers":
            return statistics.fmean(self.writer_means) * 1000
        k = 0.5 if q == "p50" else 0.99
        return lat[min(len(lat) - 1, int(k * len(lat)))] * 1000


def wan_file(tmp: Path, ticket_site: str) -> str:
    matrix = json.loads(MATRIX_FILE.read_text())
    matrix["nodes"] = {"ticket": ticket_site or "virginia"}
    path = tmp / f"matrix-{ticket_site or 'none'}.json"
    path.write_text(json.dumps(matrix))
    return str(path)


async def run_one(scenario: str, wan: bool, variant: Variant, nodes: int,
                  args: argparse.Namespace, tmp: Path) -> Row:
    from abcast.apps.ticket_server import TicketService
    from abcast.registry.server import RegistryServer

    row = Row(scenario, wan, variant.label, nodes)
    matrix = wan_file(tmp, variant.ticket_site) if wan else ""
    async with RegistryServer() as registry, contextlib.AsyncExitStack() as stack:
        ticket_url = ""
        if variant.ordering == "ticket":
            service = await stack.enter_async_context(
                TicketService([GROUP], registry=registry.url, wan=matrix or None))
            ticket_url = service.url
        cmd = [sys.executable, __file__, "--worker", "--registry", registry.url,
               "--nodes", str(nodes), "--ordering", variant.ordering, "--variant",
               variant.label, "--scenario", scenario, "--seconds", str(args.seconds),
               "--warmup", str(args.warmup), "--wan", matrix, "--ticket", ticket_url]
        procs = [await asyncio.create_subprocess_exec(
            *cmd, "--index", str(i), stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.DEVNULL) for i in range(nodes)]
        try:
            async with asyncio.timeout(args.timeout):
                outs = await asyncio.gather(*(p.communicate() for p in procs))
        except TimeoutError:
            row.error = f"timed out after {args.timeout:g}s"
            outs = []
        finally:
            for proc in procs:
                if proc.returncode is None:
                    with contextlib.suppress(ProcessLookupError):
                        proc.kill()
                    await proc.wait()
    values = []
    for out, _ in outs:
        try:
            report = json.loads(out.decode().strip().splitlines()[-1])
        except (ValueError, IndexError):
            row.error = row.error or "a node did not report"
            continue
        if "error" in report:
            row.error = row.error or str(report["error"])[:200]
            continue
        row.latencies.extend(report["latencies"])
        if report["latencies"]:
            row.writer_means.append(statistics.fmean(report["latencies"]))
        values.append(report["value"])
        if report.get("epoch"):
            row.error = row.error or "the ticket server was suspected: a member took over"
    row.equal = len(values) == nodes and len(set(values)) == 1
    return row


# ------------------------------------------------------------------- the report

def table(rows: list[Row]) -> str:
    lines = ["| n | ordering | writes | ms/op mean | p50 | p99 | mean per writer "
             "| replicas equal |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        ok = "yes" if r.equal and not r.error else f"**NO** {r.error}"
        lines.append(f"| {r.nodes} | {r.variant} | {len(r.latencies)} | {r.ms('mean'):.1f} "
                     f"| {r.ms('p50'):.1f} | {r.ms('p99'):.1f} | {r.ms('writers'):.1f} "
                     f"| {ok} |")
    return "\n".join(lines)


def gains(rows: list[Row], scenario: str, wan: bool) -> list[str]:
    out = []
    by = {(r.variant, r.nodes): r for r in rows if r.scenario == scenario and r.wan == wan}
    for n in sorted({r.nodes for r in rows}):
        fixed = by.get((VARIANTS[0].label, n))
        adaptive = by.get((VARIANTS[1].label, n))
        if fixed is None or adaptive is None or not adaptive.latencies or not fixed.latencies:
            continue
        out.append(f"n = {n}: {fixed.ms('mean'):.1f} → {adaptive.ms('mean'):.1f} ms "
                   f"({fixed.ms('mean') / adaptive.ms('mean'):.1f}×)")
    return out


def plot(rows: list[Row], scenario: str, wan: bool, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.0))
    for variant in VARIANTS:
        pts = sorted((r.nodes, r.ms("mean")) for r in rows if r.scenario == scenario
                     and r.wan == wan and r.variant == variant.label and r.latencies)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=variant.label)
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("processes (n)")
    ax.set_ylabel("ms per write (mean)")
    ax.set_title(f"{scenario}, {'WAN (five sites)' if wan else 'LAN (loopback)'}")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def report(rows: list[Row], args: argparse.Namespace, out: Path) -> str:
    parts = [f"# RepMI scenarios on real processes\n\n{args.seconds:g} s of writes per run "
             f"after {args.warmup:g} s warm-up; tcp on loopback; the WAN runs behind the WAN "
             "wrapper with five_sites.json. Generated by bench/repmi_processes.py.\n"]
    for scenario, wan in SCENARIOS:
        sel = [r for r in rows if r.scenario == scenario and r.wan == wan]
        if not sel:
            continue
        name = f"{scenario}-{'wan' if wan else 'lan'}"
        png = out / f"repmi_processes-{name}.png"
        plot(rows, scenario, wan, png)
        parts.append(f"## {scenario}, {'inter-cluster (WAN)' if wan else 'intra-cluster (LAN)'}"
                     f"\n\n{table(sel)}\n\nAdaptive heartbeat against the fixed 300 ms "
                     f"period (mean ms/op): {'; '.join(gains(rows, scenario, wan)) or '—'}"
                     f"\n\n![{name}]({png.name})\n")
    return "\n".join(parts)


async def main_async(args: argparse.Namespace) -> list[Row]:
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    sizes = [int(n) for n in args.nodes.split(",")]
    grid = [(s, w, v, n) for s, w in SCENARIOS for v in VARIANTS if w or not v.wan_only
            for n in sizes]
    if args.only:
        grid = [g for g in grid if args.only in f"{g[0]} {'WAN' if g[1] else 'LAN'} {g[2].label}"]
    rows: list[Row] = []
    with tempfile.TemporaryDirectory() as tmp, Progress(
            TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}/"
            "{task.total}"), TimeElapsedColumn()) as progress:
        task = progress.add_task("runs", total=len(grid))
        for scenario, wan, variant, n in grid:
            progress.update(task, description=f"{scenario} {'WAN' if wan else 'LAN'} "
                                              f"{variant.label} n={n}")
            rows.append(await run_one(scenario, wan, variant, n, args, Path(tmp)))
            progress.advance(task)
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--nodes", default="2,4,8,16")
    p.add_argument("--seconds", type=float, default=3.0)
    p.add_argument("--warmup", type=float, default=0.5)
    p.add_argument("--timeout", type=float, default=90.0)
    p.add_argument("--only", default="", help="run only grid cells whose label has this")
    p.add_argument("--out", type=Path, default=Path("out"))
    # the worker side (started by the runs)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    for name in ("--registry", "--ordering", "--variant", "--scenario", "--wan", "--ticket"):
        p.add_argument(name, default="", help=argparse.SUPPRESS)
    p.add_argument("--index", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.worker:
        args.nodes = int(args.nodes)
        try:
            result = asyncio.run(worker(args))
        except Exception as exc:  # reported to the parent, which shows it in the table
            print(json.dumps({"error": f"{type(exc).__name__}: {exc}"}))
            return 1
        print(json.dumps(result))
        return 0
    rows = asyncio.run(main_async(args))
    args.out.mkdir(parents=True, exist_ok=True)
    text = report(rows, args, args.out)
    (args.out / "repmi_processes.md").write_text(text)
    print(text)
    return 0 if all(r.equal and not r.error for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
