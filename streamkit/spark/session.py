"""The SparkSession a replay runs on when the caller gives none.

Jars Spark should load (its Kafka source, for ``kafka:`` inputs) come from
``STREAMKIT_SPARK_JARS``: jar files and folders of jars, separated by commas or
``os.pathsep``, e.g. the folder ``scripts/ensure-spark-kafka`` prints. They are passed
as ``spark.jars`` (local files: nothing is downloaded when Spark starts).

A session streamkit starts is sized for a replay (:data:`SESSION_DEFAULTS`): the driver
JVM only plans, shuffles, sorts and keeps the stages' rows, which spill to local disk
when they outgrow its memory, so its heap is bounded (1 GiB, ``spark.driver.memory`` or
``STREAMKIT_SPARK_DRIVER_MEMORY``) instead of growing towards Spark's default; the
records are processed in the Python workers. Any of these settings given to
:func:`get_session` wins. A SparkSession the caller passes to a replay is theirs to size.
"""
from __future__ import annotations

import glob
import os
import re
import shutil
import sys
from typing import Any, List, Mapping, Optional, Sequence

from ..errors import ConfigError

DEFAULT_MASTER = "local[*]"
JARS_ENV_VAR = "STREAMKIT_SPARK_JARS"
DRIVER_MEMORY_ENV_VAR = "STREAMKIT_SPARK_DRIVER_MEMORY"

SESSION_DEFAULTS: Mapping[str, str] = {
    "spark.driver.memory": "1g",
    # The serial collector: no parallel GC threads competing with the Python workers for
    # the cores, and the least native memory beside the heap. The client compiler only:
    # the JVM's share of a replay is short loops (Arrow conversion, shuffle, sort), and
    # the server compiler's work at start-up cost more than it gave back (measured on
    # bench/spark_replay.py).
    "spark.driver.extraJavaOptions": "-XX:+UseSerialGC -XX:TieredStopAtLevel=1",
    # Adaptive execution re-plans at every shuffle, as a separate Spark job each time: a
    # replay's shuffles put each task in its own partition already (.routing).
    "spark.sql.adaptive.enabled": "false",
    "spark.ui.showConsoleProgress": "true",
    "spark.python.worker.reuse": "true",
    "spark.sql.session.timeZone": "UTC",
}
"""What :func:`get_session` sets on a session it starts, unless given other values."""


def check_java() -> None:
    """pyspark needs a Java 17+ runtime; say exactly what to install when there is none."""
    if os.environ.get("JAVA_HOME") or shutil.which("java"):
        return
    raise ConfigError("Spark needs Java 17 or newer and no `java` is on PATH (and JAVA_HOME is unset): "
                      "install it with `sudo apt-get install -y openjdk-17-jre-headless` (Debian/Ubuntu), "
                      "`brew install openjdk@17` (macOS), or run `make setup-spark`")


def spark_jars(entries: Sequence[str]) -> List[str]:
    """The jar files named by ``entries`` (jar files, or folders whose ``*.jar`` files are
    all taken), as absolute paths, each once; a missing entry is a :class:`ConfigError`."""
    jars: List[str] = []
    for entry in entries:
        path = os.path.abspath(os.path.expanduser(entry))
        if os.path.isdir(path):
            found = sorted(glob.glob(os.path.join(glob.escape(path), "*.jar")))
            if not found:
                raise ConfigError(f"{JARS_ENV_VAR}: folder {path} has no .jar file")
            jars += found
        elif os.path.isfile(path):
            jars.append(path)
        else:
            raise ConfigError(f"{JARS_ENV_VAR}: {path} is neither a jar file nor a folder")
    return list(dict.fromkeys(jars))


def configured_jars(environ: Optional[Mapping[str, str]] = None) -> List[str]:
    """The jar files ``STREAMKIT_SPARK_JARS`` names (none when it is unset or empty)."""
    value = (os.environ if environ is None else environ).get(JARS_ENV_VAR, "")
    return spark_jars([e.strip() for e in re.split(f"[,{re.escape(os.pathsep)}]", value) if e.strip()])


def get_session(master: Optional[str] = None, *, app_name: str = "streamkit-replay", **config: str) -> Any:
    """A SparkSession on ``master`` (default ``local[*]``) whose Python workers run this
    interpreter with this interpreter's import path, so they can import the app, set up
    with :data:`SESSION_DEFAULTS` (``config`` overrides them). The
    jars of ``STREAMKIT_SPARK_JARS`` are added to ``spark.jars`` (after any in ``config``).
    A session already running is returned as it is (Spark reads ``spark.jars`` only at
    start)."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise ConfigError("the Spark backend needs pyspark: pip install 'streamkit[spark]'") from None
    check_java()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    paths = [p for p in sys.path if p] + [os.getcwd()]
    current = os.environ.get("PYTHONPATH")
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(([current] if current else []) + paths))
    builder = SparkSession.builder.master(master or DEFAULT_MASTER).appName(app_name)
    settings = dict(SESSION_DEFAULTS)
    if os.environ.get(DRIVER_MEMORY_ENV_VAR):
        settings["spark.driver.memory"] = os.environ[DRIVER_MEMORY_ENV_VAR]
    for key, value in settings.items():
        builder = builder.config(key, value)
    jars = [j for j in config.pop("spark.jars", "").split(",") if j.strip()] + configured_jars()
    if jars:
        config["spark.jars"] = ",".join(dict.fromkeys(jars))
    for key, value in config.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
