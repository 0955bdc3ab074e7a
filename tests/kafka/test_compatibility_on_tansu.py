"""A Kafka-compatible broker that is not Apache Kafka: the compatibility smoke test.

Kafka-compatible brokers are common in production (Redpanda, WarpStream, Tansu, ...).
The suite's main broker is Apache Kafka itself; this file runs one counting app at
at_least_once on Tansu 0.6.0, which lacks transactions, DeleteRecords and offset-commit
metadata, so what streamkit needs from a broker for at_least_once stays that small.
"""
from __future__ import annotations

from .workers import KafkaApp, assert_nothing_lost, final_counts


def test_a_counting_app_runs_at_least_once_on_tansu(tansu, tmp_path, unique_name) -> None:
    assert not tansu.supports_transactions  # the point of this smoke test: a broker with less
    app = KafkaApp(tansu, tmp_path, unique_name("tansu-smoke"))
    expected = app.produce_events(2000)
    app.run_until_idle("state")
    assert final_counts(app) == expected
    duplicates = assert_nothing_lost(app, expected, range(2000))
    assert duplicates == {app.ids: 0}  # one worker, no crash: nothing is redone
