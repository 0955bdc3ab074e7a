"""The Processor API: stores, forwarding, record metadata, punctuations, init."""
from __future__ import annotations

from datetime import timedelta
from typing import Any, List

import pytest

import streamkit as sk
from streamkit.errors import RecordError, StreamkitError, TopologyError

from .conftest import rec


def test_processor_with_a_store_keeps_a_running_total(app_factory, driver_factory) -> None:
    app = app_factory()

    @app.processor(stores=[sk.stores.key_value("totals")])
    def running_total(ctx: sk.ProcessorContext, key: Any, value: Any) -> None:
        totals = ctx.store("totals")
        total = (totals.get(key) or 0) + value
        totals.put(key, total)
        ctx.forward(key, total)

    app.topology(lambda b: b.stream("in").process(running_total).to("out"))
    driver = driver_factory(app)
    driver.input_topic("in").pipe_records([("a", 5, 1), ("b", 1, 2), ("a", 2, 3)])
    assert driver.output_topic("out").read_records() == [rec("a", 5, 1), rec("b", 1, 2), rec("a", 7, 3)]
    assert dict(driver.store("totals").all()) == {"a": 7, "b": 1}
    assert running_total.store_names == ("totals",)
    assert "process: running_total, stores: [totals]" in app.describe()


def test_forward_goes_to_every_child_and_to_a_named_one(app_factory, driver_factory) -> None:
    app = app_factory()

    @app.processor()
    def route(ctx, key, value):
        ctx.forward(key, value)                                   # every child
        if value < 0:
            ctx.forward(key, -value, to="route.to-negatives")     # only this child
        ctx.forward(key, value * 100, timestamp=ctx.timestamp + 1, to="route.to-all")

    def build(b: sk.StreamsBuilder) -> None:
        routed = b.stream("in").process(route, name="route")
        routed.to("all")
        routed.to("negatives")
    app.topology(build)
    driver = driver_factory(app)
    driver.input_topic("in").pipe_records([("a", 1, 10), ("b", -2, 20)])
    assert driver.output_topic("all").read_records() == [
        rec("a", 1, 10), rec("a", 100, 11), rec("b", -2, 20), rec("b", -200, 21)]
    assert driver.output_topic("negatives").read_records() == [rec("a", 1, 10), rec("b", -2, 20),
                                                                rec("b", 2, 20)]


def test_forward_to_an_unknown_child_is_an_error(app_factory, driver_factory) -> None:
    app = app_factory()

    @app.processor()
    def bad(ctx, key, value):
        ctx.forward(key, value, to="nowhere")

    app.topology(lambda b: b.stream("in").process(bad).to("out"))
    driver = driver_factory(app)
    with pytest.raises(RecordError, match="forwarded to 'nowhere', which is not one of its children "
                                          r"\(in.bad.to-out\)"):
        driver.input_topic("in").pipe_input("a", 1, timestamp=0)


def test_processor_may_forward_nothing_or_many(app_factory, driver_factory) -> None:
    app = app_factory()

    @app.processor()
    def repeat(ctx, key, value):
        for i in range(value):
            ctx.forward(f"{key}{i}", i)

    app.topology(lambda b: b.stream("in").process(repeat).to("out"))
    driver = driver_factory(app)
    driver.input_topic("in").pipe_records([("a", 0, 1), ("b", 2, 2)])
    assert driver.output_topic("out").read_records() == [rec("b0", 0, 2), rec("b1", 1, 2)]


