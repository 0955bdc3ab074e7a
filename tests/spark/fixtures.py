"""One local SparkSession for the whole test session (starting one takes seconds), with
Spark's Kafka source on its classpath. Registered for the whole suite by tests/conftest.py
(``pytest_plugins``): the ``backend`` fixture's Spark leg uses the same session as tests/spark/.

``scripts/ensure-spark-kafka`` (``make test`` runs it first) fetches spark-sql-kafka-0-10 and
the jars it needs that PySpark lacks from Maven Central; the session gets them as a user
would, through ``STREAMKIT_SPARK_JARS`` (see streamkit/spark/session.py). A missing download
fails the tests that read Kafka (``spark_kafka``) rather than skipping them.
"""
import os
import shutil
import subprocess
from pathlib import Path
from typing import Iterator, List, Optional

import pytest


REPO = Path(__file__).resolve().parents[2]
ENSURE_SPARK_KAFKA = REPO / "scripts" / "ensure-spark-kafka"
_missing: List[str] = []
"""Why Spark's Kafka source is not there (the fetch's error), for :func:`spark_kafka`."""


def spark_kafka_jars() -> Optional[str]:
    """The folder of Spark's Kafka source jars (fetched by ``scripts/ensure-spark-kafka`` if
    needed), or None with the reason in ``_missing``."""
    try:
        done = subprocess.run([str(ENSURE_SPARK_KAFKA)], capture_output=True, text=True, timeout=900)
    except subprocess.TimeoutExpired:
        _missing.append("scripts/ensure-spark-kafka did not finish in 900 s")
        return None
    if done.returncode != 0:
        _missing.append(f"scripts/ensure-spark-kafka failed (exit {done.returncode}): {done.stderr[-2000:]}")
        return None
    return done.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="session")
def spark() -> Iterator[object]:
    try:
        import pyspark  # noqa: F401
    except ImportError:
        pytest.skip("pyspark is not installed: `make test` installs it with the test extra")
    if shutil.which("java") is None:
        pytest.skip("no `java` on PATH: Spark needs Java 17+ (make setup-spark installs it)")
    from streamkit.spark import get_session
    from streamkit.spark.session import JARS_ENV_VAR

    jars = spark_kafka_jars()
    before = os.environ.get(JARS_ENV_VAR)
    if jars:
        os.environ[JARS_ENV_VAR] = ",".join(filter(None, [before, jars]))
    try:
        session = get_session("local[2]", app_name="streamkit-tests", **{
            "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
            "spark.default.parallelism": "2", "spark.sql.shuffle.partitions": "2"})
    finally:
        if before is None:
            os.environ.pop(JARS_ENV_VAR, None)
        else:
            os.environ[JARS_ENV_VAR] = before
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def spark_kafka(spark: object) -> object:
    """``spark``, checked to have its Kafka source (else the test fails, saying why)."""
    try:
        jvm = spark._jvm  # type: ignore[attr-defined]
        jvm.org.apache.spark.sql.execution.datasources.DataSource.lookupDataSource(
            "kafka", spark._jsparkSession.sessionState().conf())  # type: ignore[attr-defined]
    except Exception as exc:  # noqa: BLE001 - any failure to find it fails the test
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        pytest.fail(f"Spark has no Kafka source ({first[:300]}); " + "; ".join(_missing or [
            "scripts/ensure-spark-kafka gave a folder, yet Spark cannot load the 'kafka' data source"]))
    return spark
