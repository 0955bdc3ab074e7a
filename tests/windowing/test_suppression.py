"""Table.suppress through the TopologyTestDriver (the kinds of cases of Kafka Streams'
SuppressScenarioTest and KTableSuppressProcessorTest).

Every case is a list of steps ``((key, value, timestamp), expected)``: one input record
and the exact records the topology emits right after it, written out by hand, so
"nothing is emitted before the window closes" is checked record by record.

Stream time is the suppression's own (Kafka Streams' rule): any update that reaches it,
of any key, moves it and releases what is due; a record the aggregation drops does not.
Entries due at the same stream time are released in key order (as Kafka's buffer,
ordered by time then key bytes).
"""
from __future__ import annotations

from datetime import timedelta
from typing import Any, Callable, List, Sequence, Tuple

import pytest

import streamkit as sk
from streamkit.errors import SuppressionBufferFullError
from streamkit.testing import TopologyTestDriver

SEC = timedelta(seconds=1)
W = sk.Windowed

TUMBLING = sk.TumblingWindows(size=10 * SEC, grace=2 * SEC)   # [0,10000) closes at 12000, [10000,20000) at 22000

Record = Tuple[Any, Any, int]
Step = Tuple[Record, List[Record]]


def final_results(windows: Any = TUMBLING, op: str = "count", **limits: Any) -> Callable[[sk.StreamsBuilder], None]:
    """in -> group_by_key -> windowed_by -> <op> "agg" -> suppress(until_window_closes) "final" -> out."""
    def build(b: sk.StreamsBuilder) -> None:
        grouped = b.stream("in").group_by_key().windowed_by(windows)
        if op == "count":
            table = grouped.count(name="agg")
        else:
            table = grouped.reduce(lambda agg, v: agg + v, name="agg")
        table.suppress(sk.Suppressed.until_window_closes(**limits), name="final").to_stream().to("out")
    return build


def rate_limited(time_limit: timedelta, windows: Any = None, **limits: Any) -> Callable[[sk.StreamsBuilder], None]:
    """in -> group_by_key -> [windowed_by ->] count "agg" -> suppress(until_time_limit) "limited" -> out."""
    def build(b: sk.StreamsBuilder) -> None:
        grouped = b.stream("in").group_by_key()
        if windows is not None:
            grouped = grouped.windowed_by(windows)
        (grouped.count(name="agg")
         .suppress(sk.Suppressed.until_time_limit(time_limit, **limits), name="limited")
         .to_stream().to("out"))
    return build


def make_driver(build: Callable[[sk.StreamsBuilder], None], **settings: Any) -> TopologyTestDriver:
    app = sk.App("t", **settings)
    app.topology(build)
    return TopologyTestDriver(app)


def read(driver: TopologyTestDriver) -> List[Record]:
    return [(r.key, r.value, r.timestamp) for r in driver.output_topic("out").read_records()]


def run_steps(driver: TopologyTestDriver, steps: Sequence[Step]) -> None:
    source = driver.input_topic("in")
    for index, ((key, value, timestamp), expected) in enumerate(steps):
        source.pipe_input(key, value, timestamp)
        assert read(driver) == expected, f"after step {index}: {key!r}@{timestamp}"


# -- until_window_closes ------------------------------------------------------------------

