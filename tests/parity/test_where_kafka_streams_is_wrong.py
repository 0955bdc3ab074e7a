"""Where Kafka Streams 4.1 gives a wrong answer and streamkit deliberately does not (see
docs/differences-from-kafka-streams.md). Each case is the minimal input Kafka's own
TopologyTestDriver got wrong, with streamkit's full expected output."""
from __future__ import annotations

from datetime import timedelta
from typing import Any, List, Tuple

import streamkit as sk
from streamkit.testing import TopologyTestDriver

MS = timedelta(milliseconds=1)
W = sk.Windowed


def _records(driver: TopologyTestDriver, topic: str = "out") -> List[Tuple[Any, Any, int]]:
    return [(r.key, r.value, r.timestamp) for r in driver.output_topic(topic).read_records()]


def _join_driver(how: str, windows: sk.JoinWindows) -> TopologyTestDriver:
    app = sk.App("kafka-wrong-join")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        left, right = b.stream("left"), b.stream("right")
        operation = {"inner": left.join, "left": left.left_join}[how]
        operation(right, lambda l, r: f"{l}+{r}", windows, name="j").to("out")
    return TopologyTestDriver(app)


def test_a_stream_stream_join_at_the_edge_of_its_store_retention_still_joins() -> None:
    """Difference 0, grace 0: ``r:a@0, l:a@0``. Kafka never joins them (its store has
    already dropped r); both are on time, so they join."""
    driver = _join_driver("inner", sk.JoinWindows.of(0 * MS))
    driver.input_topic("right").pipe_input("a", "r", 0)
    driver.input_topic("left").pipe_input("a", "l", 0)
    assert _records(driver) == [("a", "l+r", 0)]


def test_a_due_unmatched_left_join_result_is_not_skipped() -> None:
    """Left join, before 0, after 8, grace 5: ``l:a@14, l:c@21, r:c@21, l:a@30``. Kafka does
    not emit a@14 at 30 although its window closed at 27."""
    driver = _join_driver("left", sk.JoinWindows.of(8 * MS, grace=5 * MS).before(0 * MS))
    driver.input_topic("left").pipe_input("a", "l14", 14)
    driver.input_topic("left").pipe_input("c", "l21", 21)
    driver.input_topic("right").pipe_input("c", "r21", 21)
    driver.input_topic("left").pipe_input("a", "l30", 30)
    assert _records(driver) == [("c", "l21+r21", 21), ("a", "l14+None", 14)]


def test_a_suppressed_sliding_window_is_final_once() -> None:
    """Difference 1, grace 0: ``a@3, a@3, a@5``. Kafka's suppression fires 1 ms early, while the
    aggregation still accepts records, so one window can get two "final" results."""
    app = sk.App("kafka-wrong-sliding")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream("in").group_by_key().windowed_by(sk.SlidingWindows(time_difference=1 * MS))
          .count(name="c").suppress(sk.Suppressed.until_window_closes()).to_stream().to("out"))
    driver = TopologyTestDriver(app)
    for t in (3, 3, 5):
        driver.input_topic("in").pipe_input("a", 1, t)
    driver.input_topic("in").pipe_input("z", 1, 100)  # closes everything
    finals = [(k, v) for k, v, _ts in _records(driver) if k.key == "a"]
    assert finals == [(W("a", 2, 3), 2), (W("a", 4, 5), 1)]
    assert len({k for k, _v in finals}) == len(finals)


def test_a_session_is_merged_not_restarted_when_another_key_moved_stream_time() -> None:
    """Gap 2, grace 0: ``c@4, a@6, c@6``. Kafka's store expired c's [4,4] on stream time that
    a@6 set, and started a new session [6,6]; c@6 is within the gap of c@4, so they merge."""
    app = sk.App("kafka-wrong-sessions")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream("in").group_by_key().windowed_by(sk.SessionWindows(inactivity_gap=2 * MS))
          .count(name="s").to_stream().to("out"))
    driver = TopologyTestDriver(app)
    for key, t in [("c", 4), ("a", 6), ("c", 6)]:
        driver.input_topic("in").pipe_input(key, 1, t)
    assert _records(driver) == [(W("c", 4, 4), 1, 4), (W("a", 6, 6), 1, 6),
                                (W("c", 4, 4), None, 4), (W("c", 4, 6), 2, 6)]


def test_a_record_inside_a_session_emits_one_update_not_a_retraction_and_a_value() -> None:
    """Kafka emits ``(session, null)`` then ``(session, value)`` when a record lands inside a
    session whose bounds do not change; the single update says the same."""
    app = sk.App("kafka-wrong-session-update")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream("in").group_by_key().windowed_by(sk.SessionWindows(inactivity_gap=5 * MS))
          .count(name="s").to_stream().to("out"))
    driver = TopologyTestDriver(app)
    for t in (0, 4, 2):
        driver.input_topic("in").pipe_input("a", 1, t)
    assert _records(driver)[-1:] == [(W("a", 0, 4), 3, 4)]
    assert all(v is not None for k, v, _ts in _records(driver) if k == W("a", 0, 4))


def test_a_sliding_window_is_forwarded_once_per_record() -> None:
    """Difference 5: ``a@4, a@10``. The previous record's right window and the new
    record's left window are both [5, 10]; Kafka creates and forwards it twice in a row
    (``a@[5,10]=1``, ``a@[5,10]=1``). One record per window."""
    app = sk.App("kafka-wrong-sliding-twice")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream("in").group_by_key().windowed_by(sk.SlidingWindows(time_difference=5 * MS, grace=100 * MS))
          .count(name="c").to_stream().to("out"))
    driver = TopologyTestDriver(app)
    for t in (4, 10):
        driver.input_topic("in").pipe_input("a", 1, t)
    assert _records(driver) == [(W("a", 0, 5), 1, 4), (W("a", 5, 10), 1, 10)]


def test_a_table_join_emits_nothing_for_an_update_that_leaves_its_result_unchanged() -> None:
    """``L a=x@1, R a=y@2, L a=x@3, R a=y@4, R a=z@5``. Kafka forwards ``a=x+y`` again at 3
    and 4; the joined table has not changed, so nothing is emitted until the update at 5.
    The same holds for a foreign-key join and a self-join."""
    app = sk.App("kafka-wrong-no-op")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        b.table("l", name="L").join(b.table("r", name="R"), lambda a, c: f"{a}+{c}", name="J").to_stream().to("out")
    driver = TopologyTestDriver(app)
    for topic, value, t in (("l", "x", 1), ("r", "y", 2), ("l", "x", 3), ("r", "y", 4), ("r", "z", 5)):
        driver.input_topic(topic).pipe_input("a", value, t)
    assert _records(driver) == [("a", "x+y", 2), ("a", "x+z", 5)]


def test_a_foreign_key_join_emits_nothing_for_a_no_op_right_update() -> None:
    app = sk.App("kafka-wrong-fk-no-op")

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        orders, customers = b.table("orders", name="O"), b.table("customers", name="C")
        orders.join(customers, lambda o, c: f"{o['item']}@{c}", foreign_key_extractor=lambda o: o["customer"],
                    name="J").to_stream().to("out")
    driver = TopologyTestDriver(app)
    driver.input_topic("customers").pipe_input("c1", "ann", 1)
    driver.input_topic("orders").pipe_input("o1", {"item": "tea", "customer": "c1"}, 2)
    driver.input_topic("customers").pipe_input("c1", "ann", 3)
    driver.input_topic("customers").pipe_input("c1", "bob", 4)
    assert _records(driver) == [("o1", "tea@ann", 2), ("o1", "tea@bob", 4)]
