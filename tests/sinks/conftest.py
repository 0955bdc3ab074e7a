import pytest

from tests.postgres_server import start_postgres


@pytest.fixture(scope="session")
def postgres_url():
    """A PostgreSQL server for the session (installed from Debian's packages if need be)."""
    url, stop, reason = start_postgres()
    if url is None:
        pytest.skip(f"PostgreSQL tests skipped: {reason}")
    try:
        yield url
    finally:
        stop()
