"""One member process of the soak (abcast.evaluation.soak) and of the killed-node tests:
creates or joins a dynamic group holding a replicated hash-chained log, appends to it
at a steady pace, streams its trace with the runtime's own sink (abcast.trace.stream:
flushed every half second, sealed on a clean exit), and obeys lines on stdin:

    stop    stop appending        leave   leave the group gracefully
    report  print the log's state exit    close and exit (EOF too)

It prints one JSON object per line on stdout: `ready` (node, members, pid), `report`
(node, digest, count, members, view_id, active, appended), `left` (node, graceful).

    python -m abcast.evaluation.soak_member --registry tcp://… --out DIR --run-id R [--create]

With `ABCAST_SOAK_OBJECTS=DIR` in its environment it writes, every 30 s, what it holds to
DIR/<node>-<k>.json: live objects by type and the retained bytes of each layer of its
stack (abcast.evaluation.retained) — how the soak's growth is found: compare a late dump
with an early one. With `ABCAST_SOAK_HEAP=DIR` it appends, every 5 s, what holds memory
outside Python objects to DIR/<node>-heap.jsonl (`heap_sample`: glibc's heap in use and
free, pymalloc's arenas, Arrow's pool, threads, mappings, fds, tasks, connections);
`ABCAST_SOAK_TRACE=off` runs it without a trace (an experiment: the checks see nothing).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import gc
import hashlib
import json
import os
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from abcast.errors import AbcastError
from abcast.evaluation.retained import retained_bytes
from abcast.ids import View
from abcast.replicated import ReplicatedHandle, read, replicated, write
from abcast.runtime.group import Group
from abcast.trace.recorder import TraceRecorder
from abcast.trace.stream import StreamingSink

_PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024


@replicated
class ChainLog:
    """Equal digests mean the same appends were executed in the same order."""

    def __init__(self) -> None:
        self.digest = ""
        self.count = 0

    @write
    def append(self, item: str) -> int:
        self.digest = hashlib.sha256((self.digest + item).encode()).hexdigest()
        self.count += 1
        return self.count

    @read
    def state(self) -> tuple[str, int]:
        return self.digest, self.count


def emit(**fields: object) -> None:
    sys.stdout.write(json.dumps(fields) + "\n")
    sys.stdout.flush()


async def stdin_commands() -> asyncio.Queue[str]:
    """stdin lines as they arrive ("" at EOF), read without blocking the loop."""
    loop = asyncio.get_running_loop()
    lines: asyncio.Queue[str] = asyncio.Queue()
    pending = bytearray()
    fd = sys.stdin.fileno()

    def readable() -> None:
        # Raw reads: a buffered readline() would keep a second line in Python's buffer,
        # where a readable-fd callback never sees it.
        chunk = os.read(fd, 4096)
        if not chunk:
            lines.put_nowait("")
            loop.remove_reader(fd)
            return
        pending.extend(chunk)
        while b"\n" in pending:
            line, _, rest = bytes(pending).partition(b"\n")
            pending[:] = rest
            lines.put_nowait(line.decode().strip() or "report")

    loop.add_reader(fd, readable)
    return lines


def _pymalloc_stats() -> dict[str, int]:
    """The totals of sys._debugmallocstats() (it prints to fd 2): arenas, bytes in use."""
    with tempfile.TemporaryFile("w+") as out:
        saved = os.dup(2)
        try:
            os.dup2(out.fileno(), 2)
            sys._debugmallocstats()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        out.seek(0)
        stats = {}
        for line in out:
            if line.startswith("# ") and "=" in line:
                name, _, value = line[2:].partition("=")
                stats[name.strip()] = int(value.strip().replace(",", ""))
        return stats


def _malloc_trim() -> Any:
    """glibc's malloc_trim (an experiment: $ABCAST_SOAK_TRIM hands freed heap back to the
    OS at every view change), None where there is none."""
    try:
        return ctypes.CDLL("libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


class _MallInfo2(ctypes.Structure):
    """glibc's `struct mallinfo2` (glibc >= 2.33): totals over every malloc arena."""

    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost")]