FINAL_CASES = [
    pytest.param(TUMBLING, [
        (("a", 1, 1000), []),
        (("a", 1, 2000), []),
        (("a", 1, 11999), []),                                   # stream time 11999: [0,10000) still open
        (("b", 1, 12000), [(W("a", 0, 10000), 2, 2000)]),        # another key's record closes it
        (("b", 1, 19999), []),
        (("b", 1, 21999), []),                                   # b's [20000,30000)
        (("c", 1, 22000), [(W("a", 10000, 20000), 1, 11999), (W("b", 10000, 20000), 2, 19999)]),
    ], 0, id="each-window-once-at-end-plus-grace"),
    pytest.param(TUMBLING, [
        (("a", 1, 1000), []),
        (("a", 1, 11000), []),
        (("a", 1, 9000), []),                                    # inside grace: the final count becomes 2
        (("a", 1, 12000), [(W("a", 0, 10000), 2, 9000)]),
        (("a", 1, 5000), []),                                    # late: dropped, nothing re-emitted
        (("a", 1, 9999), []),                                    # late
        (("x", 1, 30000), [(W("a", 10000, 20000), 2, 12000)]),
    ], 2, id="out-of-order-inside-grace-changes-final-value"),
    pytest.param(sk.TumblingWindows(size=10 * SEC, grace=30 * SEC), [
        # Key order is the reverse of due order: results come out by due time.
        (("c", 1, 1000), []),                                    # [0,10000) due 40000
        (("b", 1, 15000), []),                                   # [10000,20000) due 50000
        (("a", 1, 25000), []),                                   # [20000,30000) due 60000
        (("c", 1, 2000), []),
        (("a", 1, 29000), []),
        (("x", 1, 39999), []),
        (("x", 1, 100000), [(W("c", 0, 10000), 2, 2000), (W("b", 10000, 20000), 1, 15000),
                            (W("a", 20000, 30000), 2, 29000), (W("x", 30000, 40000), 1, 39999)]),
    ], 0, id="large-jump-releases-in-due-order"),
    pytest.param(sk.TumblingWindows(size=10 * SEC), [
        # No grace: a window closes when stream time reaches its end.
        (("a", 1, 9999), []),
        (("a", 1, 10000), [(W("a", 0, 10000), 1, 9999)]),
        (("a", 1, 9999), []),                                    # late
        (("a", 1, 19999), []),
        (("a", 1, 20000), [(W("a", 10000, 20000), 2, 19999)]),
    ], 1, id="zero-grace"),
    pytest.param(TUMBLING, [
        # Stream time is the task's: records the aggregation drops still move it.
        (("a", 1, 1000), []),
        ((None, 1, 11000), []),                                  # None key: dropped, stream time 11000
        (("a", None, 12000), [(W("a", 0, 10000), 1, 1000)]),     # None value: ignored, stream time 12000
    ], 0, id="dropped-records-still-move-stream-time"),
    pytest.param(sk.HoppingWindows(size=10 * SEC, advance=5 * SEC), [
        (("a", 1, 3000), []),                                    # [0,10000)
        (("a", 1, 7000), []),                                    # [0,10000), [5000,15000)
        (("a", 1, 10000), [(W("a", 0, 10000), 2, 7000)]),        # [5000,15000), [10000,20000)
        (("a", 1, 15000), [(W("a", 5000, 15000), 2, 10000)]),    # [10000,20000), [15000,25000)
        (("a", 1, 40000), [(W("a", 10000, 20000), 2, 15000), (W("a", 15000, 25000), 1, 15000)]),
    ], 0, id="hopping-windows-each-once"),
]


@pytest.mark.parametrize("windows, steps, late", FINAL_CASES)
def test_until_window_closes(windows: Any, steps: List[Step], late: int) -> None:
    driver = make_driver(final_results(windows))
    run_steps(driver, steps)
    assert driver.metrics()["late_records_dropped"] == late


@pytest.mark.parametrize("caching", [False, True], ids=["caching-off", "caching-on"])
def test_until_window_closes_with_reduce_and_several_keys(caching: bool) -> None:
    driver = make_driver(final_results(op="reduce"), caching=caching)
    run_steps(driver, [
        (("a", 5, 1000), []),
        (("b", 7, 3000), []),
        (("a", 1, 9000), []),
        (("b", 2, 10500), []),
        (("a", 10, 11999), []),
        (("b", 3, 4000), []),                                    # still in grace for [0,10000)
        (("c", 100, 12500), [(W("a", 0, 10000), 6, 9000), (W("b", 0, 10000), 10, 4000)]),
        (("a", 1, 22000), [(W("a", 10000, 20000), 10, 11999), (W("b", 10000, 20000), 2, 10500),
                           (W("c", 10000, 20000), 100, 12500)]),
    ])
    # The suppression buffer is empty but for the open window of the last record.
    assert list(driver.store("final").all()) == [(W("a", 20000, 30000), 1)]


