"""Which C sources make abcast's optional extensions, and their hash.

One home for both sides of the staleness check: setup.py compiles `source_hash()` into
each extension (SOURCE_HASH), and abcast.runtime.lane refuses an extension whose hash is
not the checkout's (an edit of the C sources without a rebuild). Paths are relative to
the project root; where the sources are not there (an installed wheel), there is nothing
to compare and `source_hash` answers None. No imports beyond the standard library:
setup.py loads this file by its path, before abcast is installed.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

NATIVE = "src/abcast/_native"
#: each extension's own sources, its module first; every one also compiles SHARED in
MODULES = {"abcast._steady_codec": [f"{NATIVE}/steady_codec_module.c"],
           "abcast._lane": [f"{NATIVE}/lane_module.c", f"{NATIVE}/lane_objects.c",
                            f"{NATIVE}/lane_steps.c", f"{NATIVE}/lane_pump.c",
                            f"{NATIVE}/lane_write.c"]}
#: the wire codec (steady_wire.h)
SHARED = [f"{NATIVE}/steady_wire.c"]
HEADERS = [f"{NATIVE}/steady_wire.h", f"{NATIVE}/lane.h"]
#: every extension's sources, each once
SOURCES = [*(source for own in MODULES.values() for source in own), *SHARED]
#: the project root of a checkout (src/abcast/native_sources.py is two levels down)
ROOT = Path(__file__).resolve().parents[2]


def source_hash(root: Path = ROOT) -> str | None:
    """A hash of all the extensions' C sources (names and bytes): one for all, so an edit
    of any rebuilds every one. None where the sources are not found."""
    digest = hashlib.sha256()
    for name in sorted(SOURCES + HEADERS):
        path = root / name
        if not path.is_file():
            return None
        digest.update(name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]
