"""Window definitions: validation, assignment, the closing rule, sliding updates, session merges."""
from __future__ import annotations

import dataclasses
import doctest
import random
from datetime import timedelta
from typing import Dict, List, Set, Tuple

import pytest

from streamkit.errors import ConfigError
from streamkit.windowing import (HoppingWindows, SessionMerge, SessionWindows, SlidingWindows,
                                 SlidingWindowUpdate, TumblingWindows)
from streamkit.windowing import windowed_keys as windowed_module
from streamkit.windowing import session_windows as session_module
from streamkit.windowing import sliding_windows as sliding_module
from streamkit.windowing import windows as windows_module

MS = timedelta(milliseconds=1)
SEC = timedelta(seconds=1)


def ms(n: int) -> timedelta:
    return n * MS


# --- validation -------------------------------------------------------------------------------

@pytest.mark.parametrize("make, fragments", [
    (lambda: TumblingWindows(60_000), ["TumblingWindows size", "timedelta", "timedelta(milliseconds=60000)"]),
    (lambda: TumblingWindows(timedelta(0)), ["TumblingWindows size must be positive", "at least 1 ms"]),
    (lambda: TumblingWindows(-SEC), ["TumblingWindows size must be positive"]),
    (lambda: TumblingWindows(SEC, grace=-MS), ["TumblingWindows grace must not be negative", "timedelta(0)"]),
    (lambda: TumblingWindows(timedelta(microseconds=1500)), ["sub-millisecond", "whole milliseconds"]),
    (lambda: TumblingWindows(SEC, grace=1.5), ["TumblingWindows grace", "got float"]),
    (lambda: HoppingWindows(5 * SEC, advance=10 * SEC), ["advance (0:00:10) must not exceed size (0:00:05)",
                                                         "advance <= size"]),
    (lambda: HoppingWindows(5 * SEC, advance=timedelta(0)), ["HoppingWindows advance must be positive"]),
    (lambda: HoppingWindows(timedelta(0), advance=SEC), ["HoppingWindows size must be positive"]),
    (lambda: HoppingWindows(SEC, advance=SEC, grace=-SEC), ["HoppingWindows grace must not be negative"]),
    (lambda: HoppingWindows(SEC, advance=timedelta(microseconds=1)), ["HoppingWindows advance", "sub-millisecond"]),
    (lambda: SlidingWindows(timedelta(0)), ["SlidingWindows time_difference must be positive"]),
    (lambda: SlidingWindows(SEC, grace=-SEC), ["SlidingWindows grace must not be negative"]),
    (lambda: SlidingWindows(10), ["SlidingWindows time_difference", "timedelta(milliseconds=10)"]),
    (lambda: SessionWindows(timedelta(0)), ["SessionWindows inactivity_gap must be positive"]),
    (lambda: SessionWindows(SEC, grace=-MS), ["SessionWindows grace must not be negative"]),
    (lambda: SessionWindows("5s"), ["SessionWindows inactivity_gap must be a datetime.timedelta", "got str"]),
])
def test_invalid_definitions_raise_config_error_with_a_fix(make, fragments):
    with pytest.raises(ConfigError) as info:
        make()
    for fragment in fragments:
        assert fragment in str(info.value)


def test_boundary_definitions_are_valid():
    assert HoppingWindows(SEC, advance=SEC).advance_ms == 1000      # advance == size: tumbling
    assert TumblingWindows(MS).size_ms == 1                         # smallest size
    assert TumblingWindows(SEC, grace=timedelta(0)).grace_ms == 0
    assert SlidingWindows(MS).time_difference_ms == 1
    assert SessionWindows(MS).inactivity_gap_ms == 1


@pytest.mark.parametrize("windows, size, grace, retention", [
    (TumblingWindows(timedelta(minutes=1)), 60_000, 0, 60_000),
    (TumblingWindows(timedelta(minutes=1), grace=10 * SEC), 60_000, 10_000, 70_000),
    (HoppingWindows(timedelta(minutes=1), advance=10 * SEC, grace=5 * SEC), 60_000, 5_000, 65_000),
    (SlidingWindows(10 * SEC, grace=3 * SEC), 10_000, 3_000, 23_001),
    (SessionWindows(timedelta(minutes=5), grace=SEC), 300_000, 1_000, 601_000),
])
def test_millisecond_properties(windows, size, grace, retention):
    assert (windows.size_ms, windows.grace_ms, windows.retention_ms) == (size, grace, retention)
    assert windows.retention_ms >= windows.size_ms + windows.grace_ms


