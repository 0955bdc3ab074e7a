"""Build-time mistakes fail with fix-it messages; bad records go to the configured handler."""
from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any, Callable, Dict

import pytest

import streamkit as sk
from streamkit.errors import ConfigError, RecordError, StreamkitError, TopologyError, UserFunctionError
from streamkit.serdes import Int, Void

from .conftest import rec

# ======================================================================================
# Build time
# ======================================================================================


def build_error(app_factory, build, **settings) -> str:
    app = app_factory(build, **settings)
    with pytest.raises(TopologyError) as excinfo:
        app.build()
    return str(excinfo.value)


# -- topics -------------------------------------------------------------------------------

@pytest.mark.parametrize("bad", ["bad topic", "a/b", "", ".", "..", "x" * 250, "ümlaut"])
def test_invalid_topic_name_in_stream(app_factory, bad) -> None:
    app = app_factory(lambda b: b.stream(bad).to("out"))
    with pytest.raises(ValueError, match=r"invalid topic name .*: use 1-249 of the characters \[A-Za-z0-9._-\]"):
        app.build()


def test_invalid_topic_name_in_to_and_declaration(app_factory) -> None:
    app = app_factory(lambda b: b.stream("in").to("no spaces please"))
    with pytest.raises(ValueError, match="invalid topic name 'no spaces please'"):
        app.build()
    with pytest.raises(ValueError, match="invalid topic name 'a:b'"):
        app_factory().topic("a:b")


def test_topic_argument_must_be_a_name_or_spec(app_factory) -> None:
    message = build_error(app_factory, lambda b: b.stream(42))
    assert message == "expected a topic name or app.topic(...), got 42"


def test_topic_declared_twice(app_factory) -> None:
    app = app_factory()
    app.topic("views")
    with pytest.raises(TopologyError, match="topic 'views' is declared twice in app 'app'"):
        app.topic("views")


@pytest.mark.parametrize("partitions", [0, -1, 1.5, "3"])
def test_declared_partitions_must_be_positive(app_factory, partitions) -> None:
    with pytest.raises(ValueError, match="partitions must be a positive int"):
        app_factory().topic("views", partitions=partitions)


def test_unknown_input_topic_in_the_driver_lists_the_real_ones(drive) -> None:
    driver = drive(lambda b: b.stream("in").group_by(lambda k, v: v).count(name="c").to_stream().to("out"))
    with pytest.raises(StreamkitError, match=r"topic 'nope' is not read by app 'app' \(it reads: in\)"):
        driver.input_topic("nope")


def test_unknown_output_topic_in_the_driver_lists_the_real_ones(drive) -> None:
    driver = drive(lambda b: b.stream("in").to("out"))
    with pytest.raises(StreamkitError, match=r"topic 'nope' is not written by app 'app' \(its topics: in, out\)"):
        driver.output_topic("nope")


def test_topic_read_twice(app_factory) -> None:
    def build(b: sk.StreamsBuilder) -> None:
        b.stream("orders", name="first").to("a")
        b.stream("orders", name="second").to("b")
    message = build_error(app_factory, build)
    assert message == ("topic 'orders' is read twice (nodes 'first' and 'second'): call b.stream()/b.table() "
                       "once per topic and reuse the returned object")


def test_topic_read_as_stream_and_table(app_factory) -> None:
    def build(b: sk.StreamsBuilder) -> None:
        b.stream("users", name="user-stream").to("a")
        b.table("users").to_stream().to("b")
    assert "topic 'users' is read twice" in build_error(app_factory, build)


def test_topic_read_twice_without_names_says_to_reuse_the_stream(app_factory) -> None:
    def build(b: sk.StreamsBuilder) -> None:
        b.stream("orders").to("a")
        b.stream("orders").to("b")
    assert "read twice" in build_error(app_factory, build)


# -- keyless streams --------------------------------------------------------------------

