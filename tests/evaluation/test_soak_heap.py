"""The soak's look at memory outside Python objects (fast, default run): a member's heap
samples of this very process, and the slopes the report draws from them."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from abcast.evaluation.soak import heap_slopes
from abcast.evaluation.soak_member import _big_mappings, _glibc_heap, _proc_status


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc and /proc")
def test_this_process_heap_is_seen_from_glibc_and_proc() -> None:
    glibc = _glibc_heap()
    if glibc:  # glibc >= 2.33
        assert glibc["in_use"] > 0 and glibc["arenas"] >= 1
        # Above the mmap threshold even after glibc raised it (it does when a mapped
        # block is freed, up to 32 MiB on 64-bit): a mapped block, whatever ran before.
        keep = bytearray(64 << 20)
        assert _glibc_heap()["mmapped"] >= glibc["mmapped"] + len(keep)
        del keep
    status = _proc_status()
    assert status["threads"] >= 1 and status["maps"] > 10 and status["anon_kib"] > 0
    mappings = _big_mappings(top=5)
    assert len(mappings) == 5 and all(kib >= 0 for kib in mappings.values())


def test_heap_slopes_follow_each_quantity_after_the_warm_up(tmp_path: Path) -> None:
    path = tmp_path / "n2-heap.jsonl"
    rows = [{"t_s": 5.0 * k, "rss_kib": 100_000 + 100 * k, "anon_kib": 50_000 + 100 * k,
             "glibc": {"in_use": 20 << 20, "free": 2 << 20}, "pymalloc_arenas": 34,
             "arrow": None if k % 2 else {"allocated": 0},
             "mappings": {f"300-{0x400 + k:x} [heap]": 21_000,  # its end moves
                          "7f00-7f10": 4096 + 100 * k}}
            for k in range(25)]  # 2 minutes, RSS +1,200 KiB/min, all in one mapping
    path.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    got = heap_slopes(path, warmup_s=30.0)
    assert got["rss"][2] == pytest.approx(1200.0)
    assert got["anonymous"][2] == pytest.approx(1200.0)
    assert got["glibc in use"] == (20480.0, 20480.0, 0.0)
    assert got["pymalloc arenas"][2] == 0.0 and got["arrow pool"][2] == 0.0
    first, last, slope = got["mapping 7f00"]  # the one that grew, not the moving [heap]
    assert (first, last) == (4096 + 600, 4096 + 2400) and slope == pytest.approx(1200.0)
    assert heap_slopes(path, warmup_s=1e9) == {}
