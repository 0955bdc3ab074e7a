"""Interactive queries across worker processes on the embedded broker: a key whose task
runs on worker B, asked of worker A, is answered by B (owner B); after B is killed and
A takes its task over, A answers with the same value."""
from __future__ import annotations

import json
import signal
import urllib.error
import urllib.request
from collections import Counter
from pathlib import Path
from urllib.parse import quote

import pytest

from .test_http_endpoints import USERS, produce
from .workers_over_http import WorkerLog, get_json, running_tasks, wait_for

APP = "tests.operations.http_app"
CLICKS = 120


def test_a_key_on_another_worker_is_answered_by_it_then_by_the_worker_that_takes_it_over(
        spawn, broker_dir: Path, tmp_path: Path) -> None:
    produce(broker_dir, CLICKS)
    expected = Counter(USERS[n % len(USERS)] for n in range(CLICKS))
    a = WorkerLog(spawn("worker", APP, "--http", "127.0.0.1:0", "--state-dir", str(tmp_path / "a")))
    url_a = a.url()
    wait_for(lambda: get_json(url_a + "/status")[1]["tasks"] and
             sum(t["records_processed"] for t in get_json(url_a + "/status")[1]["tasks"]) == CLICKS,
             what="worker A to process every click")
    b = WorkerLog(spawn("worker", APP, "--http", "127.0.0.1:0", "--state-dir", str(tmp_path / "b")))
    url_b = b.url()
    wait_for(lambda: len(running_tasks(url_a)) == 2 and len(running_tasks(url_b)) == 2, 60,
             "the two workers to share the four tasks")
    on_b = set(running_tasks(url_b))

    owners = {}
    for user in USERS:
        status, answer, _ = wait_for(lambda: (lambda r: r[0] != 503 and r)(
            get_json(f"{url_a}/stores/clicks-per-user/{user}")), 30, f"an answer for {user}")
        assert status == 200 and answer["value"] == expected[user], (user, answer)
        assert answer["owner"] == (url_b if answer["task"] in on_b else url_a), (user, answer)
        owners[user] = answer["owner"]
        status, from_b, _ = get_json(f"{url_b}/stores/clicks-per-user/{user}")
        assert status == 200 and from_b["value"] == expected[user] and from_b["owner"] == answer["owner"]
    assert set(owners.values()) == {url_a, url_b}

    # a listing merges both workers' pages in key order, paged by `next`
    listed, after = [], None
    while True:
        query = "?limit=5" + ("" if after is None else f"&after={quote(after, safe='')}")
        status, page, _ = get_json(f"{url_a}/stores/clicks-per-user{query}")
        assert status == 200, page
        listed += [(entry["key"], entry["value"]) for entry in page["entries"]]
        after = page["next"]
        if after is None:
            break
    assert listed == sorted(expected.items(), key=lambda kv: json.dumps(kv[0]).encode())

    # a query forwarded to a worker that does not run the key's task names the one that does
    user_on_a = next(u for u, owner in owners.items() if owner == url_a)
    request = urllib.request.Request(f"{url_b}/stores/clicks-per-user/{user_on_a}",
                                     headers={"X-Streamkit-Forwarded": url_a})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(request, timeout=10)
    assert refused.value.code == 503 and json.loads(refused.value.read())["owner"] == url_a

    b.proc.send_signal(signal.SIGKILL)
    b.proc.wait(timeout=10)
    wait_for(lambda: len(running_tasks(url_a)) == 4, 60, "worker A to take over B's tasks")
    for user in (u for u, owner in owners.items() if owner == url_b):
        status, answer, _ = wait_for(lambda: (lambda r: r[0] != 503 and r)(
            get_json(f"{url_a}/stores/clicks-per-user/{user}")), 30, f"A's answer for {user}")
        assert status == 200 and answer == {"key": user, "value": expected[user], "task": answer["task"],
                                            "owner": url_a, "standby": False}