@pytest.fixture
def keyless_app(app_factory) -> Callable[[Callable], sk.App]:
    def make(build_on_lines: Callable[[sk.Stream], Any]) -> sk.App:
        app = app_factory()
        lines = app.topic("lines", key_serde=Void())
        app.topology(lambda b: build_on_lines(b.stream(lines)))
        return app
    return make


@pytest.mark.parametrize("build_on_lines", [
    lambda s: s.group_by_key().count(),
    lambda s: s.filter(lambda k, v: True).group_by_key().reduce(lambda a, v: a),
    lambda s: s.map_values(str).flat_map_values(list).group_by_key().count(),
    lambda s: s.repartition().group_by_key().count(),
    lambda s: s.merge(s.filter(lambda k, v: True)).group_by_key().count(),
    lambda s: s.split().branch(lambda k, v: True, name="x").default_branch()["x"].group_by_key().count(),
], ids=["direct", "after-filter", "after-map_values", "after-repartition", "merge-of-keyless",
        "after-split"])
def test_stateful_op_on_a_keyless_stream(keyless_app, build_on_lines) -> None:
    with pytest.raises(TopologyError) as excinfo:
        keyless_app(build_on_lines).build()
    message = str(excinfo.value)
    assert "this stream has no key (its topic's key serde is Void)" in message
    assert "use group_by(lambda key, value: ...) or select_key(...) first" in message


@pytest.mark.parametrize("build_on_lines", [
    lambda s: s.group_by(lambda k, v: v).count(name="c").to_stream().to("out"),
    lambda s: s.select_key(lambda k, v: v).group_by_key().count(name="c").to_stream().to("out"),
    lambda s: s.map(lambda k, v: (v, v)).group_by_key().count(name="c").to_stream().to("out"),
    lambda s: s.flat_map(lambda k, v: [(v, v)]).group_by_key().count(name="c").to_stream().to("out"),
], ids=["group_by", "select_key", "map", "flat_map"])
def test_keying_a_keyless_stream_makes_it_groupable(keyless_app, driver_factory, build_on_lines) -> None:
    driver = driver_factory(keyless_app(build_on_lines))
    driver.input_topic("lines").pipe_records([(None, "x", 1), (None, "x", 2)])
    assert driver.output_topic("out").read_records() == [rec("x", 1, 1), rec("x", 2, 2)]


# -- names ------------------------------------------------------------------------------

@pytest.mark.parametrize("build, kinds", [
    (lambda b: b.stream("in").filter(lambda k, v: v, name="x").map_values(str, name="x"), "filter and map_values"),
    (lambda b: b.stream("in").group_by_key().count(name="in"), "source and aggregate"),
    (lambda b: (b.stream("a").to("o", name="sink"), b.stream("b").to("o", name="sink")), "sink and sink"),
], ids=["two-ops", "op-named-like-source", "two-sinks"])
def test_a_name_used_twice(app_factory, build, kinds) -> None:
    message = build_error(app_factory, build)
    assert f"is used twice in app 'app' ({kinds}): give each operation a distinct name=" in message


def test_empty_name_is_rejected(app_factory) -> None:
    assert build_error(app_factory, lambda b: b.stream("in").filter(lambda k, v: v, name="")) == (
        "name= must be a non-empty string, got ''")


def test_same_store_declared_with_different_settings(app_factory) -> None:
    app = app_factory()

    @app.processor(stores=[sk.stores.key_value("s")])
    def one(ctx, key, value):
        pass

    @app.processor(stores=[sk.stores.key_value("s", value_serde=Int())])
    def two(ctx, key, value):
        pass

    app.topology(lambda b: (b.stream("a").process(one), b.stream("b").process(two)))
    with pytest.raises(TopologyError, match="store 's' is declared twice with different settings"):
        app.build()


def test_invalid_store_name() -> None:
    with pytest.raises(ValueError, match="store name 'a b' is invalid"):
        sk.stores.key_value("a b")


# -- functions ----------------------------------------------------------------------------