def test_advance_and_difference_properties():
    assert TumblingWindows(7 * SEC).advance_ms == 7_000
    assert HoppingWindows(10 * SEC, advance=2 * SEC).advance_ms == 2_000
    assert SlidingWindows(ms(250)).time_difference_ms == 250
    assert SessionWindows(ms(900)).inactivity_gap_ms == 900


def test_definitions_are_frozen_hashable_values():
    a = HoppingWindows(10 * SEC, advance=5 * SEC)
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.size = SEC  # type: ignore[misc]
    assert a == HoppingWindows(timedelta(milliseconds=10_000), advance=timedelta(milliseconds=5_000))
    assert a != HoppingWindows(10 * SEC, advance=5 * SEC, grace=SEC)
    assert len({a, HoppingWindows(10 * SEC, advance=5 * SEC), TumblingWindows(10 * SEC)}) == 2
    assert repr(TumblingWindows(SEC)) == "TumblingWindows(size=datetime.timedelta(seconds=1), " \
                                         "grace=datetime.timedelta(0))"


# --- tumbling and hopping assignment ----------------------------------------------------------

@pytest.mark.parametrize("timestamp, expected", [
    (0, [(0, 10_000)]),
    (1, [(0, 10_000)]),
    (9_999, [(0, 10_000)]),          # just before a boundary
    (10_000, [(10_000, 20_000)]),    # on a boundary: the window starting there
    (10_001, [(10_000, 20_000)]),
    (1_700_000_003_456, [(1_700_000_000_000, 1_700_000_010_000)]),
])
def test_tumbling_windows_for(timestamp, expected):
    assert TumblingWindows(10 * SEC).windows_for(timestamp) == expected


@pytest.mark.parametrize("timestamp, expected", [
    (0, [(0, 10_000)]),
    (4_999, [(0, 10_000)]),
    (5_000, [(0, 10_000), (5_000, 15_000)]),
    (9_999, [(0, 10_000), (5_000, 15_000)]),
    (10_000, [(5_000, 15_000), (10_000, 20_000)]),
    (14_999, [(5_000, 15_000), (10_000, 20_000)]),
])
def test_hopping_windows_for_at_boundaries(timestamp, expected):
    assert HoppingWindows(10 * SEC, advance=5 * SEC).windows_for(timestamp) == expected


def test_hopping_excludes_windows_that_would_start_before_zero():
    windows = HoppingWindows(ms(10), advance=ms(2))
    # Starts -6, -4 and -2 would hold t=3 too, but windows start at 0 or later.
    assert windows.windows_for(3) == [(0, 10), (2, 12)]
    assert windows.windows_for(0) == [(0, 10)]
    assert len(windows.windows_for(8)) == 5


def _brute_force_hopping(timestamp: int, size: int, advance: int) -> List[Tuple[int, int]]:
    return [(s, s + size) for s in range(0, timestamp + 1, advance) if s <= timestamp < s + size]


@pytest.mark.parametrize("size, advance", [(10, 10), (10, 5), (10, 2), (10, 1), (12, 4), (10, 3), (7, 5)])
def test_hopping_matches_brute_force(size, advance):
    windows = HoppingWindows(ms(size), advance=ms(advance))
    for timestamp in range(0, 4 * size):
        result = windows.windows_for(timestamp)
        assert result == _brute_force_hopping(timestamp, size, advance), timestamp
        assert all(start % advance == 0 and start <= timestamp < end for start, end in result)


@pytest.mark.parametrize("size, advance", [(10, 10), (10, 5), (10, 2), (60_000, 15_000), (12, 4)])
def test_hopping_count_is_size_over_advance_once_past_the_first_window(size, advance):
    windows = HoppingWindows(ms(size), advance=ms(advance))
    for timestamp in list(range(size - advance, 3 * size)) + [10**12 + 7]:
        assert len(windows.windows_for(timestamp)) == size // advance, timestamp


def test_hopping_with_advance_equal_to_size_is_tumbling():
    hopping, tumbling = HoppingWindows(ms(100), advance=ms(100)), TumblingWindows(ms(100))
    assert all(hopping.windows_for(t) == tumbling.windows_for(t) for t in range(0, 1_000, 7))


@pytest.mark.parametrize("windows", [TumblingWindows(SEC), HoppingWindows(SEC, advance=ms(500))])
def test_negative_timestamps_are_rejected(windows):
    with pytest.raises(ValueError, match="timestamp -1 is negative"):
        windows.windows_for(-1)


