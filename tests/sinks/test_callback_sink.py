"""``sk.sinks.Callback``: a function called per record, in order, at each commit.

Tests drive the sink through the ``TopologyTestDriver`` (a commit after every piped
record or wall-clock advance) or through the writer API the task uses
(``open``/``start``/``write``/``commit``), where a commit can hold several records.
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any, List, Optional

import pytest

import streamkit as sk
from streamkit.errors import ConfigError, SinkError
from streamkit.sinks import Callback, RetryPolicy, SinkRecord, SinkTask
from streamkit.testing import TopologyTestDriver
from streamkit.transport.base import TopicPartition

TP = TopicPartition("in", 0)
FAST_RETRY = RetryPolicy(attempts=3, first_backoff=0.001, max_backoff=0.005)


def rec(key: Any, value: Any, offset: Optional[int], *, timestamp: int = 0) -> SinkRecord:
    return SinkRecord(key, value, timestamp, "in", 0, offset)


def open_writer(sink: Callback, *, sink_name: str = "cb") -> Any:
    writer = sink.open(SinkTask("app", "0_0", sink_name, (TP,)))
    writer.start()
    return writer


class Flaky:
    """Records every call; raises ``errors[value]`` (a list, consumed one per call) for some values."""

    def __init__(self, **errors: List[BaseException]) -> None:
        self.calls: List[Any] = []
        self.errors = errors

    def __call__(self, record: SinkRecord) -> None:
        self.calls.append(record.value)
        pending = self.errors.get(str(record.value))
        if pending:
            raise pending.pop(0)


# -- delivery ------------------------------------------------------------------------------

def test_records_reach_the_function_in_order_with_their_origin() -> None:
    seen: List[SinkRecord] = []
    app = sk.App("cb-app", default_key_serde=sk.serdes.Json())

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream("in").filter(lambda k, v: v["n"] >= 0).map_values(lambda v: v["n"] * 10)
         .sink(Callback(seen.append), name="audit"))

    with TopologyTestDriver(app) as driver:
        topic = driver.input_topic("in")
        topic.pipe_input("a", {"n": 1}, timestamp=100, headers=(("trace", b"t-1"),))
        assert [r.value for r in seen] == [10]            # delivered at the commit after the record
        topic.pipe_input("b", {"n": -1}, timestamp=101)   # filtered out
        topic.pipe_input("c", {"n": 3}, timestamp=99)
        topic.pipe_input("a", {"n": 4}, timestamp=102, headers=(("trace", b"t-4"), ("x", b"")))
    assert seen == [
        SinkRecord("a", 10, 100, "in", 0, 0, (("trace", b"t-1"),)),
        SinkRecord("c", 30, 99, "in", 0, 2, None),
        SinkRecord("a", 40, 102, "in", 0, 3, (("trace", b"t-4"), ("x", b""))),
    ]


def test_the_writer_delivers_buffered_records_in_order_only_at_commit() -> None:
    seen: List[SinkRecord] = []
    writer = open_writer(Callback(seen.append))
    records = [rec("k", i, i) for i in range(3)]
    for record in records:
        writer.write(record)
    assert seen == []
    writer.commit({TP: 3})
    assert seen == records
    writer.commit({TP: 3})                      # nothing new: nothing called again
    assert seen == records
    writer.write(rec("k", 3, 3))
    writer.commit({TP: 4})
    assert [r.value for r in seen] == [0, 1, 2, 3]
    assert writer.skipped == 0                  # a callback keeps no positions: nothing is skipped


def test_discarded_records_are_never_delivered() -> None:
    seen: List[SinkRecord] = []
    writer = open_writer(Callback(seen.append))
    writer.write(rec("k", 1, 0))
    writer.write(rec("k", 2, 1))
    assert writer.discard() == 2
    writer.commit({TP: 2})
    writer.write(rec("k", 3, 2))
    writer.commit({TP: 3})
    assert [r.value for r in seen] == [3]


def test_after_a_failed_commit_is_discarded_the_next_records_are_all_delivered() -> None:
    fn = Flaky(**{"b": [RuntimeError("down")]})
    writer = open_writer(Callback(fn))
    for offset, value in enumerate("abc"):
        writer.write(rec("k", value, offset))
    with pytest.raises(SinkError):
        writer.commit({TP: 3})
    assert writer.discard() == 3        # the task's uncommitted work is abandoned
    writer.write(rec("k", "x", 0))      # reprocessed from the committed offset
    writer.write(rec("k", "y", 1))
    writer.commit({TP: 2})
    assert fn.calls == ["a", "b", "x", "y"]


# -- retries and errors --------------------------------------------------------------------------

def test_transient_error_is_retried_from_the_failing_record() -> None:
    fn = Flaky(**{"1": [sk.TransientSinkError("busy"), sk.TransientSinkError("still busy")]})
    sink = Callback(fn)
    sink.retry = FAST_RETRY
    writer = open_writer(sink)
    for i in range(4):
        writer.write(rec("k", i, i))
    writer.commit({TP: 4})
    # record 0 once, record 1 three times (two failures), then the rest once each
    assert fn.calls == [0, 1, 1, 1, 2, 3]
    writer.write(rec("k", 4, 4))
    writer.commit({TP: 5})
    assert fn.calls == [0, 1, 1, 1, 2, 3, 4]    # the next commit starts with its own records


def test_transient_errors_beyond_the_bound_become_a_sink_error() -> None:
    fn = Flaky(**{"1": [sk.TransientSinkError(f"busy {i}") for i in range(5)]})
    sink = Callback(fn, name="flaky-api")
    sink.retry = FAST_RETRY
    writer = open_writer(sink)
    for i in range(3):
        writer.write(rec("k", i, 10 + i))
    with pytest.raises(SinkError) as failure:
        writer.commit({TP: 13})
    assert fn.calls == [0, 1, 1, 1]             # three attempts at record 1, record 0 not repeated
    message = str(failure.value)
    assert "sink 'cb' (Callback(flaky-api)) of task 0_0" in message
    assert "3 record(s) from in[0] offsets 10..12" in message
    assert "after 3 attempts" in message and "TransientSinkError: busy 2" in message
    assert isinstance(failure.value.__cause__, sk.TransientSinkError)


def test_other_exceptions_are_permanent_sink_errors_at_once() -> None:
    def post_to_api(record: SinkRecord) -> None:
        calls.append(record.value)
        if record.value == "bad":
            raise ValueError("HTTP 400: malformed")

    calls: List[Any] = []
    sink = Callback(post_to_api)
    sink.retry = FAST_RETRY
    writer = open_writer(sink)
    for offset, value in enumerate(["ok", "bad", "later"], start=5):
        writer.write(rec("k", value, offset))
    with pytest.raises(SinkError) as failure:
        writer.commit({TP: 8})
    assert calls == ["ok", "bad"]               # not retried, and nothing after it delivered
    message = str(failure.value)
    assert "Callback(test_other_exceptions_are_permanent_sink_errors_at_once.<locals>.post_to_api)" in message
    assert "3 record(s) from in[0] offsets 5..7" in message
    assert "permanent error" in message and "ValueError: HTTP 400: malformed" in message
    assert isinstance(failure.value.__cause__, ValueError)


def test_a_failing_callback_stops_the_driver_with_the_records_origin() -> None:
    def deliver(record: SinkRecord) -> None:
        if record.value == "boom":
            raise RuntimeError("destination refused")
        delivered.append(record.value)

    delivered: List[Any] = []
    app = sk.App("cb-fail", default_key_serde=sk.serdes.Json())
    app.topology(lambda b: b.stream("in").sink(Callback(deliver, name="webhook"), name="hook"))
    with TopologyTestDriver(app) as driver:
        topic = driver.input_topic("in")
        topic.pipe_input(1, "fine", timestamp=0)
        topic.pipe_input(2, "fine too", timestamp=0)
        with pytest.raises(SinkError, match=r"sink 'hook' \(Callback\(webhook\)\) of task 0_0: delivering "
                                            r"1 record\(s\) from in\[0\] offsets 2\.\.2 failed \(permanent error\): "
                                            r"RuntimeError: destination refused"):
            topic.pipe_input(3, "boom", timestamp=0)
    assert delivered == ["fine", "fine too"]


def test_callback_configuration() -> None:
    with pytest.raises(ConfigError, match="fn must be callable"):
        Callback("not a function")  # type: ignore[arg-type]

    def ship(record: SinkRecord) -> None:
        pass

    assert Callback(ship, name="shipper").describe() == "Callback(shipper)"
    assert Callback(ship).describe() == "Callback(test_callback_configuration.<locals>.ship)"


# -- records not caused by one input record ----------------------------------------------------

def test_wall_clock_punctuation_records_have_no_offset_before_any_input() -> None:
    seen: List[SinkRecord] = []
    app = sk.App("cb-punct", default_key_serde=sk.serdes.Json())

    def init(ctx: sk.ProcessorContext) -> None:
        ctx.schedule(timedelta(seconds=1), sk.Punctuation.WALL_CLOCK, lambda ts: ctx.forward("tick", ts))

    @app.processor(init=init)
    def passthrough(ctx: sk.ProcessorContext, key: Any, value: Any) -> None:
        ctx.forward(key, value)

    app.topology(lambda b: b.stream("in").process(passthrough).sink(Callback(seen.append), name="cb"))
    with TopologyTestDriver(app, initial_wall_clock=0) as driver:
        driver.advance_wall_clock(timedelta(seconds=1))
        assert seen == [SinkRecord("tick", 1000, 1000, None, 0, None, None)]
        driver.input_topic("in").pipe_input("k", "v", timestamp=5, headers=(("h", b"1"),))
        driver.advance_wall_clock(timedelta(seconds=1))
    # after input, a punctuation's records are attributed to the last input record (no headers)
    assert seen[1:] == [SinkRecord("k", "v", 5, "in", 0, 0, (("h", b"1"),)),
                        SinkRecord("tick", 2000, 2000, "in", 0, 0, None)]
