"""Fixtures: the real ``streamkit`` CLI in subprocesses (see tests/cli_processes.py), and
Apache Kafka for the console tools' tests."""
from tests.cli_processes import broker_dir, cli, spawn  # noqa: F401 (fixtures)
