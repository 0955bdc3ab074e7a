"""/ready says 503 while a worker restores its stores from their changelogs and 200 once
it runs, and /metrics shows the restore's progress: a worker that lost its local state
restores its two stores' changelogs (60,000 users each) before it serves queries again."""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import List, Tuple


from streamkit.broker import EmbeddedBroker
from streamkit.core.partitioner import partition_for_key

from . import http_app
from .test_http_endpoints import get, metric_samples, total, wait_for

USERS = 60_000


def _produce(directory: Path) -> None:
    with EmbeddedBroker(directory) as broker:
        broker.create_topic("clicks", http_app.PARTITIONS, exist_ok=True)
        batches: dict = {}
        for n in range(USERS):
            key = f"u{n}".encode()
            batches.setdefault(partition_for_key(key, http_app.PARTITIONS), []).append((key, b"{}", 1_000, None))
        for partition, records in batches.items():
            broker.append("clicks", partition, records)


def test_ready_is_503_while_restoring_then_200(tmp_path: Path) -> None:
    directory = tmp_path / "broker"
    _produce(directory)
    app = http_app.app
    app.run(broker=f"embedded://{directory}", state_dir=str(tmp_path / "first"), until_idle=0.5)  # the changelogs

    seen: List[Tuple[int, str]] = []
    progress: List[float] = []
    stop = threading.Event()
    runner = threading.Thread(target=lambda: app.run(broker=f"embedded://{directory}",
                                                     state_dir=str(tmp_path / "fresh"), http="127.0.0.1:0"),
                              daemon=True)
    runner.start()
    worker = wait_for(lambda: app._running and app._running[0].endpoint and app._running[0], what="the worker")
    url = worker.endpoint

    def watch() -> None:
        while not stop.is_set():
            status, body, _ = get(url + "/ready")
            seen.append((status, json.loads(body).get("reason", "")))
            time.sleep(0.002)

    def watch_metrics() -> None:
        # On a thread of its own: /metrics is answered off the worker's loop, at any moment of
        # the restore (/ready only between its steps, which a fast restore makes few).
        while not stop.is_set() and not (seen and seen[-1][0] == 200):
            progress.append(total(metric_samples(url), "streamkit_restore_records_remaining"))
            time.sleep(0.002)

    watchers = [threading.Thread(target=watch, daemon=True), threading.Thread(target=watch_metrics, daemon=True)]
    for watcher in watchers:
        watcher.start()
    try:
        wait_for(lambda: seen and seen[-1][0] == 200, 60, "readiness after the restore")
    finally:
        stop.set()
        for watcher in watchers:
            watcher.join(10)
    restoring = [reason for status, reason in seen if status == 503 and reason.startswith("restoring task(s)")]
    assert restoring, f"never saw the restore: {sorted(set(seen))[:10]}; restored {total(metric_samples(url), 'streamkit_restored_records_total')}"
    assert all(status == 503 for status, _ in seen[:seen.index((503, restoring[0]))]), seen[:20]
    assert progress and max(progress) > 0
    after = metric_samples(url)
    # one changelog record per user in each store, and each task's window-store changelog
    # also holds the task's stream time
    assert total(after, "streamkit_restored_records_total") == 2 * USERS + http_app.PARTITIONS
    assert total(after, "streamkit_restore_records_remaining") == 0
    status, body, _ = get(url + "/stores/clicks-per-user/u123")
    assert status == 200 and json.loads(body)["value"] == 1
    app._running[1].call_soon_threadsafe(worker.stop)
    runner.join(30)
