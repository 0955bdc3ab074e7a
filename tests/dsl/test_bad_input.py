"""Bad input goes through the app's error handlers, never lost silently: timestamps a
Kafka record cannot hold, and None keys reaching key-based operations."""
from __future__ import annotations

import logging
import math
from datetime import datetime, timezone
from typing import Any

import pytest

from streamkit.errors import RecordError

from .conftest import rec

OUT_OF_RANGE = [
    (2 ** 63, "beyond the largest record timestamp"),
    (2 ** 64 + 1, "beyond the largest record timestamp"),
    (1e19, "a float timestamp"),
    (1700000000000.0, "a float timestamp"),
    (1.5, "a float timestamp"),
    (math.inf, "non-finite timestamp"),
    (math.nan, "non-finite timestamp"),
    (-1, "negative timestamp"),
    (-0.5e3, "a float timestamp"),
    (True, "must return epoch milliseconds"),
    (datetime(1969, 12, 31, tzinfo=timezone.utc), "negative timestamp"),
]
IDS = ["2^63", "2^64+1", "float-1e19", "whole-float", "fraction-float", "inf", "nan", "negative-int", "negative-float", "bool",
       "datetime-before-1970"]


@pytest.mark.parametrize("bad, message", OUT_OF_RANGE, ids=IDS)
def test_bad_extracted_timestamp_fails_naming_the_record(drive, bad, message) -> None:
    driver = drive(lambda b: b.stream("in", timestamp=lambda k, v: bad if v == "bad" else 10).to("out"))
    driver.input_topic("in").pipe_input("a", "good", timestamp=1)
    with pytest.raises(RecordError, match=message) as excinfo:
        driver.input_topic("in").pipe_input("b", "bad", timestamp=2)
    error = excinfo.value
    assert (error.stage, error.topic, error.partition, error.offset) == ("processing", "in", 0, 1)
    assert repr(bad) in str(error)
    assert driver.output_topic("out").read_records() == [rec("a", "good", 10)]


@pytest.mark.parametrize("bad, message", OUT_OF_RANGE, ids=IDS)
def test_bad_extracted_timestamp_is_dead_lettered(drive, bad, message) -> None:
    driver = drive(lambda b: b.stream("in", timestamp=lambda k, v: bad if v == "bad" else 10).to("out"),
                   app_id="errs", processing_error_handler="dead_letter")
    inp = driver.input_topic("in")
    inp.pipe_input("a", "good", timestamp=1)
    inp.pipe_input("b", "bad", timestamp=2)
    inp.pipe_input("c", "good", timestamp=3)
    assert driver.output_topic("out").read_records() == [rec("a", "good", 10), rec("c", "good", 10)]
    [dead] = driver.output_topic("errs-dlq").read_records()
    headers = dict(dead.headers)
    assert (dead.value, dead.timestamp) == (b'"bad"', 2)
    assert headers["streamkit.error.offset"] == b"1"
    assert message.encode() in headers["streamkit.error.message"]
    assert driver.metrics()["records_dead_lettered"] == 1


def test_largest_record_timestamp_is_accepted(drive) -> None:
    driver = drive(lambda b: b.stream("in", timestamp=lambda k, v: v).to("out"))
    driver.input_topic("in").pipe_input("a", 2 ** 63 - 1, timestamp=1)
    assert driver.output_topic("out").read_records() == [rec("a", 2 ** 63 - 1, 2 ** 63 - 1)]


def _null_key_counts(b: Any) -> None:
    b.stream("in").group_by(lambda k, v: v.get("user")).count(name="counts").to_stream().to("out")


def test_group_by_returning_none_is_dead_lettered_counted_and_logged(drive, caplog) -> None:
    driver = drive(_null_key_counts, app_id="errs", processing_error_handler="dead_letter")
    inp = driver.input_topic("in")
    with caplog.at_level(logging.WARNING, logger="streamkit.errors"):
        inp.pipe_input("a", {"user": "u1"}, timestamp=1)
        inp.pipe_input("b", {"page": "home"}, timestamp=2)  # no user: the group key is None
        inp.pipe_input("c", {"user": "u1"}, timestamp=3)
    assert [(r.key, r.value) for r in driver.output_topic("out").read_records()] == [("u1", 1), ("u1", 2)]
    [dead] = driver.output_topic("errs-dlq").read_records()
    headers = dict(dead.headers)
    assert (dead.key, dead.value, dead.timestamp) == (b"b", b'{"page":"home"}', 2)  # the input record
    assert (headers["streamkit.error.topic"], headers["streamkit.error.offset"]) == (b"in", b"1")
    assert headers["streamkit.error.node"] == b"counts"
    assert b"None key" in headers["streamkit.error.message"]
    assert driver.metrics()["null_key_records_dropped"] == 1
    assert driver.metrics()["records_dead_lettered"] == 1
    [message] = [r.getMessage() for r in caplog.records]
    assert "dead-lettered record to errs-dlq" in message and "in node 'counts'" in message
    assert "partition 0, offset 1" in message


@pytest.mark.parametrize("handler", ["fail", "log_and_skip"])
def test_group_by_returning_none_is_dropped_counted_and_logged(drive, caplog, handler) -> None:
    driver = drive(_null_key_counts, processing_error_handler=handler)
    inp = driver.input_topic("in")
    with caplog.at_level(logging.WARNING, logger="streamkit.errors"):
        inp.pipe_input("b", {"page": "home"}, timestamp=2)
        inp.pipe_input("c", {"user": "u1"}, timestamp=3)
    assert [(r.key, r.value) for r in driver.output_topic("out").read_records()] == [("u1", 1)]
    assert driver.metrics()["null_key_records_dropped"] == 1
    [message] = [r.getMessage() for r in caplog.records]
    assert message.startswith("dropped record with a None key at topic ")
    assert "at topic 'in', partition 0, offset 0 in node 'counts'" in message


def test_none_key_into_a_group_by_key_aggregation_is_dead_lettered(drive) -> None:
    driver = drive(lambda b: b.stream("in").group_by_key().count(name="counts").to_stream().to("out"),
                   app_id="errs", processing_error_handler="dead_letter")
    driver.input_topic("in").pipe_input(None, 1, timestamp=1)
    driver.input_topic("in").pipe_input("a", 2, timestamp=2)
    assert [(r.key, r.value) for r in driver.output_topic("out").read_records()] == [("a", 1)]
    [dead] = driver.output_topic("errs-dlq").read_records()
    assert (dead.key, dict(dead.headers)["streamkit.error.offset"]) == (None, b"0")
    assert driver.metrics()["null_key_records_dropped"] == 1


def test_a_table_update_re_keyed_to_none_is_dead_lettered_once(drive) -> None:
    def build(b: Any) -> None:
        (b.table("in").group_by(lambda k, v: (v.get("group"), v), name="regroup")
         .count(name="counts").to_stream().to("out"))
    driver = drive(build, app_id="errs", processing_error_handler="dead_letter")
    driver.input_topic("in").pipe_input("a", {"x": 1}, timestamp=1)
    driver.input_topic("in").pipe_input("a", {"x": 2}, timestamp=2)  # old and new row both lack a group
    dead = driver.output_topic("errs-dlq").read_records()
    assert [dict(d.headers)["streamkit.error.offset"] for d in dead] == [b"0", b"1"]
    assert driver.metrics()["null_key_records_dropped"] == 3
