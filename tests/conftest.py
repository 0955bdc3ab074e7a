"""Session-wide test settings."""
import os
import tempfile

# apps.pageviews upserts its per-minute counts into SQLite; keep the tests' copy out of the
# working tree (set before any test imports the app module).
os.environ.setdefault("PAGEVIEWS_DB", f"sqlite:///{tempfile.mkdtemp(prefix='streamkit-tests-')}/pageviews.db")


def pytest_configure(config):  # noqa: D103 - pytest hook
    config.addinivalue_line("markers", "spark: needs pyspark and a Java runtime (one SparkSession per test session)")