def test_context_exposes_record_metadata(app_factory, driver_factory) -> None:
    app = app_factory()
    seen: List[tuple] = []

    @app.processor()
    def inspect_ctx(ctx, key, value):
        seen.append((ctx.topic, ctx.partition, ctx.offset, ctx.timestamp, ctx.headers, ctx.stream_time,
                     ctx.task_id))

    app.topology(lambda b: b.stream("in").process(inspect_ctx))
    driver = driver_factory(app)
    headers = (("h", b"v"),)
    driver.input_topic("in").pipe_input("a", 1, timestamp=50, headers=headers)
    driver.input_topic("in").pipe_input("b", 2, timestamp=30)
    driver.input_topic("in").pipe_input("c", 3, timestamp=70)
    assert seen == [
        ("in", 0, 0, 50, headers, 50, "0_0"),
        ("in", 0, 1, 30, None, 50, "0_0"),       # stream time never goes back
        ("in", 0, 2, 70, None, 70, "0_0"),
    ]


def test_processor_timestamp_follows_the_extractor(app_factory, driver_factory) -> None:
    app = app_factory()
    seen = []

    @app.processor()
    def record_ts(ctx, key, value):
        seen.append(ctx.timestamp)

    app.topology(lambda b: b.stream("in", timestamp=lambda k, v: v["ts"]).process(record_ts))
    driver = driver_factory(app)
    driver.input_topic("in").pipe_input("a", {"ts": 123}, timestamp=1)
    assert seen == [123]


def test_processor_after_a_repartition_sees_the_internal_topic(app_factory, driver_factory) -> None:
    app = app_factory(app_id="rp")
    seen = []

    @app.processor()
    def where(ctx, key, value):
        seen.append((ctx.topic, ctx.offset, key))

    app.topology(lambda b: b.stream("in").select_key(lambda k, v: v).repartition(name="re").process(where))
    driver = driver_factory(app)
    driver.input_topic("in").pipe_records([("x", "a", 1), ("y", "b", 2)])
    [internal] = driver.topology.repartition_topics
    assert internal.startswith("rp-re")
    assert seen == [(internal, 0, "a"), (internal, 1, "b")]


# -- punctuations -------------------------------------------------------------------------

def _punctuating_app(app_factory, kind: sk.Punctuation, interval: timedelta):
    app = app_factory()
    fired: List[tuple] = []

    def init(ctx: sk.ProcessorContext) -> None:
        def on_time(ts: int) -> None:
            fired.append((ts, ctx.timestamp, ctx.topic, ctx.offset))
            ctx.forward("tick", ts)
        ctx.schedule(interval, kind, on_time)

    @app.processor(init=init)
    def passthrough(ctx, key, value):
        ctx.forward(key, value)

    app.topology(lambda b: b.stream("in").process(passthrough).to("out"))
    return app, fired


def test_stream_time_punctuation_fires_as_stream_time_advances(app_factory, driver_factory) -> None:
    app, fired = _punctuating_app(app_factory, sk.Punctuation.STREAM_TIME, timedelta(seconds=1))
    driver = driver_factory(app)
    inp, out = driver.input_topic("in"), driver.output_topic("out")
    driver.advance_wall_clock(timedelta(hours=1))   # wall clock does not drive stream time
    assert fired == []
    inp.pipe_input("a", 1, timestamp=1000)          # first record: fires at once
    assert [f[0] for f in fired] == [1000]
    inp.pipe_input("b", 2, timestamp=1500)          # not due yet
    inp.pipe_input("c", 3, timestamp=900)           # out of order: stream time stays 1500
    assert [f[0] for f in fired] == [1000]
    inp.pipe_input("d", 4, timestamp=2000)          # due
    inp.pipe_input("e", 5, timestamp=5500)          # missed 3000, 4000, 5000: fires once
    assert [f[0] for f in fired] == [1000, 2000, 5500]
    inp.pipe_input("f", 6, timestamp=5999)          # next due at 6000
    inp.pipe_input("g", 7, timestamp=6000)
    assert [f[0] for f in fired] == [1000, 2000, 5500, 6000]
    # inside a punctuation: timestamp is the punctuation time, no current record
    assert fired[0] == (1000, 1000, None, None)
    assert out.read_records() == [
        rec("a", 1, 1000), rec("tick", 1000, 1000), rec("b", 2, 1500), rec("c", 3, 900),
        rec("d", 4, 2000), rec("tick", 2000, 2000), rec("e", 5, 5500), rec("tick", 5500, 5500),
        rec("f", 6, 5999), rec("g", 7, 6000), rec("tick", 6000, 6000)]
    assert driver.metrics()["punctuations"] == 4


