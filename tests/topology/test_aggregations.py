"""The Aggregation values the IR carries: each one's add, subtract and merge, as the
operators call them (None is "no aggregate yet")."""
from __future__ import annotations

import pytest

from streamkit.topology.aggregations import Aggregate, Count, CountDistinct, Reduce


def test_count_adds_subtracts_and_merges() -> None:
    count = Count()
    assert [count.initial(), count.add("k", "v", None), count.add("k", "v", 2)] == [None, 1, 3]
    assert [count.subtract("k", "v", 3), count.subtract("k", "v", None)] == [2, -1]
    assert count.merge("k", 2, 5) == 7
    assert (count.name, count.subtracts, count.merges, count.result) == ("count", True, True, None)


def test_reduce_starts_from_the_first_value_and_merges_with_the_reducer() -> None:
    plain = Reduce(lambda agg, v: agg + v)
    assert [plain.initial(), plain.add("k", 4, None), plain.add("k", 4, 3), plain.merge("k", 3, 4)] == [None, 4, 7, 7]
    assert not plain.subtracts
    with pytest.raises(TypeError, match="reduce cannot take a value out"):
        plain.subtract("k", 1, 3)
    table = Reduce(lambda agg, v: agg + v, lambda agg, v: agg - v)
    assert table.subtracts and [table.subtract("k", 1, 3), table.subtract("k", 1, None)] == [2, None]


def test_aggregate_starts_from_the_initializer_each_time_it_has_no_aggregate() -> None:
    aggregate = Aggregate(lambda: [], lambda k, v, agg: agg + [f"{k}{v}"],
                          subtractor=lambda k, v, agg: [x for x in agg if x != f"{k}{v}"],
                          merger=lambda k, a, b: a + b)
    assert aggregate.initial() == [] and aggregate.add("k", 1, None) == ["k1"]
    assert aggregate.subtract("k", 1, ["k1", "k2"]) == ["k2"] and aggregate.subtract("k", 1, None) == []
    assert aggregate.merge("k", ["k1"], ["k2"]) == ["k1", "k2"]
    assert (aggregate.subtracts, aggregate.merges) == (True, True)
    assert not Aggregate(lambda: 0, lambda k, v, agg: agg).merges
    with pytest.raises(TypeError, match="aggregate cannot merge"):
        Aggregate(lambda: 0, lambda k, v, agg: agg).merge("k", 1, 2)


def test_count_distinct_keeps_sorted_json_texts_and_never_changes_a_stored_list() -> None:
    distinct = CountDistinct("user")
    first = distinct.add("k", {"user": "b"}, None)
    second = distinct.add("k", {"user": "a"}, first)
    assert (first, second) == (['"b"'], ['"a"', '"b"'])  # a new list: ``first`` (the old value) is unchanged
    assert distinct.add("k", {"user": "a"}, second) == second
    assert distinct.add("k", {"user": None}, second) == second and distinct.add("k", None, None) == []
    by_function = CountDistinct(lambda value: value)
    same = by_function.add("k", (1, 2), by_function.add("k", [1, 2], None))
    assert same == ["[1,2]"]  # a tuple and a list with the same items are one value
    assert by_function.add("k", 1.0, by_function.add("k", 1, None)) == ["1", "1.0"]
    assert by_function.add("k", {"b": 1, "a": 2}, by_function.add("k", {"a": 2, "b": 1}, None)) == ['{"a":2,"b":1}']
    assert distinct.merge("k", ['"a"', '"c"'], ['"b"', '"c"']) == ['"a"', '"b"', '"c"']
    assert distinct.result(['"a"', '"b"']) == 2
    assert (distinct.name, distinct.subtracts, distinct.merges) == ("count_distinct", False, True)
    with pytest.raises(KeyError):
        distinct.add("k", {"other": 1}, None)  # a missing field is an error the node's handlers see
