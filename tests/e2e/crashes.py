"""Helpers of the kill -9 tests: run an app module's worker (optionally crashing at a named
point or killed after a while) and read what it committed."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import List, Optional, Tuple

from streamkit.broker import EmbeddedBroker

from tests.cli_processes import REPO


def run_worker(workdir: Path, broker_dir: Path, module: str, guarantee: str, crash_at: Optional[str],
               kill_after: Optional[float]) -> Tuple[int, str]:
    """``streamkit worker MODULE --until-idle 1`` in ``workdir``; with ``crash_at`` set
    (STREAMKIT_CRASH_AT) or SIGKILLed after ``kill_after`` seconds. Returns (exit code, stderr)."""
    env = {**os.environ, "PYTHONPATH": f"{workdir}{os.pathsep}{REPO}"}
    env.pop("STREAMKIT_CRASH_AT", None)
    if crash_at:
        env["STREAMKIT_CRASH_AT"] = crash_at
    proc = subprocess.Popen([sys.executable, "-m", "streamkit", "--log-level", "WARNING", "worker", module,
                             "--broker", f"embedded://{broker_dir}", "--guarantee", guarantee,
                             "--until-idle", "1"], cwd=workdir, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if kill_after is not None:
        try:
            proc.wait(timeout=kill_after)
        except subprocess.TimeoutExpired:
            proc.kill()
    _, err = proc.communicate(timeout=180)
    return proc.returncode, err


def committed_records(broker_dir: Path, topic: str, partitions: int) -> List[Tuple[bytes, Optional[bytes]]]:
    """Every committed (key, value) of ``topic``, partition by partition, in offset order."""
    broker = EmbeddedBroker(broker_dir)
    out: List[Tuple[bytes, Optional[bytes]]] = []
    if broker.topic(topic) is not None:
        for partition in range(partitions):
            reader = broker.reader(topic, partition, read_committed=True)
            while True:
                records = reader.read(50_000)
                if not records:
                    break
                out.extend((key, value) for _offset, _ts, key, value, _headers in records)
    broker.close()
    return out
