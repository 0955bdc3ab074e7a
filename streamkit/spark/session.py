"""The SparkSession a replay runs on when the caller gives none.

Jars Spark should load (its Kafka source, for ``kafka:`` inputs) come from
``STREAMKIT_SPARK_JARS``: jar files and folders of jars, separated by commas or
``os.pathsep``, e.g. the folder ``scripts/ensure-spark-kafka`` prints. They are passed
as ``spark.jars`` (local files: nothing is downloaded when Spark starts).
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
    interpreter with this interpreter's import path, so they can import the app. The
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
    builder = (SparkSession.builder.master(master or DEFAULT_MASTER).appName(app_name)
               .config("spark.ui.showConsoleProgress", "true")
               .config("spark.driver.memory", os.environ.get("STREAMKIT_SPARK_DRIVER_MEMORY", "4g"))
               .config("spark.python.worker.reuse", "true")
               .config("spark.sql.session.timeZone", "UTC"))
    jars = [j for j in config.pop("spark.jars", "").split(",") if j.strip()] + configured_jars()
    if jars:
        config["spark.jars"] = ",".join(dict.fromkeys(jars))
    for key, value in config.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