# --- the closing rule -------------------------------------------------------------------------

@pytest.mark.parametrize("windows", [
    TumblingWindows(10 * SEC, grace=2 * SEC), HoppingWindows(10 * SEC, advance=5 * SEC, grace=2 * SEC)])
def test_exclusive_end_windows_close_at_end_plus_grace(windows):
    end = 20_000
    assert not windows.is_closed(end, 0)
    assert not windows.is_closed(end, end)
    assert not windows.is_closed(end, end + 2_000 - 1)
    assert windows.is_closed(end, end + 2_000)
    assert windows.is_closed(end, end + 2_001)


def test_zero_grace_closes_exactly_at_the_exclusive_end():
    windows = TumblingWindows(10 * SEC)
    assert not windows.is_closed(10_000, 9_999)
    assert windows.is_closed(10_000, 10_000)


def test_inclusive_end_windows_close_one_ms_later():
    windows = SlidingWindows(10 * SEC, grace=2 * SEC)
    end = 20_000  # inclusive: the window is [start, 20_001)
    assert not windows.is_closed(end, end + 2_000)
    assert windows.is_closed(end, end + 2_000 + 1)


def test_a_session_closes_once_stream_time_passes_end_plus_gap_plus_grace():
    """A record within the gap of a session's end can still extend it: as in Kafka Streams,
    a session is open until stream time passes end + gap + grace."""
    windows = SessionWindows(10 * SEC, grace=2 * SEC)
    assert not windows.is_closed(20_000, 32_000)
    assert windows.is_closed(20_000, 32_001)
    assert windows.close_time(20_000) == 32_001


def test_inclusive_end_with_zero_grace_stays_open_at_its_end():
    assert not SessionWindows(SEC).is_closed(5_000, 6_000)   # a record at 6_000 would still extend it
    assert SessionWindows(SEC).is_closed(5_000, 6_001)
    assert not SlidingWindows(SEC).is_closed(5_000, 5_000)
    assert SlidingWindows(SEC).is_closed(5_000, 5_001)


# --- sliding windows --------------------------------------------------------------------------

D = 10  # time difference in the sliding tests, in ms
SLIDING = SlidingWindows(ms(D))


def updates(seen: List[int], timestamp: int, windows: SlidingWindows = SLIDING) -> List[Tuple[int, int, str]]:
    """``(start, end, flags)``: flags has "c" when created and "i" when it includes the record."""
    return [(u.start, u.end, ("c" if u.created else "") + ("i" if u.includes_record else ""))
            for u in windows.updates_for(seen, timestamp)]


@pytest.mark.parametrize("seen, timestamp, expected", [
    # the first record: its left window only
    ([], 20, [(10, 20, "ci")]),
    # in order, within the difference: new left window, and the previous record's right window
    ([20], 25, [(15, 25, "ci"), (21, 31, "ci")]),
    # exactly the difference apart: still one window together
    ([20], 30, [(20, 30, "ci"), (21, 31, "ci")]),
    # one ms more: no common window; [21, 31] is only the new left window
    ([20], 31, [(21, 31, "ci")]),
    # out of order, inside existing windows: update them, create the left and right windows
    ([20, 25], 22, [(12, 22, "ci"), (15, 25, "i"), (21, 31, "i"), (23, 33, "c")]),
    # out of order, before everything: the right window already exists as a later left window
    ([25, 31], 20, [(10, 20, "ci"), (15, 25, "i")]),
    # out of order, the previous record's right window must be created now
    ([20, 32], 25, [(15, 25, "ci"), (21, 31, "ci"), (22, 32, "i"), (26, 36, "c")]),
    # ... unless it already exists as the left window of a later record
    ([20, 31], 25, [(15, 25, "ci"), (21, 31, "i"), (26, 36, "c")]),
    # duplicate of the latest timestamp: only updates, nothing new
    ([20, 25], 25, [(15, 25, "i"), (21, 31, "i")]),
    # duplicate of an earlier timestamp: its right window exists and does not hold it
    ([20, 25], 20, [(10, 20, "i"), (15, 25, "i")]),
    ([20, 20, 25, 25], 25, [(15, 25, "i"), (21, 31, "i")]),
])
def test_sliding_updates(seen, timestamp, expected):
    assert sorted(updates(seen, timestamp)) == expected  # (the order is tested below)