def test_until_window_closes_buffer_holds_the_pending_final_values() -> None:
    driver = make_driver(final_results())
    for key, ts in [("a", 1000), ("a", 2000), ("b", 11000)]:
        driver.input_topic("in").pipe_input(key, 1, ts)
    assert read(driver) == []
    buffer = driver.store("final")
    assert buffer.get(W("a", 0, 10000)) == 2
    assert buffer.get(W("b", 10000, 20000)) == 1
    assert buffer.get(W("b", 0, 10000)) is None
    # The aggregation's own store is up to date all along.
    assert driver.store("agg").get("a", 0) == 2


# -- strict buffer bounds ------------------------------------------------------------------

def test_until_window_closes_fails_when_the_buffer_exceeds_max_records() -> None:
    driver = make_driver(final_results(max_records=2))
    source = driver.input_topic("in")
    source.pipe_input("a", 1, 1000)
    source.pipe_input("b", 1, 2000)
    source.pipe_input("a", 1, 3000)          # same window: still 2 entries
    with pytest.raises(SuppressionBufferFullError) as info:
        source.pipe_input("c", 1, 4000)      # a third open window
    message = str(info.value)
    assert "final" in message and "max_records=2" in message
    assert read(driver) == []                # never an early, non-final result


def test_until_window_closes_fails_when_the_buffer_exceeds_max_bytes() -> None:
    driver = make_driver(final_results(max_bytes=1))
    with pytest.raises(SuppressionBufferFullError) as info:
        driver.input_topic("in").pipe_input("a", 1, 1000)
    assert "final" in str(info.value) and "max_bytes=1" in str(info.value)
    assert read(driver) == []


def test_until_window_closes_bound_counts_after_releasing_what_the_record_closed() -> None:
    # Record "b"@12000 closes a's [0,10000) (due 12000) as it opens b's [10000,20000):
    # once due results are released the buffer holds one window, within max_records=1.
    # Kafka Streams evicts what is due before checking the bound (enforceConstraints).
    driver = make_driver(final_results(max_records=1))
    run_steps(driver, [
        (("a", 1, 1000), []),
        (("a", 1, 2000), []),
        (("b", 1, 12000), [(W("a", 0, 10000), 2, 2000)]),
        (("b", 1, 22000), [(W("b", 10000, 20000), 1, 12000)]),
    ])


# -- until_time_limit on a plain table -------------------------------------------------------

LIMIT_CASES = [
    pytest.param(5 * SEC, {}, [
        (("a", 1, 1000), []),                                    # a due at 6000
        (("a", 1, 2000), []),                                    # a's value changes, not its due time
        (("b", 1, 4000), []),                                    # b due at 9000
        (("a", 1, 6000), [("a", 3, 6000)]),
        (("b", 1, 7000), []),
        (("c", 1, 9000), [("b", 2, 7000)]),                      # c due at 14000
        (("a", 1, 9500), []),                                    # a again: due at 14500
        (("x", 1, 20000), [("c", 1, 9000), ("a", 4, 9500)]),
    ], id="latest-value-per-key-per-limit"),
    pytest.param(5 * SEC, {}, [
        # The due time counts from the first buffered update's own timestamp (as Kafka
        # Streams): an update already a limit behind stream time goes out at once.
        (("a", 1, 10000), []),                                   # due 15000
        (("a", 1, 12000), []),
        (("b", 1, 1000), [("b", 1, 1000)]),                      # due 6000, stream time 12000
        (("c", 1, 14999), []),
        (("c", 1, 15000), [("a", 2, 12000)]),                    # c due at 19999
        (("d", 1, 16999), []),
        (("d", 1, 17000), []),
    ], id="due-from-the-first-update-timestamp"),
    pytest.param(timedelta(0), {}, [
        (("a", 1, 1000), [("a", 1, 1000)]),
        (("a", 1, 1000), [("a", 2, 1000)]),
        (("b", 1, 500), [("b", 1, 500)]),
    ], id="zero-limit-emits-every-update"),
    pytest.param(10 * SEC, {"max_records": 1}, [
        (("a", 1, 1000), []),
        (("a", 1, 2000), []),                                    # same key: one entry
        (("b", 1, 3000), [("a", 2, 2000)]),                      # full: a (due first) goes early
        (("b", 1, 4000), []),
        (("a", 1, 5000), [("b", 2, 4000)]),
        (("x", 1, 30000), [("a", 3, 5000)]),
    ], id="emit-early-on-max-records"),
    pytest.param(10 * SEC, {"max_records": 2}, [
        (("a", 1, 1000), []),                                    # due 11000
        (("b", 1, 2000), []),                                    # due 12000
        (("c", 1, 3000), [("a", 1, 1000)]),                      # due 13000; a evicted early
        (("b", 1, 4000), []),
        (("a", 1, 5000), [("b", 2, 4000)]),                      # a due 15000; b (12000) is oldest
        (("c", 1, 13000), [("c", 2, 13000)]),                    # c due at 13000
        (("x", 1, 15000), [("a", 2, 5000)]),
    ], id="emit-early-oldest-due-first"),
    pytest.param(60 * SEC, {"max_bytes": 1}, [
        (("a", 1, 1000), [("a", 1, 1000)]),                      # any entry exceeds 1 byte
        (("a", 1, 2000), [("a", 2, 2000)]),
        (("b", 1, 3000), [("b", 1, 3000)]),
    ], id="emit-early-on-max-bytes"),
]