def test_wall_clock_punctuation_fires_as_the_driver_clock_advances(app_factory, driver_factory) -> None:
    app, fired = _punctuating_app(app_factory, sk.Punctuation.WALL_CLOCK, timedelta(seconds=10))
    driver = driver_factory(app, initial_wall_clock=1_000)
    driver.input_topic("in").pipe_input("a", 1, timestamp=99_999_999)   # stream time does not drive it
    assert fired == []
    driver.advance_wall_clock(timedelta(seconds=9))
    assert fired == []
    driver.advance_wall_clock(timedelta(seconds=1))                     # 11_000: due
    assert [f[0] for f in fired] == [11_000]
    driver.advance_wall_clock(timedelta(seconds=35))                    # 46_000: missed ones fire once
    assert [f[0] for f in fired] == [11_000, 46_000]
    driver.advance_wall_clock(timedelta(seconds=4))                     # 50_000 is not due (51_000 is)
    assert [f[0] for f in fired] == [11_000, 46_000]
    driver.advance_wall_clock(timedelta(seconds=1))
    assert [f[0] for f in fired] == [11_000, 46_000, 51_000]
    assert driver.output_topic("out").read_records() == [
        rec("a", 1, 99_999_999), rec("tick", 11_000, 11_000), rec("tick", 46_000, 46_000),
        rec("tick", 51_000, 51_000)]
    assert driver.wall_clock == 51_000


def test_wall_clock_cannot_go_backwards(app_factory, driver_factory) -> None:
    app, _ = _punctuating_app(app_factory, sk.Punctuation.WALL_CLOCK, timedelta(seconds=1))
    driver = driver_factory(app)
    with pytest.raises(ValueError, match="cannot go backwards"):
        driver.advance_wall_clock(timedelta(seconds=-1))


def test_schedule_from_process_is_registered_once_and_can_be_cancelled(app_factory, driver_factory) -> None:
    app = app_factory()
    fired = []

    def tick(ts: int) -> None:
        fired.append(ts)

    @app.processor()
    def scheduler(ctx, key, value):
        handle = ctx.schedule(timedelta(milliseconds=10), sk.Punctuation.STREAM_TIME, tick)
        if value == "stop":
            handle.cancel()

    app.topology(lambda b: b.stream("in").process(scheduler))
    driver = driver_factory(app)
    for ts in (0, 5, 10, 25):
        driver.input_topic("in").pipe_input("k", "go", timestamp=ts)
    assert fired == [0, 10, 25]       # one schedule, not one per record
    driver.input_topic("in").pipe_input("k", "stop", timestamp=40)
    driver.input_topic("in").pipe_input("k", "go", timestamp=100)
    assert fired == [0, 10, 25, 100]  # cancelled at 40; scheduling again starts afresh


def test_punctuation_store_access(app_factory, driver_factory) -> None:
    app = app_factory()

    def init(ctx):
        def flush(ts):
            store = ctx.store("buffer")
            for key, value in list(store.all()):
                ctx.forward(key, value)
                store.delete(key)
        ctx.schedule(timedelta(seconds=1), sk.Punctuation.WALL_CLOCK, flush)

    @app.processor(stores=[sk.stores.key_value("buffer")], init=init)
    def buffer(ctx, key, value):
        store = ctx.store("buffer")
        store.put(key, (store.get(key) or 0) + value)

    app.topology(lambda b: b.stream("in").process(buffer).to("out"))
    driver = driver_factory(app)
    driver.input_topic("in").pipe_records([("b", 1, 1), ("a", 2, 2), ("b", 3, 3)])
    assert driver.output_topic("out").read_records() == []
    driver.advance_wall_clock(timedelta(seconds=1))
    assert driver.output_topic("out").read_records() == [rec("a", 2, 1000), rec("b", 4, 1000)]
    assert list(driver.store("buffer").all()) == []


