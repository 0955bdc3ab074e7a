"""Fixtures that run the real ``streamkit`` CLI in subprocesses against a fresh embedded
broker directory (imported by the conftest of tests/cli and tests/e2e)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Callable, Optional

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture
def broker_dir(tmp_path: Path) -> Path:
    return tmp_path / "broker"


@pytest.fixture
def cli(broker_dir: Path) -> Callable[..., subprocess.CompletedProcess]:
    """Run ``python -m streamkit ARGS`` against a fresh embedded broker directory (and a
    fresh database for apps.pageviews' SQLite copy)."""

    def run(*args: str, stdin: Optional[str] = None, timeout: float = 60,
            cwd: Optional[Path] = None, env: Optional[dict] = None) -> subprocess.CompletedProcess:
        full_env = {**os.environ, "STREAMKIT_BROKER": f"embedded://{broker_dir}",
                    "PAGEVIEWS_DB": f"sqlite:///{broker_dir.parent}/pageviews.db",
                    "PYTHONPATH": str(REPO), **(env or {})}
        return subprocess.run([sys.executable, "-m", "streamkit", *args], input=stdin, capture_output=True,
                              text=True, timeout=timeout, cwd=cwd or REPO, env=full_env)
    return run


@pytest.fixture
def spawn(broker_dir: Path) -> Callable[..., subprocess.Popen]:
    """Start ``python -m streamkit ARGS`` in the background (killed at teardown)."""
    procs = []

    def start(*args: str, cwd: Optional[Path] = None) -> subprocess.Popen:
        env = {**os.environ, "STREAMKIT_BROKER": f"embedded://{broker_dir}",
               "PAGEVIEWS_DB": f"sqlite:///{broker_dir.parent}/pageviews.db", "PYTHONPATH": str(REPO)}
        proc = subprocess.Popen([sys.executable, "-m", "streamkit", *args], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, cwd=cwd or REPO, env=env)
        procs.append(proc)
        return proc
    yield start
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=10)


def final_table(cli, topic: str) -> dict:
    """The last value per key in ``topic`` (read from the beginning with the CLI)."""
    out = cli("consume", topic, "--from-beginning", "--timeout", "0.5")
    table = {}
    for line in out.stdout.splitlines():
        record = json.loads(line)
        table[record["key"]] = record["value"]
    return table