@pytest.mark.parametrize("limit, limits, steps", LIMIT_CASES)
def test_until_time_limit_on_a_plain_table(limit: timedelta, limits: dict, steps: List[Step]) -> None:
    driver = make_driver(rate_limited(limit, **limits))
    run_steps(driver, steps)


def _rate_limited_table(time_limit: timedelta) -> Callable[[sk.StreamsBuilder], None]:
    """table "in" "rows" -> suppress(until_time_limit) "limited" -> out."""
    def build(b: sk.StreamsBuilder) -> None:
        b.table("in", name="rows").suppress(sk.Suppressed.until_time_limit(time_limit), name="limited") \
            .to_stream().to("out")
    return build


@pytest.mark.parametrize("steps", [
    pytest.param([
        (("k", "v1", 18000), []),                                # due 20000
        (("k", None, 19000), []),                                # cancels v1: nothing to emit, still due 20000
        (("k", "v2", 28000), [("k", "v2", 28000)]),              # due since 20000: out at once
    ], id="a-value-after-a-cancelled-one-keeps-the-first-due-time"),
    pytest.param([
        (("k", "v1", 18000), []),
        (("k", None, 19000), []),
        (("j", "w", 20000), []),                                 # k due, but its update cancelled out; j due 22000
        (("k", "v2", 21000), []),                                # a new entry: due 23000
        (("j", "w", 23000), [("j", "w", 23000), ("k", "v2", 21000)]),
    ], id="nothing-is-emitted-for-an-update-that-cancelled-out"),
])
def test_until_time_limit_keeps_a_key_due_time_through_an_update_that_cancels_out(steps: List[Step]) -> None:
    """Kafka Streams' rule: a held key's time limit runs from its first held update and is not
    restarted by later ones, a deletion of a value never emitted included; streamkit emits
    nothing for such a deletion (Kafka forwards a tombstone for a key it never emitted)."""
    run_steps(make_driver(_rate_limited_table(2 * SEC)), steps)


# -- until_time_limit on a windowed table ----------------------------------------------------

def test_until_time_limit_on_a_windowed_table_does_not_wait_for_the_window_to_close() -> None:
    driver = make_driver(rate_limited(3 * SEC, windows=TUMBLING))
    run_steps(driver, [
        (("a", 1, 1000), []),                                    # W(a,0) due 4000
        (("a", 1, 2000), []),
        (("a", 1, 4000), [(W("a", 0, 10000), 3, 4000)]),         # long before [0,10000) closes
        (("a", 1, 5000), []),                                    # due 8000
        (("b", 1, 6000), []),                                    # due 9000
        (("a", 1, 12000), [(W("a", 0, 10000), 4, 5000), (W("b", 0, 10000), 1, 6000)]),
        (("a", 1, 3000), []),                                    # late for the aggregation
        (("x", 1, 15000), [(W("a", 10000, 20000), 1, 12000)]),
    ])
    assert driver.metrics()["late_records_dropped"] == 1


def test_until_time_limit_on_a_windowed_table_emits_early_when_full() -> None:
    driver = make_driver(rate_limited(60 * SEC, windows=TUMBLING, max_records=1))
    run_steps(driver, [
        (("a", 1, 1000), []),
        (("a", 1, 2000), []),
        (("a", 1, 10000), [(W("a", 0, 10000), 2, 2000)]),        # a second window: the first goes
        (("b", 1, 11000), [(W("a", 10000, 20000), 1, 10000)]),
    ])