def test_schedule_rejects_bad_arguments(app_factory, driver_factory) -> None:
    app = app_factory()
    errors = []

    def init(ctx):
        for interval, kind in [(timedelta(0), sk.Punctuation.STREAM_TIME), (timedelta(seconds=1), "stream")]:
            try:
                ctx.schedule(interval, kind, lambda ts: None)
            except (TypeError, ValueError) as exc:
                errors.append(str(exc))

    @app.processor(init=init)
    def noop(ctx, key, value):
        pass

    app.topology(lambda b: b.stream("in").process(noop))
    driver_factory(app)
    assert errors == ["schedule(): interval must be at least 1 ms, got datetime.timedelta(0)",
                      "schedule(): punctuation must be sk.Punctuation.STREAM_TIME or WALL_CLOCK, got 'stream'"]


def test_init_runs_once_per_task_before_the_first_record(app_factory, driver_factory) -> None:
    app = app_factory()
    calls = []

    def init(ctx):
        calls.append(("init", ctx.task_id, ctx.topic, ctx.offset))
        ctx.store("seen").put("__init__", 1)

    @app.processor(stores=[sk.stores.key_value("seen")], init=init)
    def mark(ctx, key, value):
        calls.append(("process", key))
        ctx.store("seen").put(key, 1)

    app.topology(lambda b: b.stream("in").process(mark))
    driver = driver_factory(app)
    assert calls == [("init", "0_0", None, None)]
    driver.input_topic("in").pipe_records([("a", 1, 1), ("b", 1, 2)])
    assert calls == [("init", "0_0", None, None), ("process", "a"), ("process", "b")]
    assert [k for k, _ in driver.store("seen").all()] == ["__init__", "a", "b"]


def test_init_failure_names_the_processor(app_factory, driver_factory) -> None:
    app = app_factory()

    def init(ctx):
        raise RuntimeError("boom")

    @app.processor(init=init)
    def proc(ctx, key, value):
        pass

    app.topology(lambda b: b.stream("in").process(proc))
    with pytest.raises(StreamkitError, match="init of processor 'in.proc' failed: RuntimeError: boom"):
        driver_factory(app)


def test_processor_name_and_display_name(app_factory) -> None:
    app = app_factory()

    @app.processor(name="enrich")
    def my_function(ctx, key, value):
        pass

    app.topology(lambda b: b.stream("in").process(my_function).to("out"))
    assert my_function.display_name == "enrich"
    assert "Processor: in.enrich (process: enrich)" in app.describe()


# -- undeclared stores -------------------------------------------------------------------

def test_undeclared_store_is_rejected_at_decoration_time(app_factory) -> None:
    app = app_factory()
    with pytest.raises(TopologyError, match="processor 'sneaky' uses store 'other' but does not declare it: "
                                            r"add sk.stores.key_value\('other'\)"):
        @app.processor(stores=[sk.stores.key_value("mine")])
        def sneaky(ctx, key, value):
            ctx.store("mine").put(key, value)
            ctx.store("other").put(key, value)


def test_undeclared_store_in_init_is_rejected_at_decoration_time(app_factory) -> None:
    app = app_factory()

    def init(ctx):
        ctx.store("hidden")

    with pytest.raises(TopologyError, match="uses store 'hidden' but does not declare it"):
        @app.processor(init=init)
        def proc(ctx, key, value):
            pass


def _dynamic_store_app(app_factory, **settings):
    app = app_factory(**settings)
    name = "oth" + "er"

    @app.processor(stores=[sk.stores.key_value("mine")])
    def dynamic(ctx, key, value):
        ctx.store(name).put(key, value)  # not a literal: only the run-time check sees it

    app.topology(lambda b: b.stream("in").process(dynamic).to("out"))
    return app