OPERATIONS: Dict[str, Callable[[sk.Stream, Any], Any]] = {
    "filter": lambda s, f: s.filter(f),
    "filter_not": lambda s, f: s.filter_not(f),
    "map": lambda s, f: s.map(f),
    "map_values": lambda s, f: s.map_values(f),
    "flat_map": lambda s, f: s.flat_map(f),
    "flat_map_values": lambda s, f: s.flat_map_values(f),
    "select_key": lambda s, f: s.select_key(f),
    "peek": lambda s, f: s.peek(f),
    "foreach": lambda s, f: s.foreach(f),
    "group_by": lambda s, f: s.group_by(f),
    "branch": lambda s, f: s.split().branch(f),
    "reduce": lambda s, f: s.group_by_key().reduce(f),
    "table.filter": lambda s, f: s.group_by_key().count().filter(f),
    "table.map_values": lambda s, f: s.group_by_key().count().map_values(f),
    "table.group_by": lambda s, f: s.group_by_key().count().group_by(f),
}
ONE_ARG = {"map_values", "flat_map_values", "table.map_values"}


@pytest.mark.parametrize("operation", OPERATIONS)
def test_non_callable_function(app_factory, operation) -> None:
    message = build_error(app_factory, lambda b: OPERATIONS[operation](b.stream("in"), "not a function"))
    assert "must be callable, got 'not a function'" in message


@pytest.mark.parametrize("operation", OPERATIONS)
def test_wrong_arity_function(app_factory, operation) -> None:
    wrong = (lambda k, v: v) if operation in ONE_ARG else (lambda v: v)
    message = build_error(app_factory, lambda b: OPERATIONS[operation](b.stream("in"), wrong))
    expected = "(value)" if operation in ONE_ARG else "(key, value)"
    if operation == "reduce":
        expected = "(aggregate, value)"
    assert f"must accept {expected}, but its signature is" in message


@pytest.mark.parametrize("fn", [lambda *args: args[-1], lambda k, v, extra=None: v, max],
                         ids=["varargs", "default-arg", "builtin"])
def test_flexible_signatures_are_accepted(drive, fn) -> None:
    driver = drive(lambda b: b.stream("in").filter(fn).to("out"))
    driver.input_topic("in").pipe_input("a", "b", timestamp=0)  # max has no signature: trusted
    assert driver.output_topic("out").read_key_values() == [("a", "b")]


def test_aggregate_function_arities(app_factory) -> None:
    grouped = lambda b: b.stream("in").group_by_key()  # noqa: E731
    assert "initializer must accept ()" in build_error(
        app_factory, lambda b: grouped(b).aggregate(lambda x: 0, lambda k, v, a: a))
    assert "aggregator must accept (key, value, aggregate)" in build_error(
        app_factory, lambda b: grouped(b).aggregate(lambda: 0, lambda v, a: a))
    table_grouped = lambda b: b.table("t").group_by(lambda k, v: (k, v))  # noqa: E731
    assert "subtractor must accept (aggregate, value)" in build_error(
        app_factory, lambda b: table_grouped(b).reduce(lambda a, v: a, lambda a: a))
    assert "adder must accept (key, value, aggregate)" in build_error(
        app_factory, lambda b: table_grouped(b).aggregate(lambda: 0, lambda a, v: a, lambda k, v, a: a))


def test_timestamp_extractor_arity(app_factory) -> None:
    message = build_error(app_factory, lambda b: b.stream("in", timestamp=lambda v: 0))
    assert message.startswith("in: timestamp extractor must accept (key, value)")


def test_serde_arguments_must_be_serdes(app_factory) -> None:
    message = build_error(app_factory, lambda b: b.stream("in").to("out", value_serde="json"))
    assert message == "value_serde must be a serde such as sk.serdes.Json(), got 'json'"


def test_merge_takes_a_stream_of_the_same_topology(app_factory) -> None:
    message = build_error(app_factory, lambda b: b.stream("in").merge("other"))
    assert message.startswith("merge() takes a stream of the same topology")