@pytest.mark.parametrize("caching", [False, True], ids=["caching-off", "caching-on"])
def test_until_time_limit_results_do_not_depend_on_caching(caching: bool) -> None:
    driver = make_driver(rate_limited(5 * SEC), caching=caching)
    run_steps(driver, LIMIT_CASES[0].values[2])


@pytest.mark.parametrize("caching", [False, True], ids=["caching-off", "caching-on"])
def test_until_window_closes_results_do_not_depend_on_caching(caching: bool) -> None:
    driver = make_driver(final_results(), caching=caching)
    run_steps(driver, FINAL_CASES[1].values[1])


# -- suppression after a repartition ------------------------------------------------------

def test_until_window_closes_after_group_by() -> None:
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream("in").group_by(lambda k, v: v["page"]).windowed_by(TUMBLING).count(name="agg")
         .suppress(sk.Suppressed.until_window_closes(), name="final").to_stream().to("out"))
    driver = make_driver(build)
    run_steps(driver, [
        (("u1", {"page": "home"}, 1000), []),
        (("u2", {"page": "home"}, 2000), []),
        (("u1", {"page": "about"}, 11000), []),
        (("u3", {"page": "home"}, 3000), []),
        (("u3", {"page": "about"}, 12000), [(W("home", 0, 10000), 3, 3000)]),
        (("u9", {"page": "x"}, 22000), [(W("about", 10000, 20000), 2, 12000)]),
    ])


def _suppressed_sessions(app_id: str, gap_ms: int, grace_ms: int = 0) -> TopologyTestDriver:
    app = sk.App(app_id)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream("in").group_by_key()
          .windowed_by(sk.SessionWindows(inactivity_gap=timedelta(milliseconds=gap_ms),
                                         grace=timedelta(milliseconds=grace_ms)))
          .count(name="sessions").suppress(sk.Suppressed.until_window_closes())
          .to_stream().to("out"))
    return TopologyTestDriver(app)


def test_a_session_is_final_only_once_stream_time_passes_end_plus_gap_plus_grace() -> None:
    """Kafka Streams 4.1, gap 3, grace 0: a@11 then a@13 emits nothing (the session [11,13]
    is still open; [11,11] was never final), and the merged-away [11,11] leaves no tombstone."""
    driver = _suppressed_sessions("session-final-late-enough", gap_ms=3)
    for key, ts in [("a", 11), ("a", 13)]:
        driver.input_topic("in").pipe_input(key, 1, ts)
    assert driver.output_topic("out").read_key_values() == []
    driver.input_topic("in").pipe_input("b", 1, 16)   # [11,13] closes at 13 + 3 + 0 + 1 = 17
    assert driver.output_topic("out").read_key_values() == []
    driver.input_topic("in").pipe_input("b", 1, 17)
    assert driver.output_topic("out").read_records()[0].key == sk.Windowed("a", 11, 13)
    driver.input_topic("in").pipe_input("c", 1, 100)
    assert driver.output_topic("out").read_key_values() == [(sk.Windowed("b", 16, 17), 2)]


@pytest.mark.parametrize("late_key", ["a", "c"])
def test_a_closed_session_stays_final_no_retraction_follows(late_key: str) -> None:
    """gap 5 ms, grace 0: a@0 makes [0,0] (closes at stream time 6); b@6 closes it, so its
    final result goes out; a@4 then starts [4,4] beside it (as Kafka Streams 4.1: a closed
    session is never merged), so no retraction follows the final result. Another key at 4
    is the same case seen from a key without history."""
    driver = _suppressed_sessions("session-final-order", gap_ms=5)
    for key, ts in [("a", 0), ("b", 6), (late_key, 4), ("b", 20)]:
        driver.input_topic("in").pipe_input(key, 1, ts)
    assert driver.output_topic("out").read_key_values() == [
        (sk.Windowed("a", 0, 0), 1), (sk.Windowed(late_key, 4, 4), 1), (sk.Windowed("b", 6, 6), 1)]
