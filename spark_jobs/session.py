"""SparkSession set-up shared by the jobs' ``main`` functions.

``--master`` wins; without it the master comes from ``spark-submit`` (or ``PYSPARK_SUBMIT_ARGS``)
when one launched us, and is ``local[*]`` otherwise. Every session runs in UTC so that anything
Spark renders as a date or hour matches the archive's UTC directory layout.

A job that knows the size of its local input before Spark starts passes it (``input_bytes``) and
gets Spark's classes from a class-data sharing archive (:func:`class_data_options`) and settings
fitted to the input (:func:`fitted_conf`; ``--conf`` still wins): for a small archive, a JVM
that starts quickly (C1 JIT only, serial GC, one shuffle partition, no web UI), because there the
time goes into starting and warming up the JVM, not into the data; for a big local one, a driver heap to
match (local mode runs everything in the driver JVM, whose default heap is 1 GiB).
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from ottermq.spark_jobs.jvm_console import start_quiet_context
from pyspark.sql import SparkSession

__all__ = [
    "CDS_ENV",
    "command_seconds",
    "SMALL_INPUT_BYTES",
    "add_spark_arguments",
    "class_data_options",
    "configure_logging",
    "fitted_conf",
    "parse_conf",
    "spark_session",
]

log = logging.getLogger(__name__)

DEFAULT_MASTER = "local[*]"


def _launched_by_spark_submit() -> bool:
    # spark-submit runs the script with a gateway already listening; the pyspark launcher reads
    # --master from PYSPARK_SUBMIT_ARGS.
    if "PYSPARK_GATEWAY_PORT" in os.environ:
        return True
    return "--master" in os.environ.get("PYSPARK_SUBMIT_ARGS", "")


def parse_conf(pairs: Sequence[str]) -> dict[str, str]:
    """Turn ``["k=v", ...]`` into a dict.

    Raises:
        ValueError: an item without ``=``.
    """
    conf: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise ValueError(f"--conf expects KEY=VALUE, got {pair!r}")
        conf[key.strip()] = value
    return conf


# The JVM's log4j2 set-up when --verbose is not given: errors only, one line each, so the console
# shows our own progress lines rather than Spark's banners, WARN lines and progress bars.
_QUIET_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = stderr
appender.console.type = Console
appender.console.name = stderr
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{HH:mm:ss} spark %p %c{1}: %m%n
logger.repl.name = org.apache.spark.repl.Main
logger.repl.level = error
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
"""


_IMPORTED = time.monotonic()


def command_seconds() -> float:
    """Wall time since this process started: the whole command, the interpreter's start, imports and
    the JVM's included (``/proc/self/stat``'s start time; elsewhere, since this module was imported)."""
    try:
        with open("/proc/self/stat", encoding="ascii") as stat:
            started = int(stat.read().rsplit(")", 1)[1].split()[19])  # field 22: starttime, in ticks
        with open("/proc/uptime", encoding="ascii") as uptime:
            now = float(uptime.read().split()[0])
        return max(now - started / os.sysconf("SC_CLK_TCK"), 0.0)
    except (OSError, ValueError, IndexError):
        return time.monotonic() - _IMPORTED


def configure_logging(verbose: bool = False) -> None:
    """Our progress lines at INFO; py4j's and Spark's chatter only with ``--verbose``."""
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.getLogger("py4j").setLevel(logging.INFO if verbose else logging.WARNING)


def add_spark_arguments(parser: argparse.ArgumentParser) -> None:
    """Add ``--master``, ``--conf`` and ``--verbose`` to an :class:`argparse.ArgumentParser`."""
    parser.add_argument(
        "--verbose", action="store_true", help="show Spark's own logging and progress bars (default: quiet)"
    )
    add = parser.add_argument
    add(
        "--master",
        default=None,
        help=f"Spark master URL (default: the one spark-submit set, else {DEFAULT_MASTER})",
    )
    add(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="extra Spark configuration, repeatable (e.g. spark.driver.memory=4g)",
    )


def fit_shuffle_partitions(spark: SparkSession) -> Callable[[], None]:
    """Spark's default of 200 shuffle partitions is for clusters: the jobs' aggregations are small, so
    with the default in force use two per core (at least 4, at most 200) until the returned function
    puts it back. A value set on purpose (``--conf spark.sql.shuffle.partitions=N``) is left alone.

    A streaming query keeps the count it started with in its checkpoint (``dlq watch``: one state
    store per partition, so 200 made a small archive's batch take seconds)."""
    key = "spark.sql.shuffle.partitions"
    current = spark.conf.get(key)
    if current != "200":
        return lambda: None
    spark.conf.set(key, str(min(200, max(4, 2 * spark.sparkContext.defaultParallelism))))
    return lambda: spark.conf.set(key, current)


