"""The one place a SparkSession is built for abcast's pipeline.

Rules: Spark stays on loopback and quiet (no UI, log level ERROR), its JVMs use the
parallel (throughput) garbage collector, and its Python workers run the interpreter
that runs us (so pyarrow/pandas are importable in them).
The master is `local[*]` unless the caller names another (`spark://host:7077`, a
standalone cluster) or a Spark Connect server (`remote="sc://host:15002"`: the session
is then a thin client, and the server's own settings apply); this module does not read
traces or know any check. pyspark is imported only inside `build_session`, so importing
this module costs nothing when Java is absent. The driver JVM maps the class-data-sharing
archive of abcast.pipeline.class_archive when there is one; a caller that owns its
session may have it written (`save_classes`) and then ends with `stop_session`.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Final

from abcast.pipeline import class_archive

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

DEFAULT_MASTER: Final = "local[*]"
LOOPBACK: Final = "127.0.0.1"
# An embedded master runs every task inside the driver JVM, whose default heap (1g) makes
# the cached tables of a 10-million-row trace spill to disk. ABCAST_SPARK_DRIVER_MEMORY
# overrides it.
DRIVER_MEMORY_ENV: Final = "ABCAST_SPARK_DRIVER_MEMORY"
LOCAL_DRIVER_MEMORY: Final = "3g"
#: the executors' heap on a cluster (Spark's default: 1g)
EXECUTOR_MEMORY_ENV: Final = "ABCAST_SPARK_EXECUTOR_MEMORY"
#: more options for the JVMs this module starts, after its own (the test suite sets
#: "-XX:TieredStopAtLevel=1": its short runs of small jobs on tiny frames cost less CPU
#: without the optimising compiler)
JAVA_OPTIONS_ENV: Final = "ABCAST_SPARK_JAVA_OPTIONS"

# Few shuffle partitions: traces are checked on one machine or a small cluster, and
# Spark's default of 200 makes every small job pay for 200 near-empty tasks. Adaptive
# execution coalesces or splits from there.
_SHUFFLE_PARTITIONS: Final = "8"


# The throughput collector: a check is one batch of jobs that fills and drops its caches
# at once, where the default G1's concurrent work only costs (11.25 M events: 0.91 of
# the CPU time, side by side). Spark loads and generates classes until its metaspace
# holds ~150 MB: from the default start of ~21 MB, each growth step was a full
# collection ("Metadata GC Threshold", four of them in a 2.25 M-event check).
_JVM_GC: Final = "-XX:+UseParallelGC -XX:MetaspaceSize=256m"

# Spark's own log4j2 profile prints a banner and WARN lines before `setLogLevel` can run;
# this profile keeps stderr to errors from the first line on.
_LOG4J2_PROPERTIES: Final = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
logger.spark.name = org.apache.spark
logger.spark.level = error
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} %p %c{1}: %m%n%ex
"""


def _log4j2_config() -> Path:
    path = Path(tempfile.gettempdir()) / f"abcast-log4j2-{os.getuid()}.properties"
    if not path.exists() or path.read_text() != _LOG4J2_PROPERTIES:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(_LOG4J2_PROPERTIES)
        tmp.replace(path)
    return path


# The archive the running driver JVM writes at exit (set by a `save_classes` start; at
# most one: there is one driver JVM per process).
_PENDING_ARCHIVE: list[class_archive.Pending] = []


def spark_home() -> Path:
    """The installed PySpark's directory: its SPARK_HOME (jars, bin, sbin)."""
    import pyspark

    return Path(pyspark.__file__).parent


def saving_classes() -> bool:
    """Whether the running driver JVM will write the class archive when stopped."""
    return bool(_PENDING_ARCHIVE)


def _prepare_environment() -> None:
    """Environment the JVM and the Python workers read at launch."""
    os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable


