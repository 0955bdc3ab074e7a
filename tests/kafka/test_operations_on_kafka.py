"""The worker's HTTP endpoints on Kafka (Tansu): two workers in one group with a standby
replica each; metrics parse and move, a query asked of one worker for a key the other
runs is forwarded to it (its address travels in the group's assignment), a standby
answers when allowed and says so, and after the owner stops the survivor answers."""
from __future__ import annotations

import signal
import urllib.parse

from prometheus_client.parser import text_string_to_metric_families

from tests.operations.workers_over_http import SERVES, get_json, wait_for

from .workers import KafkaApp, stop

EVENTS = 600


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


def test_queries_are_forwarded_to_the_owner_and_standbys_answer_when_allowed(kafka, tmp_path, unique_name) -> None:
    app = KafkaApp(kafka, tmp_path, unique_name("ops"), standbys=1)
    expected = app.produce_events(EVENTS)
    logs = [tmp_path / "a.log", tmp_path / "b.log"]
    workers = [app.worker("--http", "127.0.0.1:0", state=f"s{i}", log=logs[i]) for i in range(2)]
    try:
        url_a, url_b = _url(logs[0]), _url(logs[1])
        wait_for(lambda: all(_ask(url_a, page)[0] == 200 and _ask(url_a, page)[1]["value"] == count
                             for page, count in expected.items()), 120, "every count, asked of worker A")
        assert _processed(url_a) + _processed(url_b) >= 2 * EVENTS  # each event: 2 sub-topologies
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
    finally:
        stop(workers)