@pytest.mark.parametrize("seen, timestamp, expected", [
    ([], 3, [(0, 10, "ci")]),                                        # early: [0, D] not [-7, 3]
    ([], 0, [(0, 10, "ci")]),
    ([3], 7, [(0, 10, "i"), (4, 14, "ci")]),                         # shares [0, D]
    ([3, 7], 5, [(0, 10, "i"), (4, 14, "i"), (6, 16, "c")]),
    ([3], 10, [(0, 10, "i"), (4, 14, "ci")]),                        # t == D: its left window is [0, D]
    ([3], 11, [(1, 11, "ci"), (4, 14, "ci")]),                       # t == D + 1: a normal left window
    ([12], 3, [(0, 10, "ci"), (2, 12, "i"), (4, 14, "c")]),           # early record under a later window
])
def test_sliding_records_earlier_than_the_difference_share_window_zero(seen, timestamp, expected):
    assert sorted(updates(seen, timestamp)) == expected


def test_sliding_ignores_timestamps_out_of_range():
    near = [20, 25]
    assert updates([0, 5, 9] + near + [34, 100, 5_000], 22) == updates(near + [34], 22)
    assert updates(list(range(0, 9)) + [500], 22) == updates([], 22)


def test_sliding_update_fields():
    update = SLIDING.updates_for([20], 25)[1]
    # the left window starts from the aggregate of [10, 20], the previous record's left window
    assert update == SlidingWindowUpdate(15, 25, created=True, includes_record=True, base_start=10)
    assert update.window == (15, 25)
    assert SLIDING.updates_for([20], 25)[0].base_start is None   # 20's right window: 25 alone


@pytest.mark.parametrize("seen, timestamp, expected", [
    # Kafka Streams 4.1 forwards the existing windows holding the record by descending start,
    # then creates the previous record's right window, the left window, the right window.
    ([20, 25], 22, [(21, 31, "i"), (15, 25, "i"), (12, 22, "ci"), (23, 33, "c")]),
    ([20, 32], 25, [(22, 32, "i"), (21, 31, "ci"), (15, 25, "ci"), (26, 36, "c")]),
    ([20], 25, [(21, 31, "ci"), (15, 25, "ci")]),
    # the case (difference 2): a@6, then a@4 updates [4,6] before creating [2,4]
    ([6], 4, [(4, 6, "i"), (2, 4, "ci"), (5, 7, "c")]),
    # an early record: other existing windows ascending, its right window, the previous
    # record's right window, and the shared [0, d] window last (Kafka's processEarly)
    ([12], 3, [(2, 12, "i"), (4, 14, "c"), (0, 10, "ci")]),
    ([3, 7], 5, [(4, 14, "i"), (6, 16, "c"), (0, 10, "i")]),
])
def test_sliding_updates_come_in_kafka_streams_forwarding_order(seen, timestamp, expected):
    windows = SlidingWindows(ms(2)) if timestamp == 4 else SLIDING
    assert updates(seen, timestamp, windows) == expected


def stored_updates(stored: Dict[int, int], timestamp: int, windows: SlidingWindows = SLIDING
                   ) -> List[Tuple[int, int, str, object]]:
    """``(start, end, flags, base_start)`` of ``updates_for_stored`` (flags as in ``updates``)."""
    return [(u.start, u.end, ("c" if u.created else "") + ("i" if u.includes_record else ""), u.base_start)
            for u in windows.updates_for_stored(stored.items(), timestamp)]


def test_sliding_updates_a_stored_window_no_seen_record_defines():
    """A late record's right window holds only later records, yet a record falling in it
    updates it (issue 18, item 2). Difference 12: c@45, then c@40 when [28,40] was closed:
    stored are [33,45] and 40's right window [41,53], both with latest 45."""
    windows = SlidingWindows(ms(12), grace=ms(4))
    assert stored_updates({33: 45, 41: 45}, 52, windows) == [
        (41, 53, "i", 41), (46, 58, "ci", None), (40, 52, "ci", 33)]


def test_sliding_previous_record_comes_from_a_window_ending_before_the_record():
    """Issue 33 (difference 5): c@13, then c@15 when its left window [10,15] was closed; stored
    are [8,13] and 13's right window [14,19] (latest 15). For c@18 the previous record is 13,
    the latest of [8,13] (the window ending before 18), not 15: no [16,21] is created, and the
    left window [13,18] starts from [8,13]."""
    assert stored_updates({8: 13, 14: 15}, 18, SlidingWindows(ms(5))) == [
        (14, 19, "i", 14), (13, 18, "ci", 8)]
    # with 15's left window stored (it came while that was open), 15 is the previous record
    assert stored_updates({8: 13, 10: 15, 14: 15}, 18, SlidingWindows(ms(5))) == [
        (14, 19, "i", 14), (16, 21, "ci", None), (13, 18, "ci", 10)]


