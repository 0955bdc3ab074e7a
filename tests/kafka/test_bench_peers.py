"""The peer benchmark's Kafka runs, small: the raw loop and streamkit on the test broker,
timed by the probe, their output read back and verified (python -m bench runs the same)."""
from __future__ import annotations

import pytest

from bench.peers.runner import VerificationError, run_once
from bench.peers.workload import SCENARIOS, make_events, make_pages_table

EVENTS = make_events(2_000)
TABLE = make_pages_table()


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
