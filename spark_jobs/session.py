"""SparkSession set-up shared by the jobs' ``main`` functions.

``--master`` wins; without it the master comes from ``spark-submit`` (or ``PYSPARK_SUBMIT_ARGS``)
when one launched us, and is ``local[*]`` otherwise. Every session runs in UTC so that anything
Spark renders as a date or hour matches the archive's UTC directory layout.
"""

from __future__ import annotations

import argparse
import logging
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

from pyspark.sql import SparkSession

__all__ = ["add_spark_arguments", "configure_logging", "parse_conf", "spark_session"]

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


@contextmanager
def spark_session(
    app_name: str, master: str | None = None, conf: dict[str, str] | None = None, verbose: bool = False
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
    builder = SparkSession.builder.appName(app_name)
    if master:
        builder = builder.master(master)
    elif not _launched_by_spark_submit():
        builder = builder.master(DEFAULT_MASTER)
    builder = builder.config("spark.sql.session.timeZone", "UTC").config(
        "spark.ui.showConsoleProgress", "true" if verbose else "false"
    )
    if not verbose:
        quiet = Path(tempfile.gettempdir()) / "ottermq-spark-log4j2.properties"
        quiet.write_text(_QUIET_LOG4J2)
        builder = builder.config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{quiet}")
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    origin = "from spark-submit" if _launched_by_spark_submit() else DEFAULT_MASTER
    log.info("starting Spark (master: %s)", master or origin)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("WARN" if verbose else "ERROR")
    try:
        yield spark
    finally:
        spark.stop()
