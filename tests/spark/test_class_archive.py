"""The driver JVM's class archive (abcast.pipeline.class_archive): where it lives, which
options map or write it, and that only a JVM that exited cleanly leaves one in place (a
truncated archive would crash the next JVM). No JVM runs here: a fake process stands in
for the gateway's.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest

from abcast.pipeline import class_archive
from abcast.pipeline.class_archive import CLASS_ARCHIVE_ENV, Pending, finish, jvm_options


class FakeJvm:
    """Writes `content` to the pending file when its stdin closes, then exits `code`."""

    def __init__(self, pending: Pending, code: int, content: bytes = b"archive") -> None:
        self.pid = os.getpid()
        self.stdin = io.BytesIO()
        self._pending, self._code, self._content = pending, code, content

    def wait(self, timeout: float | None = None) -> int:
        assert self.stdin.closed, "the JVM only exits once its stdin is closed"
        self._pending.written.write_bytes(self._content)
        return self._code


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    spark_home = tmp_path / "pyspark"
    (spark_home / "jars").mkdir(parents=True)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv(CLASS_ARCHIVE_ENV, raising=False)
    if class_archive._java() is None:
        pytest.skip("no java on PATH")
    return spark_home


def test_first_start_writes_then_later_starts_map(home: Path) -> None:
    options, pending = jvm_options(home, create=True)
    assert pending is not None and "-XX:ArchiveClassesAtExit=" in options
    assert str(pending.written) in options and not pending.archive.exists()
    assert finish(pending, FakeJvm(pending, code=0))
    assert pending.archive.read_bytes() == b"archive" and not pending.written.exists()
    again, nothing = jvm_options(home, create=True)
    assert nothing is None
    assert again.startswith(f"-XX:SharedArchiveFile={pending.archive} ")


def test_a_jvm_that_failed_leaves_no_archive(home: Path) -> None:
    _, pending = jvm_options(home, create=True)
    assert pending is not None
    assert not finish(pending, FakeJvm(pending, code=137, content=b"trunc"))
    assert not pending.archive.exists() and not pending.written.exists()


def test_without_create_or_when_off_nothing_is_written(
    home: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert jvm_options(home, create=False) == ("", None)
    monkeypatch.setenv(CLASS_ARCHIVE_ENV, "off")
    assert jvm_options(home, create=True) == ("", None)


def test_a_named_archive_and_stale_temporaries(
    home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    named = tmp_path / "named.jsa"
    monkeypatch.setenv(CLASS_ARCHIVE_ENV, str(named))
    dead = named.with_name(f"{named.name}.tmp-999999999")  # above any pid_max
    dead.write_bytes(b"left by a killed check")
    options, pending = jvm_options(home, create=True)
    assert pending == Pending(named.with_name(f"{named.name}.tmp-{os.getpid()}"), named)
    assert not dead.exists(), "a dead process's temporary archive is removed, not adopted"
    assert str(pending.written) in options


def test_another_jdk_or_spark_gets_its_own_archive(home: Path, tmp_path: Path) -> None:
    other = tmp_path / "other-pyspark"
    (other / "jars").mkdir(parents=True)
    assert class_archive.archive_path(home) != class_archive.archive_path(other)
