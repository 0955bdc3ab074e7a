"""The peer benchmark's Kafka runs, small: the raw loop and streamkit on the test broker,
timed by the probe, their output read back and verified (python -m bench runs the same).

The workload stamps its events in 2023 (bench/peers/workload.py START_MS) and the runner
creates its topics with the broker's defaults; on Apache Kafka (7-day retention) a retention
check during a run would delete them. The tests move the events (the record timestamp and the
value's "ts") and the table to two days ago, on a whole minute: the same windows, recent times.
"""
from __future__ import annotations

import time
from typing import List

import orjson
import pytest

from bench.peers.runner import VerificationError, run_once
from bench.peers.workload import SCENARIOS, START_MS, WINDOW_MS, Event, make_events, make_pages_table

SHIFT = ((int(time.time() * 1000) - 2 * 86_400_000) - START_MS) // WINDOW_MS * WINDOW_MS


def recent(events: List[Event], *, in_value: bool) -> List[Event]:
    moved = []
    for key, value, ts in events:
        if in_value:
            decoded = orjson.loads(value)
            decoded["ts"] += SHIFT
            value = orjson.dumps(decoded)
        moved.append((key, value, ts + SHIFT))
    return moved


EVENTS = recent(make_events(2_000), in_value=True)
TABLE = recent(make_pages_table(), in_value=False)


def test_the_workload_is_recent_and_unchanged_but_for_time() -> None:
    old = make_events(2_000)
    assert all(ts >= int(time.time() * 1000) - 3 * 86_400_000 for _, _, ts in EVENTS + TABLE)
    assert [(k, {**orjson.loads(v), "ts": 0}) for k, v, _ in EVENTS] == \
        [(k, {**orjson.loads(v), "ts": 0}) for k, v, _ in old]
    assert all(orjson.loads(v)["ts"] == ts for _, v, ts in EVENTS)
    assert SHIFT % WINDOW_MS == 0


@pytest.mark.parametrize("framework, scenario, caching", [
    ("raw", "S4", False), ("streamkit", "S3", False), ("streamkit", "S2", True),
    # A join's stream side waits until the table side's fetch position reaches its end offset
    # (KafkaGroupConsumer.has_unread): without it, events raced ahead of the table here.
    ("streamkit", "S4", False)])
def test_a_kafka_run_is_timed_and_verified(kafka, framework, scenario, caching):
    figures = run_once(framework, scenario, kafka.bootstrap, EVENTS, TABLE,
                       SCENARIOS[scenario].expect(EVENTS, TABLE), caching=caching)
    assert figures["records"] == len(EVENTS)
    assert 0 < figures["seconds"] < 60 and figures["peak_rss_mib"] > 0
    assert figures["outputs"] == len(EVENTS) if not caching else 0 < figures["outputs"] <= 1_000


def test_a_wrong_output_is_not_reported(kafka):
    expected = SCENARIOS["S1"].expect(EVENTS, TABLE)  # S0 copies every event: more than S1 keeps
    with pytest.raises(VerificationError, match="S0: wrote 2,000 records"):
        run_once("raw", "S0", kafka.bootstrap, EVENTS, TABLE, expected)
