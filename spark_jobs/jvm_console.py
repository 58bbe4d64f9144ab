"""The Spark JVM's console output without ``--verbose``: its start-up warning lines are left out.

pyspark starts the driver JVM (``spark-submit``) with our stderr as its own. Spark 4's launcher adds
``--add-modules=jdk.incubator.vector`` to every JVM it starts (the Vector API for its linear algebra),
and the JVM then prints ``WARNING: Using incubator modules: jdk.incubator.vector`` on stderr before
any configuration of ours can act: no JVM option silences it, and log4j never sees it. So a quiet
session starts its JVM through pyspark's ``launch_gateway`` with ``popen_kwargs`` (its documented
way of capturing the JVM's stdout and stderr), its stderr a pipe that a daemon thread copies to ours
line by line, leaving out the lines of ``JVM_NOISE``. Everything else the JVM writes (log4j's
errors, a crash report) still reaches the console, as it is written. The ``SparkContext`` is then
made on that gateway (``SparkContext(conf, gateway=...)``), and ``SparkSession.builder`` finds it.
"""

from __future__ import annotations

import os
import re
import sys
import threading
from collections.abc import Mapping
from typing import IO

__all__ = ["JVM_NOISE", "copy_lines", "start_quiet_context"]

#: What the JVM prints at start-up that is noise to a user of the jobs.
JVM_NOISE = (re.compile(rb"^WARNING: Using incubator modules: "),)


def copy_lines(source: IO[bytes], target: IO[str]) -> None:
    """Copy ``source`` to ``target`` line by line until it ends, leaving out the lines of ``JVM_NOISE``."""
    for line in source:
        if any(pattern.match(line) for pattern in JVM_NOISE):
            continue
        target.write(line.decode("utf-8", "replace"))
        target.flush()


def start_quiet_context(options: Mapping[str, str]) -> None:
    """Start the ``SparkContext`` of ``options`` (master, app name and every setting) on a JVM whose
    stderr goes through :func:`copy_lines`."""
    from pyspark import SparkConf, SparkContext
    from pyspark.java_gateway import launch_gateway

    conf = SparkConf()
    for key, value in options.items():
        conf.set(key, value)
    read, write = os.pipe()
    source = os.fdopen(read, "rb")
    thread = threading.Thread(
        target=copy_lines, args=(source, sys.stderr), name="ottermq-spark-stderr", daemon=True
    )
    thread.start()
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stderr": write})  # type: ignore[no-untyped-call]
    finally:
        os.close(write)  # the JVM holds its own copy; the thread ends when the JVM does
    SparkContext(conf=conf, gateway=gateway)
