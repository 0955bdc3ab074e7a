"""One topology per operator family, the same input, the same full output on every backend
(the test driver, an embedded worker and the Spark replay: the ``backend`` fixture,
tests/backends.py): stateless operators, a count, a windowed count suppressed until its
windows close, and a stream-table join. Each input has out-of-order timestamps; the
expected outputs are written out whole, so the three backends agree with each other by
agreeing with them."""
from __future__ import annotations

from datetime import timedelta

import streamkit as sk

from tests.backends import Backend

SEC = timedelta(seconds=1)


def test_stateless_operators_keep_each_records_timestamp(backend: Backend) -> None:
    def stateless(b: sk.StreamsBuilder) -> None:
        numbers = b.stream("numbers")
        numbers.filter(lambda k, v: v % 2 == 0).map_values(lambda v: v * 10).to("even-tens")
        numbers.flat_map(lambda k, v: [(f"{k}{i}", i) for i in range(v % 3)]).to("spread")

    outputs = backend.run(stateless, inputs={"numbers": [("a", 1, 1000), ("b", 2, 900), ("a", 4, 1200),
                                                         ("c", 5, 1100), ("d", 3, 1300)]})

    assert outputs == {
        "even-tens": [("b", 20, 900), ("a", 40, 1200)],
        "spread": [("a0", 0, 1000), ("b0", 0, 900), ("b1", 1, 900), ("a0", 0, 1200), ("c0", 0, 1100),
                   ("c1", 1, 1100)],
    }


def test_a_count_emits_every_update_at_the_latest_timestamp_of_its_key(backend: Backend) -> None:
    def count(b: sk.StreamsBuilder) -> None:
        b.stream("clicks").group_by_key().count(name="clicks-per-user").to_stream().to("counts")

    outputs = backend.run(count, inputs={"clicks": [("ann", {}, 1000), ("bob", {}, 2000), ("ann", {}, 3000),
                                                    ("ann", {}, 2500), (None, {}, 2600), ("bob", {}, 1500)]})

    # a None key is dropped; an out-of-order record counts at its key's latest timestamp
    assert outputs == {"counts": [("ann", 1, 1000), ("bob", 1, 2000), ("ann", 2, 3000), ("ann", 3, 3000),
                                  ("bob", 2, 2000)]}


def test_a_suppressed_windowed_count_emits_each_closed_window_once(backend: Backend) -> None:
    def windowed_count(b: sk.StreamsBuilder) -> None:
        (b.stream("clicks").group_by_key()
          .windowed_by(sk.TumblingWindows(10 * SEC, grace=1 * SEC))
          .count(name="clicks-per-window")
          .suppress(sk.Suppressed.until_window_closes())
          .to_stream()
          .map(lambda window, n: (f"{window.key}@{window.start}", n))
          .to("final-counts"))

    clicks = [("ann", {}, 1000), ("ann", {}, 5000), ("bob", {}, 9000), ("ann", {}, 10_500),
              ("bob", {}, 9500),    # in grace (stream time 10.5 s): still counts in [0 s, 10 s)
              ("ann", {}, 12_000),  # stream time 12 s closes [0 s, 10 s)
              ("ann", {}, 3000),    # late: its window has closed, dropped
              ("bob", {}, 25_000)]  # closes [10 s, 20 s); [20 s, 30 s) stays open
    outputs = backend.run(windowed_count, inputs={"clicks": clicks})

    # each window's count once, at the latest timestamp it counted
    assert outputs == {"final-counts": [("ann@0", 2, 5000), ("bob@0", 2, 9500), ("ann@10000", 2, 12_000)]}


def test_a_stream_table_join_reads_the_row_of_the_records_moment(backend: Backend) -> None:
    def enrich(b: sk.StreamsBuilder) -> None:
        orders = b.stream("orders")
        customers = b.table("customers", name="customers")
        orders.join(customers, lambda order, name: f"{order} for {name}", name="orders-with-names").to("named")

    outputs = backend.run(enrich, inputs={
        "orders": [("c1", "x", 2000), ("c2", "y", 2500), ("c3", "v", 2600), ("c1", "z", 3200), ("c2", "w", 4000)],
        "customers": [("c1", "Ann", 1000), ("c2", "Bob", 1500), ("c1", "Ann B", 3000), ("c2", None, 3500)],
    })

    # c3 never has a row; c2's row is deleted before its second order
    assert outputs == {"named": [("c1", "x for Ann", 2000), ("c2", "y for Bob", 2500), ("c1", "z for Ann B", 3200)]}
