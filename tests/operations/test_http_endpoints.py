"""The worker's HTTP endpoints on the embedded broker, in this process: metrics that
parse with prometheus_client's own parser and move as records flow, health and
readiness, interactive queries on key-value and window stores, and app.query()."""
from __future__ import annotations

import asyncio
import json
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Dict, Iterator, Tuple

import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from streamkit.broker import EmbeddedBroker
from streamkit.core.partitioner import partition_for_key

from . import http_app

USERS = [f"user-{n}" for n in range(12)]


def produce(directory: Path, count: int, start: int = 0) -> None:
    with EmbeddedBroker(directory) as broker:
        broker.create_topic("clicks", http_app.PARTITIONS, exist_ok=True)
        for n in range(start, start + count):
            key = USERS[n % len(USERS)].encode()
            broker.append("clicks", partition_for_key(key, http_app.PARTITIONS),
                          [(key, orjson.dumps({"n": n}), 1_000 + 100 * n, None)])


def get(url: str) -> Tuple[int, Any, Dict[str, str]]:
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            body = answer.read()
            return answer.status, body, dict(answer.headers)
    except urllib.error.HTTPError as error:
        return error.code, error.read(), dict(error.headers)


def wait_for(condition, timeout: float = 20.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.fixture
def running(tmp_path: Path, monkeypatch) -> Iterator[Tuple[Any, str, Path]]:
    """http_app's worker in a thread with HTTP on a free port: (app, its URL, broker dir)."""
    directory = tmp_path / "broker"
    produce(directory, 0)
    app = http_app.app
    errors = []

    def run() -> None:
        try:
            app.run(broker=f"embedded://{directory}", state_dir=str(tmp_path / "state"), http="127.0.0.1:0")
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    worker = wait_for(lambda: app._running and app._running[0].endpoint and app._running[0], what="the worker")
    url = worker.endpoint
    wait_for(lambda: get(url + "/ready")[0] == 200, what="readiness")
    yield app, url, directory
    app._running[1].call_soon_threadsafe(worker.stop)
    thread.join(timeout=30)
    assert not errors, errors


def metric_samples(url: str) -> Dict[Tuple[str, Tuple[Tuple[str, str], ...]], float]:
    status, body, headers = get(url + "/metrics")
    assert status == 200 and headers["Content-Type"].startswith("text/plain")
    samples = {}
    for family in text_string_to_metric_families(body.decode()):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def total(samples: Dict, name: str) -> float:
    return sum(value for (sample, _labels), value in samples.items() if sample == name)


def test_metrics_move_as_records_flow_and_queries_answer(running) -> None:
    app, url, directory = running
    before = metric_samples(url)
    assert total(before, "streamkit_records_processed_total") == 0
    produce(directory, 0)
    assert ("streamkit_tasks", (("app", "ops-clicks"), ("state", "running"))) in before
    assert total(before, "process_resident_memory_bytes") > 0

    produce(directory, 240)
    wait_for(lambda: total(metric_samples(url), "streamkit_records_processed_total") == 240, what="240 records")
    time.sleep(0.3)  # a commit
    after = metric_samples(url)
    tasks = {dict(labels)["task"] for (name, labels) in after if name == "streamkit_records_processed_total"}
    assert tasks == {f"0_{p}" for p in range(http_app.PARTITIONS)}
    assert total(after, "streamkit_commits_total") >= 1
    assert total(after, "streamkit_commit_duration_seconds_count") == total(after, "streamkit_commits_total")
    assert total(after, "streamkit_record_processing_seconds_count") == 240
    assert total(after, "streamkit_record_processing_seconds_sum") > 0
    assert total(after, "streamkit_store_cache_hits_total") + total(after, "streamkit_store_cache_misses_total") > 0

    def lag() -> Dict[str, float]:
        return {dict(labels)["partition"]: v for (name, labels), v in metric_samples(url).items()
                if name == "streamkit_consumer_lag_records"}
    assert sorted(lag()) == [str(p) for p in range(http_app.PARTITIONS)]
    wait_for(lambda: set(lag().values()) == {0.0}, what="lag 0 (refreshed every second)")

    per_user = {user: sum(1 for n in range(240) if USERS[n % len(USERS)] == user) for user in USERS}
    status, body, _ = get(url + "/stores/clicks-per-user/user-3")
    answer = json.loads(body)
    assert status == 200 and answer["value"] == per_user["user-3"] and answer["owner"] == url
    assert answer["task"] == f"0_{partition_for_key(b'user-3', http_app.PARTITIONS)}" and not answer["standby"]
    assert json.loads(get(url + '/stores/clicks-per-user/"user-3"')[1])["value"] == per_user["user-3"]
    assert get(url + "/stores/clicks-per-user/nobody")[0] == 404
    assert get(url + "/stores/no-such-store/x")[0] == 404

    # user-3's clicks are n = 3, 15, 27, ...: at 1_300 + 1_200 k ms; 10 s windows kept for 10 s
    # of stream time (24_900): only [20_000, 30_000) is left, with 20_500 ... 24_100
    status, body, _ = get(url + "/stores/clicks-per-window/user-3?from=20000&to=29999")
    assert status == 200 and json.loads(body)["value"] == [{"start": 20_000, "end": 30_000, "value": 4}]
    assert json.loads(get(url + "/stores/clicks-per-window/user-3")[1])["value"] == \
        [{"start": 20_000, "end": 30_000, "value": 4}]
    assert get(url + "/stores/clicks-per-window/user-3?from=0&to=9999")[0] == 404

    listing = json.loads(get(url + "/stores/clicks-per-user?prefix=user-1&limit=2")[1])
    assert [e["key"] for e in listing["entries"]] == ["user-1", "user-10"] and listing["next"] == "user-10"
    rest = json.loads(get(url + "/stores/clicks-per-user?prefix=user-1&after=user-10")[1])
    assert [e["key"] for e in rest["entries"]] == ["user-11"] and rest["next"] is None

    assert app.query("clicks-per-user", "user-5")["value"] == per_user["user-5"]
    assert app.query("clicks-per-user", "nobody")["value"] is None

    status, body, _ = get(url + "/status")
    status_body = json.loads(body)
    assert status == 200 and status_body["ready"] == "ready"
    assert sum(t["records_processed"] for t in status_body["tasks"]) == 240
    assert "flowchart" in get(url + "/topology.mmd")[1].decode()
    lag_status, lag_body, _ = get(url + "/lag")
    assert lag_status == 200 and json.loads(lag_body)["group"] == "ops-clicks"


def test_health_fails_while_the_processing_loop_hangs_and_comes_back(running) -> None:
    """A commit that never returns (a broker that stopped answering) stops the loop while
    the HTTP server, in the same event loop, still answers: /health says so."""
    app, url, directory = running
    worker, loop, server = app._running
    assert get(url + "/health")[0] == 200
    server.stall_after = 0.5
    release = threading.Event()
    commit = worker._commit

    async def hanging_commit(**options) -> None:
        while not release.is_set():
            await asyncio.sleep(0.05)
        await commit(**options)

    worker._commit = hanging_commit
    try:
        produce(directory, 10)
        status, body, headers = wait_for(lambda: (lambda r: r[0] == 503 and r)(get(url + "/health")),
                                         what="/health 503")
        assert "has not turned" in json.loads(body)["reason"] and headers["Retry-After"] == "1"
        assert get(url + "/ready")[0] == 503
    finally:
        release.set()
    worker._commit = commit
    wait_for(lambda: get(url + "/health")[0] == 200, what="/health 200 again")
    assert get(url + "/ready")[0] == 200