def test_undeclared_store_is_rejected_at_run_time(app_factory, driver_factory) -> None:
    driver = driver_factory(_dynamic_store_app(app_factory))
    # A mistake in the app, not in the record: it is raised as is, never handled as a bad record.
    with pytest.raises(TopologyError) as excinfo:
        driver.input_topic("in").pipe_input("a", 1, timestamp=0)
    assert ("processor 'in.dynamic' asked for store 'other' which it did not declare: "
            "add sk.stores.key_value('other')") in str(excinfo.value)
    assert driver.store("mine").get("a") is None


def test_undeclared_store_is_not_skipped_by_log_and_skip(app_factory, driver_factory) -> None:
    driver = driver_factory(_dynamic_store_app(app_factory, processing_error_handler="log_and_skip"))
    with pytest.raises(TopologyError, match="asked for store 'other'"):
        driver.input_topic("in").pipe_input("a", 1, timestamp=0)


def test_process_requires_a_decorated_processor(app_factory) -> None:
    app = app_factory()

    def plain(ctx, key, value):
        pass

    app.topology(lambda b: b.stream("in").process(plain))
    with pytest.raises(TopologyError, match=r"process\(\) takes a function decorated with @app.processor"):
        app.build()


def test_processor_stores_must_be_store_declarations(app_factory) -> None:
    app = app_factory()
    with pytest.raises(TopologyError, match=r"stores= takes sk.stores.key_value\(...\) declarations, got 'totals'"):
        @app.processor(stores=["totals"])
        def proc(ctx, key, value):
            pass


def test_two_processors_may_share_a_store_and_stay_in_one_sub_topology(app_factory, driver_factory) -> None:
    app = app_factory()
    shared = sk.stores.key_value("shared")

    @app.processor(stores=[shared])
    def writer(ctx, key, value):
        ctx.store("shared").put(key, value)

    @app.processor(stores=[shared])
    def reader(ctx, key, value):
        ctx.forward(key, ctx.store("shared").get(value))

    def build(b: sk.StreamsBuilder) -> None:
        b.stream("writes").process(writer)
        b.stream("reads").process(reader).to("out")
    app.topology(build)
    driver = driver_factory(app)
    assert len(driver.topology.sub_topologies) == 1
    driver.input_topic("writes").pipe_input("k1", "v1", timestamp=1)
    driver.input_topic("reads").pipe_input("q", "k1", timestamp=2)
    assert driver.output_topic("out").read_records() == [rec("q", "v1", 2)]


def test_each_use_of_a_processor_keeps_its_own_punctuation(app_factory, driver_factory) -> None:
    app = app_factory()

    def init(ctx):
        ctx.schedule(timedelta(seconds=1), sk.Punctuation.WALL_CLOCK, lambda ts: ctx.forward("tick", ts))

    @app.processor(init=init)
    def ticker(ctx, key, value):
        pass

    def build(b: sk.StreamsBuilder) -> None:
        s = b.stream("in")
        s.process(ticker, name="t1").to("out1")
        s.process(ticker, name="t2").to("out2")
    app.topology(build)
    driver = driver_factory(app)
    driver.advance_wall_clock(timedelta(seconds=1))
    assert driver.output_topic("out1").read_records() == [rec("tick", 1000, 1000)]
    assert driver.output_topic("out2").read_records() == [rec("tick", 1000, 1000)]


def test_initial_wall_clock_may_be_a_datetime(app_factory, driver_factory) -> None:
    from datetime import datetime, timezone
    app, fired = _punctuating_app(app_factory, sk.Punctuation.WALL_CLOCK, timedelta(minutes=1))
    start = datetime(2024, 1, 1, tzinfo=timezone.utc)
    driver = driver_factory(app, initial_wall_clock=start)
    assert driver.wall_clock == 1704067200000
    driver.advance_wall_clock(timedelta(minutes=1))
    assert [f[0] for f in fired] == [1704067260000]
