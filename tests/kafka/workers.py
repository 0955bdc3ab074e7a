"""Run the real ``streamkit`` CLI and workers against a test broker, in subprocesses."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from collections import defaultdict
from pathlib import Path
from typing import Dict, Iterable, List, Optional, Sequence

from .broker import KafkaTestBroker
from .topics import create_app_topics, load_app

REPO = Path(__file__).resolve().parents[2]

COUNTING_APP = textwrap.dedent("""
    import time
    from datetime import timedelta
    import streamkit as sk

    app = sk.App({app_id!r}, caching=False, commit_interval=timedelta(milliseconds=200),
                 num_standby_replicas={standbys}, deserialization_error_handler={handler!r})
    events = app.topic({source!r}, partitions=3)

    def slow(key, value):
        if {delay}:
            time.sleep({delay})

    @app.topology
    def build(b):
        stream = b.stream(events).peek(slow)
        stream.map_values(lambda v: v["n"]).to({ids!r})
        stream.group_by(lambda k, v: v["page"]).count(name="counts").to_stream().to({counts!r})
""")


class KafkaApp:
    """A counting app module written into ``directory``, with its topic names."""

    def __init__(self, broker: KafkaTestBroker, directory: Path, name: str, *, standbys: int = 0,
                 delay: float = 0.0, handler: str = "fail", extra_env: Optional[Dict[str, str]] = None) -> None:
        self.broker = broker
        self.directory = directory
        self.app_id = name
        self.source, self.ids, self.counts = f"{name}-events", f"{name}-ids", f"{name}-counts-out"
        self.module = name.replace("-", "_")
        (directory / f"{self.module}.py").write_text(COUNTING_APP.format(
            app_id=name, standbys=standbys, handler=handler, source=self.source, ids=self.ids,
            counts=self.counts, delay=delay))
        self.extra_env = dict(extra_env or {})

    def env(self, **more: str) -> Dict[str, str]:
        # 6 s sessions: Kafka's minimum by default; on Tansu a rebalance then waits ~3 s for
        # members to rejoin, long enough for a worker to commit its revoked tasks first.
        env = {**os.environ, "PYTHONPATH": f"{self.directory}{os.pathsep}{REPO}",
               "STREAMKIT_BROKER": self.broker.url,
               "STREAMKIT_KAFKA_SESSION_TIMEOUT_MS": "6000",
               "STREAMKIT_KAFKA_HEARTBEAT_INTERVAL_MS": "1000"}
        env.update(self.broker.streamkit_env())
        env.update(self.extra_env)
        env.update(more)
        return env

    def cli(self, *args: str, stdin: Optional[str] = None, timeout: float = 90,
            env: Optional[Dict[str, str]] = None) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "streamkit", *args], input=stdin, capture_output=True,
                              text=True, timeout=timeout, cwd=self.directory, env=env or self.env())

    def worker(self, *args: str, state: str, log: Optional[Path] = None, **env: str) -> subprocess.Popen:
        """Start ``streamkit worker`` for this app (stderr to ``log`` when given)."""
        err = open(log, "w") if log else subprocess.PIPE
        return subprocess.Popen([sys.executable, "-m", "streamkit", "worker", self.module,
                                 "--state-dir", str(self.directory / state), *args],
                                stdout=subprocess.DEVNULL, stderr=err, text=True, cwd=self.directory,
                                env=self.env(**env))

    def run_until_idle(self, state: str, *args: str) -> subprocess.CompletedProcess:
        """Run a worker of this app until its input is drained (``--until-idle 2``); assert it
        exited cleanly."""
        done = self.cli("worker", self.module, *args, "--until-idle", "2", "--state-dir",
                        str(self.directory / state))
        assert done.returncode == 0, done.stderr[-3000:]
        return done

    def create_topics(self) -> Dict[str, int]:
        """Create every topic the app module (as now written) uses, as its worker would, with
        ``retention.ms=-1`` (see tests/kafka/topics.py); existing ones are left alone."""
        return create_app_topics(self.broker, load_app(self.directory / f"{self.module}.py"))

    def produce_events(self, count: int, *, pages: int = 20, first: int = 0) -> Dict[str, int]:
        """Create the app's topics if needed and produce ``count`` events keyed by user;
        return the true count per page."""
        self.create_topics()
        lines, expected = [], defaultdict(int)
        for n in range(first, first + count):
            page = f"p{n % pages}"
            lines.append(json.dumps({"user": f"u{n % 37}", "page": page, "n": n}))
            expected[page] += 1
        done = self.cli("produce", self.source, "--key-field", "user", stdin="\n".join(lines) + "\n")
        assert done.returncode == 0, done.stderr
        return dict(expected)

    def read(self, topic: str) -> Dict[str, List]:
        """Every value of ``topic`` per key, in offset order (read_committed)."""
        out = self.cli("consume", topic, "--from-beginning", "--timeout", "2")
        assert out.returncode == 0, out.stderr
        per_key: Dict[str, List] = defaultdict(list)
        for line in out.stdout.splitlines():
            record = json.loads(line)
            per_key[record["key"]].append(record["value"])
        return dict(per_key)


def assert_nothing_lost(app: KafkaApp, expected: Dict[str, int], produced: Iterable[int]) -> Dict[str, int]:
    """Every input reached the id sink, and every page's count reached its true value
    through every step (1, 2, ... n): at_least_once. Returns the duplicates per topic."""
    ids = [n for values in app.read(app.ids).values() for n in values]
    missing = set(produced) - set(ids)
    assert not missing, f"{len(missing)} input record(s) never reached {app.ids}: {sorted(missing)[:10]}"
    counts = app.read(app.counts)
    for page, total in expected.items():
        seen = set(counts.get(page, ()))
        gaps = set(range(1, total + 1)) - seen
        assert not gaps, f"page {page}: counts {sorted(gaps)[:10]} never emitted"
    return {app.ids: len(ids) - len(set(ids))}


def final_counts(app: KafkaApp) -> Dict[str, int]:
    return {page: values[-1] for page, values in app.read(app.counts).items()}


def stop(procs: Sequence[subprocess.Popen], timeout: float = 60) -> None:
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=timeout)


def wait_for(predicate, timeout: float, what: str) -> None:
    """Poll ``predicate`` every 0.2 s until it holds; fail after ``timeout`` s naming ``what``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")
