"""A process's own peak resident memory.

Rules: read VmHWM from /proc/self/status (Linux: the high-water mark of this process's
address space, which starts afresh at exec). Not `getrusage().ru_maxrss`: Linux carries
the address space a process had before exec into it, so a node process the bench
launcher started (fork or vfork, then exec) reports the launcher's own peak when that is
the larger — 154 MiB for every node of a run whose real peak was ~120. ru_maxrss is the
fallback where /proc is missing (and there it may overstate).
"""

from __future__ import annotations

import resource
from pathlib import Path
from typing import Final

STATUS: Final = Path("/proc/self/status")


def peak_rss_kib() -> int:
    """This process's peak resident memory in KiB."""
    try:
        for line in STATUS.read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])  # "VmHWM:   123456 kB"
    except (OSError, ValueError, IndexError):
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