def test_sliding_previous_record_of_a_stored_left_window_is_replaced_by_the_next_window():
    """Difference 2: the left window [3,5] of a@5 is stored (latest 3), so the reading goes on
    to [2,4] (latest 2), which then gives the previous record: 2, whose right window [3,5]
    exists. 3's right window [4,6] is not created (Kafka Streams 4.1 does the same)."""
    assert stored_updates({0: 2, 2: 2, 3: 3}, 5, SlidingWindows(ms(2))) == [(3, 5, "i", 3)]


def test_sliding_record_equal_to_its_stored_left_windows_latest_creates_nothing():
    # [15,25] holds a record at 25: only the windows holding 25 are updated, even though 25's
    # right window [26,36] is missing while [21,31] holds 30
    assert stored_updates({15: 25, 21: 30}, 25) == [(21, 31, "i", 21), (15, 25, "i", 15)]


def test_sliding_reads_only_windows_starting_from_t_minus_2d_to_t_plus_1():
    # [1,11] (start t - 2d - 1) and [24,34] (start t + 2) are not read: the left window is empty
    assert stored_updates({1: 11, 24: 30}, 22) == [(12, 22, "ci", None)]
    # both read at the edges: 12 is the previous record, its right window [13,23] is created,
    # the left window starts from [2,12], and 22's right window [23,33] exists
    assert stored_updates({2: 12, 23: 30}, 22) == [(13, 23, "ci", None), (12, 22, "ci", 2)]
    assert SLIDING.read_range(22) == (2, 23) and SLIDING.read_range(5) == (0, 6)


def test_sliding_previous_record_right_window_that_is_the_left_window_is_created_once():
    # 14 = t - d - 1: its right window [15,25] is 25's left window; Kafka writes it twice
    assert stored_updates({4: 14}, 25) == [(15, 25, "ci", None)]


def test_sliding_rejects_bad_input():
    with pytest.raises(ValueError, match="sorted"):
        SLIDING.updates_for([25, 20], 22)
    with pytest.raises(ValueError, match="negative"):
        SLIDING.updates_for([], -1)
    with pytest.raises(ValueError, match="negative timestamp"):
        SLIDING.updates_for([-3, 2], 5)


def test_sliding_late_record_rule_matches_its_windows():
    windows = SlidingWindows(ms(D), grace=ms(5))
    t = 100
    # Every window holding t ends by t + D, so the record is late once that one closes.
    assert max(u.end for u in windows.updates_for([95, 105, 110], t) if u.includes_record) == t + D
    assert not windows.is_closed(t + D, t + D + 5)
    assert windows.is_closed(t + D, t + D + 6)


def _oracle_windows(records: List[int], difference: int) -> Set[Tuple[int, int]]:
    """KIP-450 by definition: a left window per record, a right window per record with a
    later record within the difference; early records share [0, difference]."""
    out = {(max(0, r - difference), max(r, difference)) for r in records}
    out |= {(r + 1, r + 1 + difference) for r in records if any(r < s <= r + difference for s in records)}
    return out


@pytest.mark.parametrize("seed", range(12))
def test_sliding_updates_maintain_exact_window_contents(seed):
    """Applying the updates (a count per window, created ones copying their base window)
    over a random out-of-order stream with nothing late yields exactly the windows KIP-450
    defines, each with the number of records it contains."""
    rng = random.Random(seed)
    difference = rng.choice([1, 3, 10, 25])
    windows = SlidingWindows(ms(difference))
    counts: Dict[Tuple[int, int], int] = {}
    seen: List[int] = []
    for _ in range(60):
        t = rng.randrange(0, 120)
        result = windows.updates_for(seen, t)
        assert len({u.start for u in result}) == len(result)
        before = dict(counts)
        for u in result:
            assert u.created == (u.window not in counts)
            assert u.includes_record == (u.start <= t <= u.end)
            if u.created:   # content: a copy of the base window's, as it was before t
                counts[u.window] = 0 if u.base_start is None else before[(u.base_start, u.base_start + difference)]
            else:
                assert u.base_start == u.start
            if u.includes_record:
                counts[u.window] += 1
        seen.append(t)
        seen.sort()
        expected = _oracle_windows(seen, difference)
        assert set(counts) == expected
        for (start, end), count in counts.items():
            assert count == sum(start <= s <= end for s in seen) > 0
            assert start >= 0 and end - start == difference