def build_session(
    master: str | None = None,
    app_name: str = "abcast",
    driver_memory: str | None = None,
    progress: bool = False,
    remote: str | None = None,
    save_classes: bool = False,
) -> SparkSession:
    """A SparkSession on `master` (default `local[*]`), loopback-bound and quiet; or,
    given `remote`, a Spark Connect session to that server.

    `driver_memory` (default: $ABCAST_SPARK_DRIVER_MEMORY, else 3g for a local master)
    only takes effect when this call starts the JVM (an already running session is
    returned as it is, with its own settings). `progress` shows Spark's stage progress
    bar on stderr (for a terminal). `save_classes`: when this call starts the JVM and
    there is no class archive yet, the JVM writes one at exit, and the caller promises
    to end with `stop_session` (which waits for it).
    """
    _prepare_environment()
    if remote is not None:
        from pyspark.sql import SparkSession as Session

        connected = Session.builder.remote(remote).appName(app_name).getOrCreate()
        connected.conf.set("spark.sql.shuffle.partitions", _SHUFFLE_PARTITIONS)
        return connected
    master = master or DEFAULT_MASTER
    if driver_memory is None:
        driver_memory = os.environ.get(DRIVER_MEMORY_ENV) or (
            LOCAL_DRIVER_MEMORY if master.startswith("local") else None)
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    running = SparkSession._instantiatedSession
    if running is not None and running._sc._jsc is not None:
        # As it is: the builder's getOrCreate would overwrite its SQL settings (a test's
        # shared session with two shuffle partitions would go on with eight).
        return running
    java_options = (f"{_JVM_GC} -Dlog4j2.configurationFile=file:{_log4j2_config()} "
                    f"{os.environ.get(JAVA_OPTIONS_ENV, '')}").rstrip()
    # An embedded driver holds the cached tables: its heap starts at its full size, so
    # the old generation is not grown by one full collection after another as they fill.
    driver_options = (f"{java_options} -Xms{driver_memory}"
                      if driver_memory is not None and master.startswith("local")
                      else java_options)
    pending = None
    if SparkContext._gateway is None:  # this call starts the driver JVM
        archive_options, pending = class_archive.jvm_options(spark_home(),
                                                             create=save_classes)
        driver_options = f"{driver_options} {archive_options}".rstrip()
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.driver.bindAddress", LOOPBACK)
        .config("spark.driver.host", LOOPBACK)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "true" if progress else "false")
        .config("spark.sql.shuffle.partitions", _SHUFFLE_PARTITIONS)
        .config("spark.sql.adaptive.enabled", "true")
        # The pipeline lays tables out by (run_id, node) and by (run_id, origin, seq) on
        # purpose: joins on more keys than that must reuse the layout, not re-shuffle.
        .config("spark.sql.requireAllClusterKeysForCoPartition", "false")
        # The cached tables live for one command: building them uncompressed is about
        # twice as fast, and the memory is there (see LOCAL_DRIVER_MEMORY).
        .config("spark.sql.inMemoryColumnarStorage.compressed", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.pyspark.python", sys.executable)
        .config("spark.pyspark.driver.python", sys.executable)
        .config("spark.driver.extraJavaOptions", driver_options)
        .config("spark.executor.extraJavaOptions", java_options)
    )
    if driver_memory is not None:
        builder = builder.config("spark.driver.memory", driver_memory)
    executor_memory = os.environ.get(EXECUTOR_MEMORY_ENV)
    if executor_memory:
        builder = builder.config("spark.executor.memory", executor_memory)
    spark = builder.getOrCreate()
    if pending is not None:
        _PENDING_ARCHIVE[:] = [pending]
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def stop_session(spark: SparkSession) -> None:
    """Stop `spark`; if its JVM was started to write the class archive, shut that JVM
    down and wait while it does (once per Spark install and JDK: seconds)."""
    spark.stop()
    if not _PENDING_ARCHIVE:
        return
    pending = _PENDING_ARCHIVE.pop()
    from pyspark import SparkContext

    gateway = SparkContext._gateway
    jvm = getattr(gateway, "proc", None)
    if gateway is None or jvm is None:
        return
    gateway.shutdown()
    SparkContext._gateway = None
    SparkContext._jvm = None
    class_archive.finish(pending, jvm)
