"""The SparkSession a replay runs on when the caller gives none."""
from __future__ import annotations

import os
import shutil
import sys
from typing import Any, Optional

from ..errors import ConfigError

DEFAULT_MASTER = "local[*]"


def check_java() -> None:
    """pyspark needs a Java 17+ runtime; say exactly what to install when there is none."""
    if os.environ.get("JAVA_HOME") or shutil.which("java"):
        return
    raise ConfigError("Spark needs Java 17 or newer and no `java` is on PATH (and JAVA_HOME is unset): "
                      "install it with `sudo apt-get install -y openjdk-17-jre-headless` (Debian/Ubuntu), "
                      "`brew install openjdk@17` (macOS), or run `make setup-spark`")


def get_session(master: Optional[str] = None, *, app_name: str = "streamkit-replay", **config: str) -> Any:
    """A SparkSession on ``master`` (default ``local[*]``) whose Python workers run this
    interpreter with this interpreter's import path, so they can import the app."""
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
    for key, value in config.items():
        builder = builder.config(key, value)
    return builder.getOrCreate()