@pytest.mark.parametrize("partitions", [0, "2"])
def test_repartition_partitions_must_be_positive(app_factory, partitions) -> None:
    message = build_error(app_factory, lambda b: b.stream("in").repartition(partitions=partitions))
    assert "partitions must be a positive int" in message


# -- split ---------------------------------------------------------------------------------

def test_split_branch_name_used_twice(app_factory) -> None:
    message = build_error(app_factory, lambda b: b.stream("in").split().branch(bool, name="x").branch(
        bool, name="x"))
    assert message == "in.split: branch name 'x' is used twice"


def test_split_needs_a_branch(app_factory) -> None:
    assert build_error(app_factory, lambda b: b.stream("in").split().no_default_branch()) == (
        "in.split: split() needs at least one branch")


def test_finished_split_cannot_grow(app_factory) -> None:
    def build(b: sk.StreamsBuilder) -> None:
        splitter = b.stream("in").split().branch(lambda k, v: True)
        splitter.no_default_branch()
        splitter.branch(lambda k, v: False)
    assert "this split is finished; call split() again" in build_error(app_factory, build)


# -- app-level -----------------------------------------------------------------------------

def test_no_topology_function(app_factory) -> None:
    with pytest.raises(TopologyError, match="app 'app' has no topology: decorate a function with @app.topology"):
        sk.testing.TopologyTestDriver(app_factory())


def test_empty_topology(app_factory) -> None:
    message = build_error(app_factory, lambda b: None)
    assert message == ("app 'app' has an empty topology: decorate a function with @app.topology "
                       "and read a topic in it with b.stream(...) or b.table(...)")


def test_topology_decorator_needs_a_function(app_factory) -> None:
    with pytest.raises(TopologyError, match="@app.topology decorates a function"):
        app_factory().topology("nope")


@pytest.mark.parametrize("settings, message", [
    ({"deserialization_error_handler": "ignore"},
     "deserialization_error_handler='ignore' is not a handler: use one of fail, log_and_skip, dead_letter"),
    ({"processing_error_handler": "retry"}, "processing_error_handler='retry' is not a handler"),
    ({"processing_guarantee": "at_most_once"}, "processing_guarantee='at_most_once': use one of"),
    ({"commit_interval": timedelta(0)}, "commit_interval must be a positive timedelta"),
])
def test_invalid_app_settings(settings, message) -> None:
    with pytest.raises(ConfigError, match=message):
        sk.App("app", **settings)


@pytest.mark.parametrize("app_id", ["", "has space", "a/b", "x" * 201])
def test_invalid_app_id(app_id) -> None:
    with pytest.raises(ConfigError, match="app id .* is invalid: use 1-200 of the characters"):
        sk.App(app_id)


def test_several_topology_functions_build_one_topology(app_factory, driver_factory) -> None:
    app = app_factory()
    app.topology(lambda b: b.stream("a").to("out-a"))
    app.topology(lambda b: b.stream("b").to("out-b"))
    driver = driver_factory(app)
    assert len(driver.topology.sub_topologies) == 2
    driver.input_topic("b").pipe_input("k", 1, timestamp=0)
    assert driver.output_topic("out-b").read_key_values() == [("k", 1)]


# ======================================================================================
# Run time: bad records
# ======================================================================================

