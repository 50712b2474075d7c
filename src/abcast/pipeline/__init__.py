"""The PySpark pipeline (docs/checks.md): `abcast check` and `abcast report` over trace dirs.

Rules: every check is a pure transform returning violation rows (abcast.pipeline.checks
names the codes and the row schema; tables, checks_message, checks_delivery compute them);
`suite` decides which runs each check sees and summarises; `report` and `plots` describe
performance; `io` reads and refuses trace dirs; `session` builds the one SparkSession
(its driver JVM maps `class_archive`'s archive of Spark's classes); `commands` holds the
click commands the CLI registers. pyspark is imported lazily everywhere, so importing
this package (or the CLI) needs no Java.
"""

from __future__ import annotations

from abcast.pipeline.commands import check, report

__all__ = ["check", "report"]
