"""The peer benchmark's checks: a figure is printed only for output equal to the true result,
so the checks must reject wrong output. Also the embedded column end to end (small)."""
from __future__ import annotations

import orjson
import pytest

from bench.peers import embedded, main as peers_main, report
from bench.peers.workload import SCENARIOS, make_events, make_pages_table, window_start

EVENTS = make_events(3_000)
TABLE = make_pages_table()


def counts_output(events):
    running, out = {}, []
    for key, _, _ in events:
        running[key] = running.get(key, 0) + 1
        out.append((0, key, orjson.dumps(running[key])))
    return out


def test_events_are_deterministic_and_within_grace():
    assert make_events(500) == make_events(500)
    stamps = [ts for _, _, ts in EVENTS]
    assert max(stamps[i - 1] - stamps[i] for i in range(1, len(stamps))) < 10_000  # inside the 10 s grace
    assert all(orjson.loads(v)["ts"] == ts for _, v, ts in EVENTS)
    assert len({k for k, _, _ in TABLE}) == 10_000


def test_count_check_accepts_the_truth_and_rejects_errors():
    check, expected = SCENARIOS["S2"].check, SCENARIOS["S2"].expect(EVENTS, TABLE)
    output = counts_output(EVENTS)
    check(output, expected, False)
    with pytest.raises(AssertionError, match="one per event"):
        check(output[:-1], expected, False)
    wrong = output[:-1] + [(0, output[-1][1], orjson.dumps(10**6))]
    with pytest.raises(AssertionError, match="final counts differ"):
        check(wrong, expected, False)
    finals = {k: v for _, k, v in output}
    check([(0, k, v) for k, v in finals.items()], expected, True)  # coalesced: finals only
    with pytest.raises(AssertionError):
        check([(0, k, v) for k, v in finals.items()], expected, False)


def test_window_check_rejects_a_wrong_window():
    check, expected = SCENARIOS["S3"].check, SCENARIOS["S3"].expect(EVENTS, TABLE)
    running, output = {}, []
    for key, value, _ in EVENTS:
        start = window_start(orjson.loads(value)["ts"])
        running[key, start] = running.get((key, start), 0) + 1
        output.append((0, key, orjson.dumps({"start": start, "count": running[key, start]})))
    check(output, expected, False)
    key, update = output[-1][1], orjson.loads(output[-1][2])
    shifted = output[:-1] + [(0, key, orjson.dumps({"start": update["start"] + 60_000, "count": update["count"]}))]
    with pytest.raises(AssertionError, match="final window counts differ"):
        check(shifted, expected, False)


def test_record_checks_reject_a_changed_record():
    check, expected = SCENARIOS["S1"].check, SCENARIOS["S1"].expect(EVENTS, TABLE)
    output = [(0, k, v) for (k, v), n in expected.items() for _ in range(n)]
    check(output, expected, False)
    changed = dict(orjson.loads(output[0][2]), cents=-1)
    with pytest.raises(AssertionError, match="differs from the true result"):
        check([(0, output[0][1], orjson.dumps(changed))] + output[1:], expected, False)


@pytest.mark.parametrize("scenario, caching", [("S3", False), ("S4", False), ("S2", True)])
def test_embedded_column_verifies(scenario, caching):
    figures = embedded.run_once(scenario, EVENTS, TABLE, SCENARIOS[scenario].expect(EVENTS, TABLE),
                                caching=caching)
    assert figures["records"] >= len(EVENTS) and figures["events_per_second"] > 0
    assert figures["outputs"] == len(EVENTS) if not caching else figures["outputs"] <= 1_000


def test_only_patterns_select_columns_and_extras():
    only = ["streamkit:S2", "quix:*", "latency:embedded"]
    assert peers_main.selected(only, "streamkit", "S2") and not peers_main.selected(only, "streamkit", "S1")
    assert peers_main.selected(only, "quix", "S4") and not peers_main.selected(only, "faust", "S1")
    assert peers_main.extra_selected(only, "latency") == ["embedded"]
    assert peers_main.extra_selected(only, "restore") == []


def test_floors_are_judged_from_the_figures():
    results = {"S1": {"streamkit": {"events_per_second": 100.0}, "raw": {"events_per_second": 125.0},
                      "faust": {"events_per_second": 5.0}, "embedded": {"events_per_second": 310_000.0}}}
    floors = {f["rule"]: f for f in report.judge_floors(results, {"embedded": {"p99_ms": 25.0}})}
    assert floors["S1: streamkit >= 1.2x the aiokafka loop"]["verdict"] == "FAIL"  # 0.8x
    assert floors["S1: streamkit >= 10x faust-streaming"]["verdict"] == "PASS"
    assert floors["embedded S1 >= 300,000 events/s"]["verdict"] == "PASS"
    assert floors["S2: streamkit >= 10x faust-streaming"]["verdict"] == "not measured"
    assert floors["embedded p99 latency at 10,000 events/s <= 20 ms"]["verdict"] == "FAIL"
