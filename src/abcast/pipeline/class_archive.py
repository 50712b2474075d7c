"""A class-data-sharing archive of the classes Spark's driver JVM loads, made once and
mapped by every later start (`-XX:SharedArchiveFile`), so a check does not parse and
verify the same ~20,000 classes of Spark's 280 jars again.

Rules: the archive is a file in the user's cache directory
(`$XDG_CACHE_HOME/abcast`, else `~/.cache/abcast`), named by what it was made from (the
Spark home, its jars directory's mtime, the `java` binary and its mtime), so another
PySpark or JDK gets its own. A JVM started while it exists maps it; one started while
it does not, by a caller that promises to `finish` (the `abcast check`/`report` commands
that own their session), writes it at exit (`-XX:ArchiveClassesAtExit`, Java 13 and
later: Spark 4 needs 17) under a temporary name, and `finish` shuts that JVM down, waits
for it and renames the file into place only when the JVM exited cleanly: a truncated
archive would crash the next JVM (SIGBUS), a missing one costs nothing. The JVM's own
CDS log lines are turned off (a stale archive is skipped silently; stdout keeps only
what the command prints). `ABCAST_SPARK_CLASS_ARCHIVE=off` disables all of it; any other
value names the archive file. Only the driver uses it: a cluster's executors start with
their workers' class path.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING, Final, Protocol

if TYPE_CHECKING:
    from collections.abc import Iterator

CLASS_ARCHIVE_ENV: Final = "ABCAST_SPARK_CLASS_ARCHIVE"
_OFF: Final = frozenset({"off", "0", "no", "false"})
_QUIET: Final = "-Xlog:cds*=off"
_TMP_MARK: Final = ".tmp-"
# Writing the archive at exit takes seconds (tens under load); past this, give up on it.
EXIT_TIMEOUT_S: Final = 600.0


class _Process(Protocol):
    """What `finish` needs of the JVM's process (a subprocess.Popen)."""

    pid: int
    stdin: IO[bytes] | None

    def wait(self, timeout: float | None = None) -> int: ...


def _cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "abcast"


def _java() -> Path | None:
    """The `java` Spark's launcher runs: $JAVA_HOME/bin/java, else the one on PATH."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def _stamp(path: Path) -> str:
    return f"{path}:{path.stat().st_mtime_ns}"


def archive_path(spark_home: Path) -> Path | None:
    """Where the archive for this Spark home and JDK lives (it may not exist yet); None
    when disabled or when there is no `java`."""
    chosen = os.environ.get(CLASS_ARCHIVE_ENV, "").strip()
    if chosen.lower() in _OFF:
        return None
    if chosen:
        return Path(chosen)
    java, jars = _java(), spark_home / "jars"
    if java is None or not jars.is_dir():
        return None
    key = hashlib.sha256(f"{_stamp(spark_home.resolve())}|{_stamp(jars.resolve())}|"
                         f"{_stamp(java)}".encode()).hexdigest()[:16]
    return _cache_dir() / f"spark-classes-{key}.jsa"


@dataclass(frozen=True, slots=True)
class Pending:
    """An archive the running JVM writes at exit, to be moved into place by `finish`."""

    written: Path
    archive: Path


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _stale_temporaries(archive: Path) -> Iterator[Path]:
    """Temporary archives left by processes that died before `finish` (never complete
    for certain: removed, not adopted)."""
    for path in archive.parent.glob(f"{archive.name}{_TMP_MARK}*"):
        pid = path.name.rsplit(_TMP_MARK, 1)[1]
        if pid.isdigit() and not _alive(int(pid)):
            yield path


def jvm_options(spark_home: Path, *, create: bool) -> tuple[str, Pending | None]:
    """The driver JVM options that map the archive, or (with `create`, when there is
    none yet) write it at exit; and what `finish` then has to do."""
    archive = archive_path(spark_home)
    if archive is None:
        return "", None
    if archive.is_file():
        return f"-XX:SharedArchiveFile={archive} {_QUIET}", None
    if not create:
        return "", None
    try:
        archive.parent.mkdir(parents=True, exist_ok=True)
    except OSError:
        return "", None
    for stale in _stale_temporaries(archive):
        with contextlib.suppress(OSError):
            stale.unlink()
    written = archive.with_name(f"{archive.name}{_TMP_MARK}{os.getpid()}")
    return f"-XX:ArchiveClassesAtExit={written} {_QUIET}", Pending(written, archive)


def finish(pending: Pending, jvm: _Process) -> bool:
    """Shut the (stopped) session's JVM down, wait while it writes the archive, and move
    the archive into place if the JVM exited cleanly. Whether it did."""
    if jvm.stdin is not None:
        with contextlib.suppress(OSError):
            jvm.stdin.close()  # the gateway JVM exits when its stdin closes
    try:
        code = jvm.wait(timeout=EXIT_TIMEOUT_S)
    except Exception:  # a JVM that will not exit: its file is not used
        code = -1
    if code == 0 and pending.written.is_file() and pending.written.stat().st_size > 0:
        pending.written.replace(pending.archive)
        return True
    with contextlib.suppress(OSError):
        pending.written.unlink()
    return False
