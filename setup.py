"""abcast's optional C extension; everything else about the package is in pyproject.toml.

`abcast._steady_codec` (src/abcast/_native/) is the native lane's codec
(docs/performance.md §5). It is optional: where no compiler is found, `pip install -e .`
still installs abcast and the pure-Python path runs (tests/unit/test_steady_codec.py
skips, saying why). `bench/build_native.py` builds it in place for a checkout run with
PYTHONPATH=src. The build compiles in `source_hash()`, so a test can tell a stale build
after an edit of the C sources.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from setuptools import Extension, setup

ROOT = Path(__file__).resolve().parent
NATIVE = "src/abcast/_native"
SOURCES = [f"{NATIVE}/steady_codec_module.c", f"{NATIVE}/steady_wire.c"]
HEADERS = [f"{NATIVE}/steady_wire.h"]


def source_hash() -> str:
    """A hash of the extension's C sources (names and bytes)."""
    digest = hashlib.sha256()
    for name in sorted(SOURCES + HEADERS):
        digest.update(name.encode() + b"\0" + (ROOT / name).read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def steady_codec_extension(*, optional: bool = True) -> Extension:
    return Extension(
        "abcast._steady_codec",
        sources=SOURCES,
        depends=HEADERS,
        include_dirs=[NATIVE],
        define_macros=[("ABCAST_STEADY_SOURCE_HASH", f'"{source_hash()}"')],
        extra_compile_args=["-std=c11", "-Wall", "-Wextra"],
        optional=optional,  # a failed build is a warning: the pure-Python path runs
    )


if __name__ == "__main__":
    setup(ext_modules=[steady_codec_extension()])
