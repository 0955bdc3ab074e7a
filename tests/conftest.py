"""Session-wide test settings."""
import os
import tempfile

# Fixture modules shared across folders, registered here once so that a session-scoped broker or
# SparkSession starts once per pytest process (a conftest importing a fixture registers a second one):
# the Kafka brokers (kafka, kafka_tls, kafka_cluster, ..., unique_name), the SparkSession (spark,
# spark_kafka) and ``backend`` (a topology on the test driver, an embedded worker and the Spark replay).
pytest_plugins = ("tests.kafka.fixtures", "tests.spark.fixtures", "tests.backends")

# apps.pageviews upserts its per-minute counts into SQLite; keep the tests' copy out of the
# working tree (set before any test imports the app module).
os.environ.setdefault("PAGEVIEWS_DB", f"sqlite:///{tempfile.mkdtemp(prefix='streamkit-tests-')}/pageviews.db")


def pytest_configure(config):  # noqa: D103 - pytest hook
    config.addinivalue_line("markers", "spark: needs pyspark and a Java runtime (one SparkSession per test session)")
