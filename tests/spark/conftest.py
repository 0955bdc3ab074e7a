"""One local SparkSession for the whole test session (starting one takes seconds)."""
import shutil

import pytest


@pytest.fixture(scope="session")
def spark():
    try:
        import pyspark  # noqa: F401
    except ImportError:
        pytest.skip("pyspark is not installed: `make test` installs it with the test extra")
    if shutil.which("java") is None:
        pytest.skip("no `java` on PATH: Spark needs Java 17+ (make setup-spark installs it)")
    from streamkit.spark import get_session

    session = get_session("local[2]", app_name="streamkit-tests", **{
        "spark.ui.enabled": "false", "spark.ui.showConsoleProgress": "false",
        "spark.default.parallelism": "2", "spark.sql.shuffle.partitions": "2"})
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