# --- session windows --------------------------------------------------------------------------

GAP = 5_000
SESSIONS = SessionWindows(ms(GAP))


@pytest.mark.parametrize("sessions, timestamp, window, replaced, removed", [
    # a new isolated session
    ([], 4_000, (4_000, 4_000), (), ()),
    ([(0, 1_000), (20_000, 21_000)], 10_000, (10_000, 10_000), (), ()),
    # extend one session forwards / backwards
    ([(0, 1_000)], 4_000, (0, 4_000), ((0, 1_000),), ((0, 1_000),)),
    ([(10_000, 12_000)], 6_000, (6_000, 12_000), ((10_000, 12_000),), ((10_000, 12_000),)),
    # bridge two sessions
    ([(0, 1_000), (8_000, 9_000)], 4_000, (0, 9_000), ((0, 1_000), (8_000, 9_000)),
     ((0, 1_000), (8_000, 9_000))),
    # a record inside a session changes nothing but its aggregate
    ([(0, 9_000)], 4_000, (0, 9_000), ((0, 9_000),), ()),
    ([(4_000, 4_000)], 4_000, (4_000, 4_000), ((4_000, 4_000),), ()),
    # bridging a session and extending past the other
    ([(0, 1_000), (3_000, 3_500)], 6_000, (0, 6_000), ((0, 1_000), (3_000, 3_500)),
     ((0, 1_000), (3_000, 3_500))),
])
def test_session_merge(sessions, timestamp, window, replaced, removed):
    merge = SESSIONS.merge(sessions, timestamp)
    assert (merge.window, merge.replaced, merge.removed) == (window, replaced, removed)
    assert merge.start <= timestamp <= merge.end


@pytest.mark.parametrize("existing, timestamp, merges", [
    ((1_000, 2_000), 2_000 + GAP, True),            # after the end, exactly the gap
    ((1_000, 2_000), 2_000 + GAP + 1, False),
    ((10_000, 12_000), 10_000 - GAP, True),         # before the start, exactly the gap
    ((10_000, 12_000), 10_000 - GAP - 1, False),
])
def test_session_merge_at_exactly_the_gap(existing, timestamp, merges):
    merge = SESSIONS.merge([existing], timestamp)
    assert (merge.replaced == (existing,)) is merges
    expected = (min(existing[0], timestamp), max(existing[1], timestamp)) if merges else (timestamp, timestamp)
    assert merge.window == expected


def test_session_merge_sorts_replaced_and_ignores_far_sessions():
    merge = SESSIONS.merge([(8_000, 9_000), (50_000, 60_000), (0, 1_000)], 4_000)
    assert merge == SessionMerge(0, 9_000, ((0, 1_000), (8_000, 9_000)))


def test_session_merge_accepts_any_iterable():
    assert SESSIONS.merge(iter([(0, 1_000)]), 2_000).window == (0, 2_000)


def test_session_merge_rejects_bad_input():
    with pytest.raises(ValueError, match="negative"):
        SESSIONS.merge([], -5)
    with pytest.raises(ValueError, match="0 <= start <= end"):
        SESSIONS.merge([(3_000, 2_000)], 2_500)


def _oracle_sessions(records: List[int], gap: int) -> Set[Tuple[int, int]]:
    """Sessions by definition: runs of sorted timestamps with consecutive gaps <= gap."""
    out, ordered = set(), sorted(records)
    start = previous = ordered[0]
    for t in ordered[1:]:
        if t - previous > gap:
            out.add((start, previous))
            start = t
        previous = t
    out.add((start, previous))
    return out


@pytest.mark.parametrize("seed", range(12))
def test_session_merges_match_the_definition_on_random_streams(seed):
    rng = random.Random(seed)
    gap = rng.choice([1, 5, 20])
    windows = SessionWindows(ms(gap))
    sessions: Set[Tuple[int, int]] = set()
    records: List[int] = []
    for _ in range(50):
        t = rng.randrange(0, 300)
        merge = windows.merge(sessions, t)
        assert set(merge.removed) <= set(merge.replaced) <= sessions
        sessions = (sessions - set(merge.replaced)) | {merge.window}
        records.append(t)
        assert sessions == _oracle_sessions(records, gap)


# --- examples in docstrings -------------------------------------------------------------------

@pytest.mark.parametrize("module", [windows_module, sliding_module, session_module, windowed_module])
def test_docstring_examples(module):
    result = doctest.testmod(module)
    assert result.attempted > 0 and result.failed == 0
