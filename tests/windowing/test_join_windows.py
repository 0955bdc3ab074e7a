"""JoinWindows arithmetic: the pairs a stream-stream join makes and when an unmatched
record's result is final."""
from __future__ import annotations

from datetime import timedelta

import pytest

from streamkit.errors import ConfigError
from streamkit.windowing.join_windows import JoinWindows

SEC = timedelta(seconds=1)


def _pairs(windows: JoinWindows, left: list, right: list) -> set:
    """Every (left, right) pair seen from the left records and, separately, from the right."""
    from_left = {(l, r) for l in left for r in right if windows.left_window(l)[0] <= r <= windows.left_window(l)[1]}
    from_right = {(l, r) for r in right for l in left
                  if windows.right_window(r)[0] <= l <= windows.right_window(r)[1]}
    assert from_left == from_right, "both sides must agree on which records join"
    return from_left


def test_symmetric_windows_join_records_at_most_the_difference_apart() -> None:
    windows = JoinWindows.of(10 * SEC)
    assert windows.before_ms == windows.after_ms == 10_000 and windows.grace_ms == 0
    assert _pairs(windows, [100_000], [89_999, 90_000, 100_000, 110_000, 110_001]) == {
        (100_000, 90_000), (100_000, 100_000), (100_000, 110_000)}


@pytest.mark.parametrize("before, after, joined", [
    (0 * SEC, 10 * SEC, {100_000, 105_000, 110_000}),          # only later right records
    (10 * SEC, 0 * SEC, {90_000, 95_000, 100_000}),            # only earlier right records
    (5 * SEC, 5 * SEC, {95_000, 100_000, 105_000}),
    (-2 * SEC, 10 * SEC, {105_000, 110_000}),                  # a window that starts after the record
])
def test_asymmetric_windows(before, after, joined) -> None:
    windows = JoinWindows.of(10 * SEC).before(before).after(after)
    right = [89_000, 90_000, 95_000, 100_000, 105_000, 110_000, 111_000]
    assert {r for _l, r in _pairs(windows, [100_000], right)} == joined


def test_both_sides_agree_for_random_asymmetric_windows() -> None:
    import random
    rng = random.Random(3)
    for _ in range(200):
        before, after = rng.randrange(-5, 20), rng.randrange(0, 20)
        if before + after < 0:
            continue
        windows = JoinWindows(before, after)
        _pairs(windows, [rng.randrange(100) for _ in range(8)], [rng.randrange(100) for _ in range(8)])


def test_close_times_include_the_window_end_and_grace() -> None:
    windows = JoinWindows.of(5 * SEC, grace=2 * SEC).after(3 * SEC)
    # A left/outer join emits a record without a partner once its own window closes (Kafka
    # Streams' rule): a left record at 100 s reaches right records up to 103 s, so after grace
    # it is unmatched from 105 s + 1 ms; a right record reaches left ones up to 105 s: 107 s + 1 ms.
    assert windows.left_close_time(100_000) == 105_001
    assert windows.right_close_time(100_000) == 107_001
    assert windows.left_is_late(100_000, 105_001) and not windows.left_is_late(100_000, 105_000)
    assert windows.right_is_late(100_000, 107_001) and not windows.right_is_late(100_000, 107_000)
    assert windows.size_ms == 8_000 and windows.retention_ms == 10_000


def test_bad_windows_are_refused_with_a_reason() -> None:
    with pytest.raises(ConfigError, match="negative"):
        JoinWindows.of(5 * SEC).before(-6 * SEC)
    with pytest.raises(ConfigError, match="timedelta"):
        JoinWindows.of(5000)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="sub-millisecond"):
        JoinWindows.of(timedelta(microseconds=1500))
    with pytest.raises(ConfigError, match="grace"):
        JoinWindows.of(SEC, grace=-SEC)
    with pytest.raises(ConfigError, match="must not be negative"):
        JoinWindows.of(-SEC)