def _errors_app(app_factory, handler: str, build=None):
    def default_build(b: sk.StreamsBuilder) -> None:
        b.stream("in").map_values(lambda v: 100 // v["n"], name="divide").to("out")
    return app_factory(build or default_build, app_id="errs", deserialization_error_handler=handler,
                       processing_error_handler=handler)


def _pipe_good_bad_good(driver, bad: Callable[[Any], None]) -> None:
    inp = driver.input_topic("in")
    inp.pipe_input("a", {"n": 4}, timestamp=1)
    bad(inp)
    inp.pipe_input("c", {"n": 50}, timestamp=3)


BAD_JSON = lambda inp: inp.pipe_raw(b"k", b"{not json", timestamp=2, headers=(("origin", b"x"),))  # noqa: E731
DIVIDE_BY_ZERO = lambda inp: inp.pipe_input("b", {"n": 0}, timestamp=2)  # noqa: E731


def test_deserialization_error_fail_names_topic_partition_offset(app_factory, driver_factory) -> None:
    driver = driver_factory(_errors_app(app_factory, "fail"))
    with pytest.raises(RecordError) as excinfo:
        _pipe_good_bad_good(driver, BAD_JSON)
    error = excinfo.value
    assert (error.stage, error.topic, error.partition, error.offset, error.node) == (
        "deserialization", "in", 0, 1, None)
    assert isinstance(error.cause, sk.SerializationError)
    assert str(error).startswith("deserialization failed at topic 'in', partition 0, offset 1: "
                                 "SerializationError: Json serde: invalid JSON")
    assert driver.output_topic("out").read_records() == [rec("a", 25, 1)]


def test_deserialization_error_in_the_key(app_factory, driver_factory) -> None:
    app = app_factory(app_id="errs")
    numbers = app.topic("numbers", key_serde=Int())
    app.topology(lambda b: b.stream(numbers).to("out"))
    driver = driver_factory(app)
    with pytest.raises(RecordError, match="offset 0: SerializationError: Int serde expects 8 bytes, got 3"):
        driver.input_topic("numbers").pipe_raw(b"abc", b"1")


def test_deserialization_error_log_and_skip(app_factory, driver_factory, caplog) -> None:
    driver = driver_factory(_errors_app(app_factory, "log_and_skip"))
    with caplog.at_level(logging.WARNING, logger="streamkit.errors"):
        _pipe_good_bad_good(driver, BAD_JSON)
    assert driver.output_topic("out").read_records() == [rec("a", 25, 1), rec("c", 2, 3)]
    assert driver.metrics()["records_skipped"] == 1
    assert driver.metrics()["records_dead_lettered"] == 0
    [message] = [r.getMessage() for r in caplog.records]
    assert message.startswith("skipped record: deserialization failed at topic 'in', partition 0, offset 1: "
                              "SerializationError: Json serde: invalid JSON")
    assert message.endswith("b'{not json'")


def test_deserialization_error_dead_letter(app_factory, driver_factory) -> None:
    driver = driver_factory(_errors_app(app_factory, "dead_letter"))
    _pipe_good_bad_good(driver, BAD_JSON)
    assert driver.output_topic("out").read_records() == [rec("a", 25, 1), rec("c", 2, 3)]
    assert driver.metrics()["records_dead_lettered"] == 1
    assert driver.metrics()["records_skipped"] == 0
    [dead] = driver.output_topic("errs-dlq").read_records()
    assert (dead.key, dead.value, dead.timestamp) == (b"k", b"{not json", 2)  # the raw bytes
    headers = dict(dead.headers)
    assert headers["origin"] == b"x"  # the record's own headers are kept
    assert headers["streamkit.error.stage"] == b"deserialization"
    assert headers["streamkit.error.topic"] == b"in"
    assert headers["streamkit.error.partition"] == b"0"
    assert headers["streamkit.error.offset"] == b"1"
    assert headers["streamkit.error.class"] == b"SerializationError"
    assert headers["streamkit.error.message"].startswith(b"Json serde: invalid JSON")
    assert b"SerializationError" in headers["streamkit.error.trace"]


def test_processing_error_fail_names_the_node(app_factory, driver_factory) -> None:
    driver = driver_factory(_errors_app(app_factory, "fail"))
    with pytest.raises(RecordError) as excinfo:
        _pipe_good_bad_good(driver, DIVIDE_BY_ZERO)
    error = excinfo.value
    assert (error.stage, error.topic, error.partition, error.offset, error.node) == (
        "processing", "in", 0, 1, "divide")
    assert isinstance(error.cause, ZeroDivisionError)
    assert str(error) == ("processing failed at topic 'in', partition 0, offset 1 in node 'divide': "
                          "ZeroDivisionError: integer division or modulo by zero")
    assert isinstance(error.__cause__, ZeroDivisionError)


def test_processing_error_log_and_skip(app_factory, driver_factory, caplog) -> None:
    driver = driver_factory(_errors_app(app_factory, "log_and_skip"))
    with caplog.at_level(logging.WARNING, logger="streamkit.errors"):
        _pipe_good_bad_good(driver, DIVIDE_BY_ZERO)
    assert driver.output_topic("out").read_records() == [rec("a", 25, 1), rec("c", 2, 3)]
    assert driver.metrics()["records_skipped"] == 1
    assert "in node 'divide': ZeroDivisionError" in caplog.text


def test_processing_error_dead_letter(app_factory, driver_factory) -> None:
    driver = driver_factory(_errors_app(app_factory, "dead_letter"))
    _pipe_good_bad_good(driver, DIVIDE_BY_ZERO)
    assert driver.output_topic("out").read_records() == [rec("a", 25, 1), rec("c", 2, 3)]
    assert driver.metrics()["records_dead_lettered"] == 1
    [dead] = driver.output_topic("errs-dlq").read_records()
    assert (dead.key, dead.value, dead.timestamp) == (b"b", b'{"n":0}', 2)
    headers = dict(dead.headers)
    assert {name: headers[name] for name in [
        "streamkit.error.stage", "streamkit.error.topic", "streamkit.error.partition",
        "streamkit.error.offset", "streamkit.error.node", "streamkit.error.class",
        "streamkit.error.message"]} == {
        "streamkit.error.stage": b"processing", "streamkit.error.topic": b"in",
        "streamkit.error.partition": b"0", "streamkit.error.offset": b"1",
        "streamkit.error.node": b"divide", "streamkit.error.class": b"ZeroDivisionError",
        "streamkit.error.message": b"integer division or modulo by zero"}


def test_handlers_are_independent(app_factory, driver_factory) -> None:
    app = app_factory(lambda b: b.stream("in").map_values(lambda v: 1 // v).to("out"), app_id="errs",
                      deserialization_error_handler="log_and_skip", processing_error_handler="dead_letter")
    driver = driver_factory(app)
    driver.input_topic("in").pipe_raw(b"k", b"{bad")
    driver.input_topic("in").pipe_input("k", 0, timestamp=0)
    assert driver.metrics()["records_skipped"] == 1
    assert driver.metrics()["records_dead_lettered"] == 1
    assert driver.output_topic("errs-dlq").read_values() == [b"0"]


def test_processing_error_after_a_repartition_names_the_internal_topic(app_factory, driver_factory) -> None:
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream("in").group_by(lambda k, v: v["g"])
         .aggregate(lambda: 0, lambda k, v, agg: agg + 1 // v["n"], name="agg").to_stream().to("out"))
    driver = driver_factory(_errors_app(app_factory, "dead_letter", build))
    driver.input_topic("in").pipe_input("a", {"g": "x", "n": 0}, timestamp=5)
    [dead] = driver.output_topic("errs-dlq").read_records()
    headers = dict(dead.headers)
    assert headers["streamkit.error.topic"] == b"errs-agg-repartition"
    assert headers["streamkit.error.node"] == b"agg"
    assert (dead.key, dead.value) == (b'"x"', b'{"g":"x","n":0}')


ERRORING_OPERATIONS = {
    "filter": lambda s, boom: s.filter(lambda k, v: boom(), name="node"),
    "map": lambda s, boom: s.map(lambda k, v: boom(), name="node"),
    "map-not-a-pair": lambda s, boom: s.map(lambda k, v: 5, name="node"),
    "flat_map": lambda s, boom: s.flat_map(lambda k, v: boom(), name="node"),
    "flat_map-not-pairs": lambda s, boom: s.flat_map(lambda k, v: [1], name="node"),
    "flat_map_values": lambda s, boom: s.flat_map_values(lambda v: boom(), name="node"),
    "select_key": lambda s, boom: s.select_key(lambda k, v: boom(), name="node"),
    "peek": lambda s, boom: s.peek(lambda k, v: boom(), name="node"),
    "foreach": lambda s, boom: s.foreach(lambda k, v: boom(), name="node"),
    "split": lambda s, boom: s.split(name="node").branch(lambda k, v: boom()).default_branch(),
    "reduce": lambda s, boom: s.peek(lambda k, v: None).group_by_key().reduce(lambda a, v: boom(), name="node"),
    "aggregate": lambda s, boom: s.group_by_key().aggregate(lambda: boom(), lambda k, v, a: a, name="node"),
    "table.filter": lambda s, boom: s.group_by_key().count(name="c").filter(lambda k, v: boom(), name="node"),
    "table.map_values": lambda s, boom: s.group_by_key().count(name="c").map_values(lambda v: boom(), name="node"),
}


@pytest.mark.parametrize("operation", ERRORING_OPERATIONS)
def test_user_function_errors_name_the_node(app_factory, driver_factory, operation) -> None:
    def boom() -> Any:
        raise RuntimeError("user code failed")
    app = app_factory(lambda b: ERRORING_OPERATIONS[operation](b.stream("in"), boom))
    driver = driver_factory(app)
    inp = driver.input_topic("in")
    if operation == "reduce":
        inp.pipe_input("a", 1, timestamp=0)  # the reducer only runs from the second value
    with pytest.raises(RecordError) as excinfo:
        inp.pipe_input("a", 1, timestamp=0)
    assert excinfo.value.node == "node"
    assert "in node 'node'" in str(excinfo.value)


def test_punctuation_errors_name_the_processor(app_factory, driver_factory) -> None:
    app = app_factory()

    def init(ctx):
        ctx.schedule(timedelta(seconds=1), sk.Punctuation.WALL_CLOCK, lambda ts: 1 // 0)

    @app.processor(init=init)
    def ticker(ctx, key, value):
        pass

    app.topology(lambda b: b.stream("in").process(ticker))
    driver = driver_factory(app)
    with pytest.raises(UserFunctionError, match="ZeroDivisionError in node 'in.ticker'") as excinfo:
        driver.advance_wall_clock(timedelta(seconds=1))
    assert excinfo.value.node == "in.ticker"


def test_processor_exceptions_name_the_processor(app_factory, driver_factory) -> None:
    app = app_factory(processing_error_handler="dead_letter")

    @app.processor()
    def fragile(ctx, key, value):
        raise KeyError(value)

    app.topology(lambda b: b.stream("in").process(fragile).to("out"))
    driver = driver_factory(app)
    driver.input_topic("in").pipe_input("a", "missing", timestamp=0)
    [dead] = driver.output_topic("app-dlq").read_records()
    assert dict(dead.headers)["streamkit.error.node"] == b"in.fragile"
    assert dict(dead.headers)["streamkit.error.class"] == b"KeyError"


@pytest.mark.parametrize("handler", ["log_and_skip", "dead_letter"])
def test_stream_time_punctuation_errors_are_not_record_errors(app_factory, driver_factory, handler) -> None:
    app = app_factory(app_id="pe", processing_error_handler=handler)

    def init(ctx):
        ctx.schedule(timedelta(seconds=1), sk.Punctuation.STREAM_TIME, lambda ts: 1 // 0)

    @app.processor(init=init)
    def ticker(ctx, key, value):
        ctx.forward(key, value)

    app.topology(lambda b: b.stream("in").process(ticker).to("out"))
    driver = driver_factory(app)
    raised = None
    try:
        driver.input_topic("in").pipe_input("a", 1, timestamp=5)
    except UserFunctionError as exc:
        raised = exc
    assert driver.output_topic("out").read_records() == [rec("a", 1, 5)]  # the record itself was fine
    assert driver.metrics()["records_skipped"] == 0, "a processed record was reported as skipped"
    assert driver.output_topic("pe-dlq").read_records() == [], "a processed record was dead-lettered"
    assert raised is not None and raised.node == "in.ticker"