def _glibc_heap() -> dict[str, int]:
    """glibc malloc's totals: `arena` (bytes in its heaps), `in_use`, `free` (held, not in
    use: fragmentation), `mmapped` (big blocks), and how many arenas it has; {} off glibc."""
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallinfo2 = libc.mallinfo2
    except (OSError, AttributeError):
        return {}
    mallinfo2.restype = _MallInfo2
    info = mallinfo2()
    arenas = 0
    with tempfile.TemporaryFile("w+") as out:
        libc.fdopen.restype = ctypes.c_void_p
        fp = libc.fdopen(os.dup(out.fileno()), b"w")
        libc.malloc_info(0, ctypes.c_void_p(fp))
        libc.fclose(ctypes.c_void_p(fp))
        out.seek(0)
        arenas = out.read().count("<heap nr=")
    return {"arena": info.arena, "in_use": info.uordblks, "free": info.fordblks,
            "mmapped": info.hblkhd, "arenas": arenas}


def _proc_status() -> dict[str, int]:
    """From /proc/self: threads, memory mappings, anonymous KiB."""
    out = {"maps": len(Path("/proc/self/maps").read_text().splitlines())}
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("Threads:"):
            out["threads"] = int(line.split()[1])
    for line in Path("/proc/self/smaps_rollup").read_text().splitlines():
        if line.startswith("Anonymous:"):
            out["anon_kib"] = int(line.split()[1])
    return out


def _big_mappings(top: int = 12) -> dict[str, int]:
    """The `top` mappings of /proc/self/smaps by resident KiB ("start-end path": KiB): which
    allocator's memory grows (glibc's [heap] and 64 MiB arenas, pymalloc's 1 MiB arenas,
    a foreign allocator's segments, thread stacks)."""
    rss: dict[str, int] = {}
    name = ""
    for line in Path("/proc/self/smaps").read_text().splitlines():
        head = line.split(maxsplit=5)
        if "-" in head[0] and not line.endswith(" kB"):
            name = f"{head[0]} {head[5] if len(head) > 5 else ''}".strip()
        elif head[0] == "Rss:":
            rss[name] = int(head[1])
    return dict(sorted(rss.items(), key=lambda kv: -kv[1])[:top])


def heap_sample(group: Group) -> dict[str, Any]:
    """What holds this process's memory outside Python objects, one sample: glibc's heap,
    pymalloc's arenas, Arrow's pool, threads, mappings, fds, tasks, the transport's
    connections."""
    arrow = sys.modules.get("pyarrow")
    pool = arrow.default_memory_pool() if arrow is not None else None
    transport: Any = group._host.transport  # a diagnostic look inside
    sample: dict[str, Any] = {
        "rss_kib": int(Path("/proc/self/statm").read_text().split()[1]) * _PAGE_KIB,
        "glibc": _glibc_heap(), "pymalloc_arenas": _pymalloc_stats().get(
            "arenas allocated current", 0),
        "arrow": None if pool is None else {
            "backend": pool.backend_name, "allocated": pool.bytes_allocated(),
            "peak": pool.max_memory()},
        "fds": len(os.listdir("/proc/self/fd")), "tasks": len(asyncio.all_tasks()),
        "peers": len(getattr(transport, "_peers", ())),
        "channels": len(getattr(transport, "_channels", ())),
        "inbound": len(getattr(transport, "_inbound", ())),
        **_proc_status(), "mappings": _big_mappings()}
    return sample


async def sample_heap(group: Group, every_s: float = 5.0) -> None:
    """Every `every_s`, one `heap_sample` line into $ABCAST_SOAK_HEAP/<node>-heap.jsonl."""
    where = os.environ.get("ABCAST_SOAK_HEAP")
    if not where:
        return
    loop = asyncio.get_running_loop()
    t0 = loop.time()
    with open(Path(where) / f"{group.node}-heap.jsonl", "a") as out:
        while True:
            out.write(json.dumps({"t_s": round(loop.time() - t0, 1), **heap_sample(group)})
                      + "\n")
            out.flush()
            await asyncio.sleep(every_s)


