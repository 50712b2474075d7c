"""abcast's optional C extensions; everything else about the package is in pyproject.toml.

The native lane (docs/performance.md §5, src/abcast/_native/): `abcast._steady_codec`,
the steady frames' codec for Python, and `abcast._lane`, a steady frame's whole stack
step. They are optional: where no compiler is found, `pip install -e .` still installs
abcast and the pure-Python path runs (their tests skip, saying why).
`bench/build_native.py` builds them in place for a checkout run with PYTHONPATH=src.
The build compiles in src/abcast/native_sources.py's `source_hash()`, so a stale build
after an edit of the C sources is refused (abcast.runtime.lane, the tests).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

from setuptools import Extension, setup

ROOT = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location(
    "abcast_native_sources", ROOT / "src/abcast/native_sources.py")
assert _spec is not None and _spec.loader is not None
sources = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sources)  # (by path: abcast is not installed yet)


def native_extensions(*, optional: bool = True) -> list[Extension]:
    return [native_extension(name, optional=optional) for name in sources.MODULES]


def native_extension(name: str, *, optional: bool = True) -> Extension:
    return Extension(
        name,
        sources=[*sources.MODULES[name], *sources.SHARED],
        depends=[*sources.SOURCES, *sources.HEADERS],  # (one hash: an edit rebuilds all)
        include_dirs=[sources.NATIVE],
        define_macros=[("ABCAST_STEADY_SOURCE_HASH", f'"{sources.source_hash(ROOT)}"')],
        extra_compile_args=["-std=c11", "-Wall", "-Wextra"],
        optional=optional,  # a failed build is a warning: the pure-Python path runs
    )


if __name__ == "__main__":
    setup(ext_modules=native_extensions())