#: Up to this many bytes of local input (JSON Lines or Parquet) an archive counts as small.
SMALL_INPUT_BYTES = 64 << 20
#: From this many bytes of local input the driver gets a bigger heap (see :func:`fitted_conf`).
BIG_INPUT_BYTES = 256 << 20

# quick start: C1 only (C2 compiles for seconds on the 2 cores a small run has, to speed up loops
# that run for milliseconds), the serial collector (no GC threads to start for a small heap)
_QUICK_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
# up to C1_INPUT_BYTES: C1 only. Such a report is a few jobs of seconds each, each with its own code
# paths: C2 spends more CPU compiling them than its faster code saves (1M records as Parquet on 2
# cores: 26 s instead of 34 s for the whole command); beyond, C2's code pays (10M: 87 s, not 117 s)
_C1_JVM = "-XX:TieredStopAtLevel=1"
C1_INPUT_BYTES = 512 << 20
_QUICK_CONF = {
    "spark.ui.enabled": "false",
    "spark.sql.shuffle.partitions": "1",
    "spark.default.parallelism": "1",
}


def _memory_bytes() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def fitted_conf(input_bytes: int | None, master: str | None) -> tuple[dict[str, str], str]:
    """Spark settings and driver JVM options for an input of ``input_bytes`` (None: unknown, e.g. a
    Hadoop URI: nothing changed). Only for local masters: a cluster's executors are set up there."""
    if input_bytes is None or not (master or DEFAULT_MASTER).startswith("local"):
        return {}, ""
    if input_bytes <= SMALL_INPUT_BYTES:
        return dict(_QUICK_CONF), _QUICK_JVM
    memory = _memory_bytes()
    jvm = _C1_JVM if input_bytes <= C1_INPUT_BYTES else ""
    if input_bytes >= BIG_INPUT_BYTES and memory is not None:
        heap_gib = max(1, min(4, memory // 4 >> 30))  # a quarter of the machine, 4 GiB at most
        return {"spark.driver.memory": f"{heap_gib}g"}, jvm
    return {}, jvm


# -- class-data sharing --------------------------------------------------------------------------------

#: Set to 0 to start Spark without the class-data archive (see :func:`class_data_options`).
CDS_ENV = "OTTERMQ_SPARK_CDS"
_CDS_QUIET = "-Xlog:cds*=off"  # a class the archive cannot hold is worth no warning on the console


def _java() -> Path | None:
    """The ``java`` that ``spark-submit`` runs (``$JAVA_HOME/bin/java``, else the one on ``PATH``)."""
    home = os.environ.get("JAVA_HOME")
    found = str(Path(home) / "bin" / "java") if home else shutil.which("java")
    return Path(found).resolve() if found and Path(found).exists() else None


def _cds_folder() -> Path | None:
    """This user's folder for archives in the temp directory (None when it is not safely ours)."""
    folder = Path(tempfile.gettempdir()) / f"ottermq-spark-cds-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        st = folder.stat()
    except OSError:
        return None
    if st.st_uid != os.getuid() or st.st_mode & 0o077:  # another user's, or writable by others
        return None
    return folder


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def class_data_options(jvm_flags: str) -> tuple[str, Path | None]:
    """JVM options that load Spark's classes from a class-data sharing archive (AppCDS), and the file
    a new archive is being dumped to (None: using one, or none at all).

    Starting the driver JVM loads and verifies some 15,000 classes from Spark's jars: with them
    mapped from an archive, a local session starts and runs its first job ~2.5 s sooner on a 2-core
    machine. The first run without an archive dumps one when its JVM exits (-XX:ArchiveClassesAtExit:
    ~140 MB, some seconds after the command has returned); later runs map it. The archive lives in
    ``$TMPDIR/ottermq-spark-cds-<uid>/``, one per java binary, Spark jars, configuration folders and
    ``-XX`` flags (the JVM itself also refuses one that does not match, and then starts as usual).
    ``OTTERMQ_SPARK_CDS=0`` turns it off.
    """
    if os.environ.get(CDS_ENV, "1").strip().lower() in ("0", "false", "no", "off"):
        return "", None
    java, folder = _java(), _cds_folder()
    if java is None or folder is None:
        return "", None
    try:
        import pyspark

        home = Path(os.environ.get("SPARK_HOME") or Path(pyspark.__file__).parent)
        jars = sorted(
            (p.name, p.stat().st_size, int(p.stat().st_mtime)) for p in (home / "jars").glob("*.jar")
        )
        java_stat = java.stat()
    except OSError:
        return "", None
    ident = [
        str(java),
        java_stat.st_size,
        int(java_stat.st_mtime),
        str(home),
        jars,
        os.environ.get("SPARK_CONF_DIR"),
        os.environ.get("HADOOP_CONF_DIR"),
        os.environ.get("YARN_CONF_DIR"),
        sorted(flag for flag in jvm_flags.split() if flag.startswith("-XX:")),
    ]
    key = hashlib.sha256(repr(ident).encode()).hexdigest()[:20]
    archive = folder / f"{key}.jsa"
    dumping = False
    for dump in folder.glob(f"{key}-*.dump"):
        pid_file = dump.with_suffix(".pid")
        try:
            pid = int(pid_file.read_text())
        except (OSError, ValueError):
            pid = None
        if pid is not None and _alive(pid):
            dumping = True  # a JVM is writing it: leave it alone
            continue
        if pid is not None and dump.stat().st_size > 1 << 20:  # its JVM has finished: ready to use
            os.replace(dump, archive)
        else:
            dump.unlink(missing_ok=True)
        pid_file.unlink(missing_ok=True)
    for pid_file in folder.glob("*.pid"):  # a JVM that never dumped (killed, or it failed): its note
        try:
            orphan = not pid_file.with_suffix(".dump").exists() and not _alive(int(pid_file.read_text()))
        except (OSError, ValueError):
            orphan = True
        if orphan:
            pid_file.unlink(missing_ok=True)
    if archive.is_file():
        return f"-XX:SharedArchiveFile={archive} {_CDS_QUIET}", None
    if dumping:
        return "", None
    target = folder / f"{key}-{os.getpid()}-{time.time_ns()}.dump"
    return f"-XX:ArchiveClassesAtExit={target} {_CDS_QUIET}", target


def _note_dumping_jvm(spark: SparkSession, target: Path) -> None:
    """Record the pid of the JVM that dumps ``target`` at its exit (a later run then knows when the
    archive is complete)."""
    try:
        pid = int(spark.sparkContext._jvm.java.lang.ProcessHandle.current().pid())  # type: ignore[union-attr]
        target.with_suffix(".pid").write_text(str(pid))
    except Exception:  # noqa: BLE001 - no pid, no archive: the next run dumps again
        target.unlink(missing_ok=True)


@contextmanager
def spark_session(
    app_name: str,
    master: str | None = None,
    conf: dict[str, str] | None = None,
    verbose: bool = False,
    input_bytes: int | None = None,
) -> Iterator[SparkSession]:
    """Yield a SparkSession; stop it afterwards only if this call started it.

    An already active session (tests, notebooks, an embedding application) is reused as is. Unless
    ``verbose``, the JVM logs errors only and Spark draws no progress bars (``--conf`` still wins).
    """
    active = SparkSession.getActiveSession()
    if active is not None:
        active.conf.set("spark.sql.session.timeZone", "UTC")
        yield active
        return
    options: dict[str, str] = {"spark.app.name": app_name}
    submitted = _launched_by_spark_submit()
    if master:
        options["spark.master"] = master
    elif not submitted:
        options["spark.master"] = DEFAULT_MASTER
    options["spark.sql.session.timeZone"] = "UTC"
    options["spark.ui.showConsoleProgress"] = "true" if verbose else "false"
    effective = master if master or not submitted else "?"  # "?": spark-submit's
    fitted, java_options = fitted_conf(input_bytes, effective)
    options.update(fitted)
    dump: Path | None = None
    local = (effective or DEFAULT_MASTER).startswith("local")
    if input_bytes is not None and local and "spark.driver.extraJavaOptions" not in (conf or {}):
        cds, dump = class_data_options(java_options)
        java_options = f"{java_options} {cds}".strip()
    if not verbose:
        quiet = Path(tempfile.gettempdir()) / "ottermq-spark-log4j2.properties"
        quiet.write_text(_QUIET_LOG4J2)
        java_options = f"-Dlog4j2.configurationFile=file:{quiet} {java_options}".strip()
    if java_options:
        options["spark.driver.extraJavaOptions"] = java_options
    if fitted:
        log.info(
            "input of %.1f MB: %s", (input_bytes or 0) / 1e6, ", ".join(f"{k}={v}" for k, v in fitted.items())
        )
    options.update(conf or {})
    origin = "from spark-submit" if submitted else DEFAULT_MASTER
    log.info("starting Spark (master: %s)", master or origin)
    if not verbose and not submitted:
        start_quiet_context(options)  # the JVM's start-up warnings left out (jvm_console)
    builder = SparkSession.builder
    for key, value in options.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    if dump is not None:
        _note_dumping_jvm(spark, dump)
    spark.sparkContext.setLogLevel("WARN" if verbose else "ERROR")
    try:
        yield spark
    finally:
        spark.stop()
