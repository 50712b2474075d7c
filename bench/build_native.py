"""Build abcast's C extensions (abcast._steady_codec, abcast._lane) in place, next to the sources in
src/abcast/, with this interpreter's compiler settings (sysconfig, as pip would), so
that a checkout run with PYTHONPATH=src imports them. They are defined once, in
setup.py; here a build failing is an error, where `pip install -e .` only warns.

`--sanitize` builds it with AddressSanitizer and UndefinedBehaviorSanitizer, to run the
differential fuzz long under them (the interpreter must load the sanitizers' runtimes
first; the command to do it is printed), then build it again without.

    .venv/bin/python bench/build_native.py [--force] [--sanitize]
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from types import ModuleType

from setuptools import Distribution

ROOT = Path(__file__).resolve().parent.parent


def load_setup() -> ModuleType:
    """setup.py as a module (its `setup()` call runs only as __main__)."""
    spec = importlib.util.spec_from_file_location("abcast_setup", ROOT / "setup.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
            "-fno-omit-frame-pointer", "-O1", "-g"]


def build(force: bool, sanitize: bool) -> list[Path]:
    setup_py = load_setup()
    exts = setup_py.native_extensions(optional=False)
    for ext in exts if sanitize else ():
        ext.extra_compile_args += SANITIZE
        ext.extra_link_args += SANITIZE[:1]
    dist = Distribution({
        "name": "abcast",
        "package_dir": {"": "src"},
        "ext_modules": exts,
    })
    dist.script_name = str(ROOT / "setup.py")
    with tempfile.TemporaryDirectory(prefix="abcast-build-") as temp:
        cmd = dist.get_command_obj("build_ext")
        cmd.inplace = True
        cmd.force = force or sanitize
        cmd.build_temp = temp
        cmd.ensure_finalized()
        cmd.run()
        return [Path(cmd.get_ext_fullpath(ext.name)) for ext in exts]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if up to date")
    parser.add_argument("--sanitize", action="store_true", help="with ASan and UBSan")
    args = parser.parse_args()
    os.chdir(ROOT)  # setup.py names its sources relative to the project root
    built = build(args.force, args.sanitize)
    if args.sanitize:
        runtimes = ":".join(
            subprocess.run(["gcc", f"-print-file-name={lib}"], capture_output=True, text=True,
                           check=True).stdout.strip() for lib in ("libasan.so", "libubsan.so"))
        print(f"built {', '.join(map(str, built))} with sanitizers; run the fuzz under "
              f"them, then rebuild "
              f"without (--force):\n  LD_PRELOAD={runtimes} ASAN_OPTIONS=detect_leaks=0 "
              f"ABCAST_STEADY_FUZZ_EXAMPLES=20000 PYTHONPATH=src {sys.executable} -m pytest "
              f"tests/unit/test_steady_codec.py -q -p no:cacheprovider")
        return
    # a fresh interpreter imports what was built and says which sources it came from
    sources = load_setup().sources
    expected = sources.source_hash()
    for name in sources.MODULES:
        check = subprocess.run(
            [sys.executable, "-c", f"import {name} as m; print(m.__file__, m.SOURCE_HASH)"],
            env={**os.environ, "PYTHONPATH": str(ROOT / "src")},
            capture_output=True, text=True, check=False)
        if check.returncode:
            sys.exit(f"built {name}, but it does not import:\n{check.stderr}")
        path, got = check.stdout.split()
        print(f"built {path} (sources {got})")
        if got != expected:
            sys.exit(f"stale: imported sources {got}, the checkout's are {expected}")


if __name__ == "__main__":
    main()
