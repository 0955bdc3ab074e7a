"""The worker's HTTP server (issue 34), on a real worker (in a thread of this process,
RocksDB stores, the embedded broker) asked by real clients (aiohttp, curl):

- every key a store can hold is addressable in a URL (JSON objects, slashes, spaces,
  percent signs, non-ASCII, quotes), and listings page through such keys;
- user code blocking the worker's event loop does not silence /health and /metrics
  (served from their own thread): /health says 503 and for how long, queries answer
  503 "loop busy" instead of hanging, and all recovers when the code returns;
- a listing page reads O(limit) entries of each task's store, counted on real RocksDB."""
from __future__ import annotations

import asyncio
import functools
import json
import subprocess
import threading
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple
from urllib.parse import quote

import aiohttp
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families

from streamkit.operations.queries import key_text, merged_page, page_cursor, prefix_seeks, url_key
from streamkit.serdes import Json, String
from streamkit.state.rocksdb import RocksDBBytesStore
from streamkit.state.serialized import SerializedKeyValueStore
from streamkit.state.write_buffer import WriteBuffer
from streamkit.broker import EmbeddedBroker
from streamkit.core.partitioner import partition_for_key

from . import blocking_app
from .workers_over_http import wait_for as shared_wait_for

ODD_KEYS: List[Any] = [
    {"page": "a"}, {"page": "a", "tags": ["x", "y"]}, "a/b/c", "/leading", "with space", "ünïcødé ✓",
    "100%", "x%2Fy", "%", '"quoted"', "{not json", "a?b#c&d=e", "", ".", "..", "42", 42, [1, "two"], "+plus+"]


def produce(directory: Path, keyed: List[Tuple[Any, Any]]) -> None:
    with EmbeddedBroker(directory) as broker:
        broker.create_topic("events", blocking_app.PARTITIONS, exist_ok=True)
        for n, (key, value) in enumerate(keyed):
            data = orjson.dumps(key)
            broker.append("events", partition_for_key(data, blocking_app.PARTITIONS),
                          [(data, orjson.dumps(value), 1_000 + n, None)])


def fetch(url: str, *, timeout: float = 30.0) -> Tuple[int, Any, Dict[str, str]]:
    """(status, body: JSON or text, headers) of a GET with aiohttp, the URL sent as written."""
    async def go() -> Tuple[int, Any, Dict[str, str]]:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout)) as session:
            async with session.get(aiohttp.client.URL(url, encoded=True)) as answer:
                text = await answer.text()
                body = json.loads(text) if answer.content_type == "application/json" else text
                return answer.status, body, dict(answer.headers)
    return asyncio.run(go())


wait_for = functools.partial(shared_wait_for, timeout=60.0)


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[Tuple[Any, str, Path]]:
    """blocking_app's worker in a thread, HTTP on a free port: (its server, URL, broker dir)."""
    directory = tmp_path / "broker"
    produce(directory, [])
    blocking_app.RELEASE.clear()
    app, errors = blocking_app.app, []

    def run() -> None:
        try:
            app.run(broker=f"embedded://{directory}", state_dir=str(tmp_path / "state"), http="127.0.0.1:0")
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    running = wait_for(lambda: app._running and app._running[0].endpoint and app._running, what="the worker")
    url = running[0].endpoint
    wait_for(lambda: fetch(url + "/ready")[0] == 200, what="readiness")
    try:
        yield running[2], url, directory
    finally:
        blocking_app.RELEASE.set()
        running[1].call_soon_threadsafe(running[0].stop)
        thread.join(timeout=60)
    assert not errors, errors


def processed(url: str) -> int:
    status, body, _ = fetch(url + "/status")
    return sum(t["records_processed"] for t in body["tasks"]) if status == 200 else -1


def test_every_key_a_store_holds_is_addressable_and_listed(worker) -> None:
    server, url, directory = worker
    keyed = [(key, {"n": n}) for n, key in enumerate(ODD_KEYS) for _ in range(n + 1)]
    produce(directory, keyed)
    wait_for(lambda: processed(url) == len(keyed), what="every record processed")
    serde = Json()
    for n, key in enumerate(ODD_KEYS):
        for form in {key_text(key), url_key(key, serde)}:
            status, body, _ = wait_for(lambda: (lambda r: r[0] != 503 and r)(
                fetch(f"{url}/stores/counts/{quote(form, safe='')}")), what=f"an answer for {key!r}")
            assert status == 200 and body["key"] == key and body["value"] == n + 1, (key, form, body)

    # the issue's own URL, through curl
    answer = subprocess.run(["curl", "-sS", "--max-time", "30", f"{url}/stores/counts/%7B%22page%22%3A%22a%22%7D"],
                            capture_output=True, text=True, check=True)
    assert json.loads(answer.stdout)["value"] == 1, answer.stdout
    assert fetch(f"{url}/stores/counts/{quote(key_text({'page': 'b'}), safe='')}")[0] == 404

    # paging through the whole store with the `next` cursors it hands out: every key once,
    # in the order of the keys' bytes across the three partitions
    seen, after = [], None
    while True:
        query = "limit=4" + ("" if after is None else f"&after={quote(after, safe='')}")
        status, page, _ = fetch(f"{url}/stores/counts?{query}")
        assert status == 200, page
        assert len(page["entries"]) <= 4
        seen += [(entry["key"], entry["value"]) for entry in page["entries"]]
        after = page["next"]
        if after is None:
            break
    assert seen == sorted(((k, n + 1) for n, k in enumerate(ODD_KEYS)), key=lambda kv: orjson.dumps(kv[0]))

    status, page, _ = fetch(f"{url}/stores/counts?prefix={quote('a', safe='')}")
    assert [e["key"] for e in page["entries"]] == ["a/b/c", "a?b#c&d=e"]
    page_prefix = quote('{"page"', safe="")
    status, page, _ = fetch(f"{url}/stores/counts?prefix={page_prefix}&limit=1")
    tagged = {"page": "a", "tags": ["x", "y"]}  # before {"page":"a"}: "," sorts before "}"
    assert [e["key"] for e in page["entries"]] == [tagged] and page["next"] == key_text(tagged)
    status, page, _ = fetch(f"{url}/stores/counts?prefix={page_prefix}&after={quote(page['next'], safe='')}")
    assert [e["key"] for e in page["entries"]] == [{"page": "a"}] and page["next"] is None


