"""A process's peak RSS is its own: a child started by a process with a large heap reports
its own high-water mark, not the parent's (getrusage's ru_maxrss would)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from abcast.evaluation.rss import peak_rss_kib

PARENT_MIB = 200


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
def test_a_child_of_a_fat_parent_reports_its_own_peak() -> None:
    ballast = bytearray(PARENT_MIB * 1024 * 1024)  # touched: resident in this process
    assert peak_rss_kib() > PARENT_MIB * 1024
    child = subprocess.run(
        [sys.executable, "-c", "import resource; from abcast.evaluation.rss import "
         "peak_rss_kib; print(peak_rss_kib(), "
         "resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"],
        capture_output=True, text=True, check=True)
    own, maxrss = map(int, child.stdout.split())
    del ballast
    assert own < PARENT_MIB * 1024 / 2  # a bare interpreter importing one module
    assert maxrss > PARENT_MIB * 1024  # the trap the helper avoids (Linux exec)
