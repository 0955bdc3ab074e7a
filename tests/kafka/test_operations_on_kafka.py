"""The worker's HTTP endpoints on Kafka: two workers in one group with a standby replica
each; metrics parse and move, a query asked of one worker for a key the other runs is
forwarded to it (its address travels in the group's assignment), a standby answers when
allowed and says so, and after the owner stops the survivor answers.

Apache Kafka completes a group's first join at once (``group.initial.rebalance.delay.ms=0``
in the suite), so two workers started together often join one after the other. The test
makes that the rule: B starts once A runs every task, and after the rebalance the
assignor must give B a share of the stateful (counting) tasks, not only of all tasks."""
from __future__ import annotations

import signal
import urllib.parse

from prometheus_client.parser import text_string_to_metric_families

from tests.operations.workers_over_http import SERVES, get_json, running_tasks, wait_for

from .workers import KafkaApp, stop

EVENTS = 600
MORE_EVENTS = 300  # produced once both workers run tasks
TASKS = 6  # 3 partitions x 2 sub-topologies: the events' and the counts' (stateful)


def _url(log) -> str:
    def found():
        match = SERVES.search(log.read_text()) if log.exists() else None
        return match.group(1) if match else None
    return wait_for(found, 60, f"the HTTP address in {log.name}")


def _ask(url: str, page: str, *, standby: bool = False):
    query = "?allow_standby=true" if standby else ""
    return get_json(f"{url}/stores/counts/{urllib.parse.quote(page)}{query}")


def _processed(url: str) -> float:
    import urllib.request

    with urllib.request.urlopen(url + "/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == "streamkit_records_processed_total")


def _wait_for_counts(url: str, expected) -> None:
    wait_for(lambda: all(_ask(url, page)[0] == 200 and _ask(url, page)[1]["value"] == count
                         for page, count in expected.items()), 120, f"every count, asked of {url}")


def _both_run_tasks(url_a: str, url_b: str) -> bool:
    """Both workers run active tasks, all of them between them: the group rebalanced
    after the second one joined."""
    a, b = running_tasks(url_a), running_tasks(url_b)
    return bool(a) and bool(b) and len(set(a) | set(b)) == TASKS


def _tails(logs) -> str:
    return "\n".join(f"--- {log.name} (last 4000 chars)\n{log.read_text()[-4000:] if log.exists() else '(none)'}"
                     for log in logs)


def test_queries_are_forwarded_to_the_owner_and_standbys_answer_when_allowed(kafka, tmp_path, unique_name) -> None:
    app = KafkaApp(kafka, tmp_path, unique_name("ops"), standbys=1)
    expected = app.produce_events(EVENTS)
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    workers = [app.worker("--http", "127.0.0.1:0", state="s0", log=logs[0])]
    try:
        url_a = _url(logs[0])
        wait_for(lambda: len(running_tasks(url_a)) == TASKS, 120, f"worker A to run all {TASKS} tasks")
        workers.append(app.worker("--http", "127.0.0.1:0", state="s1", log=logs[1]))
        _check_forwarding_and_standbys(app, expected, workers, logs)
    except Exception as failure:
        failure.add_note(_tails(logs))
        raise
    finally:
        stop(workers)


def _check_forwarding_and_standbys(app: KafkaApp, expected, workers, logs) -> None:
    url_a, url_b = _url(logs[0]), _url(logs[1])
    wait_for(lambda: _both_run_tasks(url_a, url_b), 120, "both workers to run tasks (the group's rebalance)")
    _wait_for_counts(url_a, expected)
    # The counters are per task and restart on the task's new owner (operations/prometheus.py), so
    # what a task processed before the rebalance moved it is on neither worker: only what
    # both count from here on adds up to the records processed (each event: 2 sub-topologies).
    before = {url: _processed(url) for url in (url_a, url_b)}
    for page, count in app.produce_events(MORE_EVENTS, first=EVENTS).items():
        expected[page] = expected.get(page, 0) + count
    _wait_for_counts(url_a, expected)
    moved = {url: _processed(url) - before[url] for url in (url_a, url_b)}
    assert sum(moved.values()) >= 2 * MORE_EVENTS and all(moved.values()), moved  # both run fed tasks
    owners = {page: _ask(url_a, page)[1]["owner"] for page in expected}
    assert set(owners.values()) == {url_a, url_b}, owners
    on_b = next(page for page, owner in owners.items() if owner == url_b)
    status, answer, _ = _ask(url_b, on_b)
    assert status == 200 and answer["owner"] == url_b and answer["standby"] is False

    answers = []
    try:
        wait_for(lambda: answers.append(_ask(url_a, on_b, standby=True)) or answers[-1][1].get("standby") is True
                 and answers[-1][1]["value"] == expected[on_b], 60, "worker A's standby copy of B's task")
    except AssertionError:
        raise AssertionError(f"last answer {answers[-1]}; A's tasks {get_json(url_a + '/status')[1]}") from None
    status, answer, _ = answers[-1]
    assert status == 200 and answer["owner"] == url_a and answer["standby"] is True

    for url in (url_a, url_b):
        assert get_json(url + "/health")[0] == 200
    # sampled every 5 s: the first sample may predate the group's first commit
    lag = wait_for(lambda: (lambda body: body["status"] != "NOTFOUND" and body)(get_json(url_a + "/lag")[1]),
                   30, "the group's lag")
    assert lag["group"] == app.app_id and lag["status"] in ("OK", "WARN", "ERR")
    assert {p["topic"] for p in lag["partitions"]} >= {app.source}

    workers[1].send_signal(signal.SIGTERM)  # B leaves the group: its tasks move to A
    assert workers[1].wait(timeout=90) == 0, logs[1].read_text()[-3000:]
    wait_for(lambda: (lambda r: r[0] == 200 and r[1]["owner"] == url_a and r[1]["standby"] is False)(
        _ask(url_a, on_b)), 90, "worker A to own B's task")
    assert _ask(url_a, on_b)[1]["value"] == expected[on_b]