def test_a_blocked_event_loop_is_reported_by_health_while_metrics_still_answer(worker) -> None:
    server, url, directory = worker
    server.loop_blocked_after = 1.0
    server.loop_busy_after = 1.0
    produce(directory, [({"page": "home"}, {"n": 1})])
    wait_for(lambda: processed(url) == 1, what="a first record processed")
    assert fetch(url + "/health")[0] == 200

    produce(directory, [({"page": "blocker"}, {"block": True})])
    try:
        assert blocking_app.BLOCKING.wait(60), "the step never blocked"
        status, body, headers = wait_for(lambda: (lambda r: r[0] == 503 and r)(fetch(url + "/health")),
                                         what="/health 503")
        assert "event loop has been blocked for" in body["reason"] and "limit 1 s" in body["reason"], body
        assert headers["Retry-After"] == "1"
        blocked_for = float(body["reason"].split("blocked for ")[1].split(" s")[0])
        assert blocked_for >= 1.0

        status, text, headers = fetch(url + "/metrics")
        assert status == 200 and headers["Content-Type"].startswith("text/plain")
        families = {family.name: family for family in text_string_to_metric_families(text)}
        assert families["streamkit_records_processed"].samples
        heartbeat_age = families["streamkit_event_loop_seconds_since_heartbeat"].samples[0].value
        assert heartbeat_age >= blocked_for - 0.05  # the reason rounds to 0.1 s

        status, body, headers = fetch(f"{url}/stores/counts/{quote(key_text({'page': 'home'}), safe='')}")
        assert status == 503 and "loop busy" in body["error"] and headers["Retry-After"] == "1", body
        status, body, _ = fetch(url + "/ready")
        assert status == 503 and "blocked" in body["reason"], body
        assert blocking_app.BLOCKING.is_set(), "all of the above was answered while the loop was blocked"
        assert fetch(url + "/health")[0] == 503
    finally:
        blocking_app.RELEASE.set()
    wait_for(lambda: fetch(url + "/health")[0] == 200, what="/health 200 once the step returned")
    status, body, _ = fetch(f"{url}/stores/counts/{quote(key_text({'page': 'blocker'}), safe='')}")
    assert status == 200 and body["value"] == 1


class CountingRocksDB(RocksDBBytesStore):
    """A real RocksDB store that counts the entries its range iterators yield."""

    steps = 0

    def range(self, start: Optional[bytes], end: Optional[bytes]) -> Iterator[Tuple[bytes, bytes]]:
        for entry in super().range(start, end):
            self.steps += 1
            yield entry


@pytest.mark.parametrize("serde", [String(), Json()], ids=["String", "Json"])
def test_a_listing_page_reads_its_own_size_from_each_task_store(tmp_path: Path, serde: Any) -> None:
    partitions, keys = 4, [f"user-{n:05d}" for n in range(50_000)]
    counted: List[CountingRocksDB] = []
    stores: Dict[str, SerializedKeyValueStore] = {}
    for partition in range(partitions):
        persistent = CountingRocksDB(str(tmp_path / f"db-{partition}"))
        counted.append(persistent)
        stores[f"0_{partition}"] = SerializedKeyValueStore("counts", WriteBuffer("counts", persistent), serde, Json())
    try:
        for key in keys:
            data = serde.serialize(key)
            stores[f"0_{partition_for_key(data, partitions)}"].put(key, len(key))
        for store in stores.values():
            store.inner.persist(None)
        for persistent in counted:
            persistent.steps = 0

        def page(prefix: Optional[str], after: Optional[str], limit: int) -> List[str]:
            entries = merged_page(stores, "key_value", serde, prefix_seeks(prefix, "key_value", serde),
                                  page_cursor(after, "key_value", serde), limit + 1)
            return [entry.key for entry in entries]

        scans = partitions * len(prefix_seeks("user-", "key_value", serde))
        assert page(None, "user-24999", 20) == keys[25_000:25_021]
        assert sum(p.steps for p in counted) <= 21 + scans  # each scan reads at most one entry ahead
        for persistent in counted:
            persistent.steps = 0
        assert page("user-4999", None, 5) == keys[49_990:49_996]
        assert sum(p.steps for p in counted) <= 6 + scans
        for persistent in counted:
            persistent.steps = 0
        assert page("user-4999", "user-49995", 100) == keys[49_996:]
        assert sum(p.steps for p in counted) <= 4 + 2 * scans  # four keys, and each scan's end
    finally:
        for persistent in counted:
            persistent.close()