async def dump_objects(group: Group, every_s: float = 30.0) -> None:
    """Every `every_s`, what this process holds into $ABCAST_SOAK_OBJECTS (unset: nothing)."""
    where = os.environ.get("ABCAST_SOAK_OBJECTS")
    if not where:
        return
    k = 0
    while True:
        await asyncio.sleep(every_s)
        k += 1
        gc.collect()
        objects = gc.get_objects()
        types = Counter(type(o).__qualname__ for o in objects)
        biggest = sorted(((sys.getsizeof(o), type(o).__qualname__) for o in objects),
                         reverse=True)[:15]
        del objects
        driver: Any = group._driver  # a diagnostic look inside
        layers = {type(layer).__name__: retained_bytes(layer)
                  for layer in (driver.stack.layers if driver is not None else [])}
        arrow = sys.modules.get("pyarrow")
        dump = {"types": dict(types.most_common(200)), "layers": layers,
                "blocks": sys.getallocatedblocks(),
                "arrow": arrow.total_allocated_bytes() if arrow is not None else None,
                "rss_pages": int(Path("/proc/self/statm").read_text().split()[1]),
                "biggest": biggest, "pymalloc": _pymalloc_stats()}
        (Path(where) / f"{group.node}-{k:03d}.json").write_text(json.dumps(dump))


async def main(args: argparse.Namespace) -> None:
    sink = StreamingSink(args.out, args.run_id)
    sink.warm_up()
    # $ABCAST_SOAK_TRACE=off: an experiment without the trace (its checks then see nothing)
    tracing = os.environ.get("ABCAST_SOAK_TRACE") != "off"
    recorder = TraceRecorder(args.run_id, sink=sink, keep_rows=False) if tracing else None
    handle = ReplicatedHandle(ChainLog())
    views: list[View] = []
    trim = _malloc_trim() if os.environ.get("ABCAST_SOAK_TRIM") else None

    def on_view(view: View) -> None:
        views[:] = [view]  # the last one is all a report needs
        if trim is not None:
            trim(0)

    common = {"registry": args.registry, "transport": "tcp://127.0.0.1:0", "app": handle,
              "recorder": recorder, "on_view": on_view, "recheck_s": 0.2}
    try:
        if args.create:
            group = await Group.create(args.group, ordering=args.ordering, **common)
        else:
            group = await Group.join(args.group, **common)
        emit(event="ready", node=group.node, members=list(group.members), pid=os.getpid())
        dumps = asyncio.create_task(dump_objects(group))
        heap = asyncio.create_task(sample_heap(group))
        lines = await stdin_commands()
        appended = 0

        async def append_loop() -> None:
            nonlocal appended
            k = 0
            while group.active:
                k += 1
                with contextlib.suppress(AbcastError):
                    await handle.append(f"{group.node}:{k}")
                    appended += 1
                await asyncio.sleep(args.pause)

        writer = asyncio.create_task(append_loop())
        while True:
            command = await lines.get()
            if command in ("stop", "leave", "exit", ""):
                writer.cancel()
                await asyncio.gather(writer, return_exceptions=True)
            if command == "leave":
                await group.leave()
                emit(event="left", node=group.node, graceful=group.removed_view is not None)
            elif command == "report":
                digest, count = handle.local.digest, handle.local.count
                emit(event="report", node=group.node, digest=digest, count=count,
                     members=list(views[-1].members) if views else [],
                     view_id=views[-1].view_id if views else 0,
                     active=group.active, appended=appended)
            elif command in ("exit", ""):
                break
        dumps.cancel()
        heap.cancel()
        await handle.close()
        await group.close()
    finally:
        sink.close()


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m abcast.evaluation.soak_member")
    parser.add_argument("--registry", required=True)
    parser.add_argument("--group", default="soak")
    parser.add_argument("--ordering", default="sequencer")
    parser.add_argument("--create", action="store_true")
    parser.add_argument("--run-id", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--pause", type=float, default=0.02,
                        help="seconds between one append's completion and the next")
    return parser.parse_args(argv)


if __name__ == "__main__":
    asyncio.run(main(parse()))
