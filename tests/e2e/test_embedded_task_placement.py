"""Worker processes sharing an app on one embedded directory place its tasks by the rule
the Kafka group leader applies (transport/task_assignment.py): a worker joining gets its
share of the stateful tasks and of the stateless ones (it used to get the highest task
ids: every stateful task, without their state, while the first worker kept the
stateless ones), a worker rejoining gets back the tasks it holds local state for, and
the tasks of a worker that stops (SIGTERM) or dies (kill -9) are shared among the
survivors the same way. Counts stay exact across every hand-over: tasks that move
restore their stores from the changelog.

Each worker has its own ``--state-dir``, as workers on separate machines would: a
moved stateful task finds no local state and restores from its changelog.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path
from typing import Callable, Dict, Iterator, List, Optional, Set

import pytest

from streamkit.broker import EmbeddedBroker
from tests.cli_processes import REPO, final_table

APP = "placement"
PARTITIONS = 4
STATELESS = [f"0_{p}" for p in range(PARTITIONS)]
"""Sub-topology 0 reads the input, filters, and writes the repartition topic: no store."""
STATEFUL = [f"1_{p}" for p in range(PARTITIONS)]
"""Sub-topology 1 counts per page: one store with a changelog."""
TASKS = STATELESS + STATEFUL
PAGES = [f"page-{i}" for i in range(40)]  # every partition of the count gets some
WAIT = 120.0
"""s: generous bound of every wait, each of which ends as soon as its condition holds."""
SETTLED = 2.0
"""s a placement must stay unchanged to count as settled (several membership polls)."""


def _write_app(directory: Path) -> None:
    (directory / "placement_app.py").write_text(textwrap.dedent(f"""
        from datetime import timedelta
        import streamkit as sk

        app = sk.App("{APP}", commit_interval=timedelta(milliseconds=200))
        views = app.topic("views", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json(),
                          partitions={PARTITIONS})

        @app.topology
        def build(b):
            (b.stream(views)
              .filter(lambda key, value: value["n"] % 5 != 0)
              .group_by(lambda key, value: value["page"], key_serde=sk.serdes.String())
              .count(name="per-page")
              .to_stream()
              .to("page-counts"))
    """))


def _views(n: int, start: int) -> List[dict]:
    return [{"user": f"u{i % 13}", "page": PAGES[i % len(PAGES)], "n": i} for i in range(start, start + n)]


def _expected(views: List[dict]) -> Dict[str, int]:
    return dict(Counter(v["page"] for v in views if v["n"] % 5 != 0))


class Workers:
    """Worker processes of the app, each with its own state directory and stderr file."""

    def __init__(self, tmp_path: Path, broker_dir: Path) -> None:
        self._tmp = tmp_path
        self._broker_dir = broker_dir
        self.procs: Dict[str, subprocess.Popen] = {}

    def start(self, name: str) -> subprocess.Popen:
        env = {**os.environ, "STREAMKIT_BROKER": f"embedded://{self._broker_dir}",
               "PYTHONPATH": f"{self._tmp}{os.pathsep}{REPO}"}
        with open(self._tmp / f"{name}.log", "ab") as err:
            proc = subprocess.Popen([sys.executable, "-m", "streamkit", "worker", "placement_app",
                                     "--state-dir", str(self._tmp / f"state-{name}")],
                                    cwd=self._tmp, env=env, stdout=subprocess.DEVNULL, stderr=err)
        self.procs[name] = proc
        return proc

    def log(self, name: str) -> str:
        return (self._tmp / f"{name}.log").read_text()

    def stop(self, name: str, sig: int) -> int:
        proc = self.procs.pop(name)
        proc.send_signal(sig)
        return proc.wait(timeout=WAIT)

    def owned(self) -> Dict[str, Set[str]]:
        """The tasks each running worker holds, by name; tasks nobody holds under ``None``."""
        names = {proc.pid: name for name, proc in self.procs.items()}
        out: Dict[str, Set[str]] = {name: set() for name in self.procs}
        broker = EmbeddedBroker(self._broker_dir)
        try:
            for task in TASKS:
                owner = broker.task_owner(APP, task)
                holder = names.get(owner["pid"]) if owner else None
                out.setdefault(holder or "nobody", set()).add(task)
        finally:
            broker.close()
        return out

    def settled_placement(self) -> Dict[str, Set[str]]:
        """The placement once every task is held by a running worker and it stopped changing."""
        deadline = time.monotonic() + WAIT
        last: Optional[Dict[str, Set[str]]] = None
        since = time.monotonic()
        while time.monotonic() < deadline:
            for name, proc in self.procs.items():
                assert proc.poll() is None, f"worker {name} exited with {proc.returncode}:\n{self.log(name)}"
            placement = self.owned()
            if placement != last:
                last, since = placement, time.monotonic()
            elif "nobody" not in placement and time.monotonic() - since >= SETTLED:
                return placement
            time.sleep(0.2)
        raise AssertionError(f"the placement never settled within {WAIT} s: {last}")

    def kill_all(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.kill()
            proc.wait(timeout=30)
        self.procs.clear()


@pytest.fixture
def workers(tmp_path: Path, broker_dir: Path) -> Iterator[Workers]:
    _write_app(tmp_path)
    running = Workers(tmp_path, broker_dir)
    yield running
    running.kill_all()


def _assert_balanced(placement: Dict[str, Set[str]]) -> None:
    """Each worker runs ⌊n/w⌋ or ⌈n/w⌉ of the stateful tasks, of the stateless ones, of all."""
    for kind in (STATEFUL, STATELESS, TASKS):
        sizes = [len(tasks & set(kind)) for tasks in placement.values()]
        assert max(sizes) - min(sizes) <= 1, f"unbalanced {kind}: {placement}"
    assert sorted(t for tasks in placement.values() for t in tasks) == sorted(TASKS), placement


def _produce_and_wait_for_counts(cli: Callable, views: List[dict], produced: List[dict]) -> None:
    """Produce ``views``, then wait until the counts cover everything produced, exactly."""
    lines = "".join(json.dumps(v) + "\n" for v in views)
    assert cli("produce", "views", "--key-field", "user", stdin=lines).returncode == 0
    produced.extend(views)
    expected = _expected(produced)
    deadline = time.monotonic() + WAIT
    table: dict = {}
    while time.monotonic() < deadline:
        table = final_table(cli, "page-counts")
        if table == expected:
            return
        assert all(table.get(page, 0) <= count for page, count in expected.items()), \
            f"counted more than was produced: {table} vs {expected}"
        time.sleep(0.3)
    raise AssertionError(f"counts {table} never reached {expected}")


def _restored_tasks(log: str) -> Set[str]:
    return {line.split("task ")[1].split()[0] for line in log.splitlines()
            if " restored " in line and "changelog record(s)" in line and " restored 0 " not in line}


def test_a_joiner_gets_its_share_of_stateful_and_stateless_tasks_and_its_warm_ones_back(
        cli, workers: Workers) -> None:
    assert cli("topics", "create", "views", "--partitions", str(PARTITIONS)).returncode == 0
    produced: List[dict] = []
    workers.start("a")
    assert workers.settled_placement() == {"a": set(TASKS)}
    _produce_and_wait_for_counts(cli, _views(400, 0), produced)

    workers.start("b")  # joins late, with no state
    placement = workers.settled_placement()
    _assert_balanced(placement)
    assert len(placement["b"] & set(STATEFUL)) == 2 and len(placement["b"] & set(STATELESS)) == 2, placement
    _produce_and_wait_for_counts(cli, _views(400, 400), produced)
    b_stateful = placement["b"] & set(STATEFUL)
    # the stateful tasks it took had counted before: it rebuilt their stores from the changelogs
    assert _restored_tasks(workers.log("b")) == b_stateful, workers.log("b")

    assert workers.stop("b", signal.SIGTERM) == 0
    assert workers.settled_placement() == {"a": set(TASKS)}
    _produce_and_wait_for_counts(cli, _views(400, 800), produced)

    workers.start("b")  # rejoins: its state directory holds the stores of the tasks it ran
    placement = workers.settled_placement()
    _assert_balanced(placement)
    assert placement["b"] & set(STATEFUL) == b_stateful, (placement, b_stateful)
    _produce_and_wait_for_counts(cli, _views(400, 1200), produced)


def test_the_tasks_of_a_worker_that_stops_or_dies_are_shared_among_the_survivors(
        cli, workers: Workers) -> None:
    assert cli("topics", "create", "views", "--partitions", str(PARTITIONS)).returncode == 0
    produced: List[dict] = []
    for name in ("a", "b", "c"):
        workers.start(name)
    _assert_balanced(workers.settled_placement())
    _produce_and_wait_for_counts(cli, _views(300, 0), produced)

    workers.stop("c", signal.SIGKILL)
    placement = workers.settled_placement()
    _assert_balanced(placement)
    assert set(placement) == {"a", "b"}
    _produce_and_wait_for_counts(cli, _views(300, 300), produced)

    workers.start("c")
    _assert_balanced(workers.settled_placement())
    assert workers.stop("a", signal.SIGTERM) == 0
    placement = workers.settled_placement()
    _assert_balanced(placement)
    assert set(placement) == {"b", "c"}
    _produce_and_wait_for_counts(cli, _views(300, 600), produced)
