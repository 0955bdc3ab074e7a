"""Join windows: which records of two streams a stream-stream join pairs, and when an
unmatched record's left/outer result is final. Pure arithmetic, no state.

A left record at ``t`` joins right records with timestamps in ``[t - before, t + after]``;
a right record at ``t`` joins left records in ``[t - after, t + before]`` (the same
pairs, seen from the other side). Each side's buffer keeps records at most
:attr:`retention_ms` (``before + after + grace``) behind that side's latest timestamp;
an out-of-order record joins what the other buffer keeps. A left or outer join emits a
record that found no partner at once if its window already ended, else once its own
window plus grace has closed, as Kafka Streams does: stream time past
``t + after + grace`` for a left record, ``t + before + grace`` for a right one. A
partner can still arrive after that while the record is buffered, and is joined too.

>>> from datetime import timedelta
>>> w = JoinWindows.of(timedelta(minutes=5), grace=timedelta(seconds=30))
>>> w.left_window(600_000), w.right_window(600_000)
((300000, 900000), (300000, 900000))
>>> w.after(timedelta(0)).left_window(600_000)
(300000, 600000)
>>> w.left_close_time(600_000) - 600_000   # 5 minutes after + 30 s grace + 1 ms
330001
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Tuple

from ..errors import ConfigError

__all__ = ["JoinWindows"]

_ONE_MS = timedelta(milliseconds=1)


def _millis(name: str, value: object) -> int:
    if not isinstance(value, timedelta):
        raise ConfigError(f"JoinWindows {name} must be a datetime.timedelta, got {type(value).__name__} ({value!r})")
    if value % _ONE_MS:
        raise ConfigError(f"JoinWindows {name} ({value}) has sub-millisecond precision: round it to whole ms")
    return value // _ONE_MS


@dataclass(frozen=True)
class JoinWindows:
    """How far apart in event time two records may be to join. Build with :meth:`of`;
    :meth:`before` and :meth:`after` make it asymmetric (as in Kafka Streams)."""

    before_ms: int
    """A left record joins right records up to this much earlier (may be negative)."""
    after_ms: int
    """A left record joins right records up to this much later (may be negative)."""
    grace_ms: int = 0

    def __post_init__(self) -> None:
        if self.before_ms + self.after_ms < 0:
            raise ConfigError(
                f"JoinWindows: before ({self.before_ms} ms) + after ({self.after_ms} ms) is negative: the "
                "window would be empty; keep before + after >= 0")
        if self.grace_ms < 0:
            raise ConfigError(f"JoinWindows grace must not be negative, got {self.grace_ms} ms")

    @staticmethod
    def of(time_difference: timedelta, grace: timedelta = timedelta(0)) -> "JoinWindows":
        """Records join when their timestamps differ by at most ``time_difference``;
        out-of-order records are accepted for ``grace`` after a window ends."""
        difference = _millis("time_difference", time_difference)
        if difference < 0:
            raise ConfigError(f"JoinWindows.of: time_difference must not be negative, got {time_difference}")
        return JoinWindows(difference, difference, _millis("grace", grace))

    def before(self, time_difference: timedelta) -> "JoinWindows":
        """The same windows with the earlier bound moved: a left record joins right records
        up to ``time_difference`` before it."""
        return replace(self, before_ms=_millis("before", time_difference))

    def after(self, time_difference: timedelta) -> "JoinWindows":
        """The same windows with the later bound moved: a left record joins right records
        up to ``time_difference`` after it."""
        return replace(self, after_ms=_millis("after", time_difference))

    def grace(self, grace: timedelta) -> "JoinWindows":
        """The same windows with another grace period."""
        return replace(self, grace_ms=_millis("grace", grace))

    def left_window(self, timestamp_ms: int) -> Tuple[int, int]:
        """The right-record timestamps ``[low, high]`` (inclusive) a left record at
        ``timestamp_ms`` joins."""
        return timestamp_ms - self.before_ms, timestamp_ms + self.after_ms

    def right_window(self, timestamp_ms: int) -> Tuple[int, int]:
        """The left-record timestamps ``[low, high]`` (inclusive) a right record at
        ``timestamp_ms`` joins."""
        return timestamp_ms - self.after_ms, timestamp_ms + self.before_ms

    def left_is_late(self, timestamp_ms: int, stream_time: int) -> bool:
        """Whether a left record's window plus grace has closed at ``stream_time`` (a left
        or outer join no longer waits for its partners; the join still pairs it with what
        the right buffer keeps)."""
        return timestamp_ms + self.after_ms + self.grace_ms < stream_time

    def right_is_late(self, timestamp_ms: int, stream_time: int) -> bool:
        """The same for a right record."""
        return timestamp_ms + self.before_ms + self.grace_ms < stream_time

    def left_close_time(self, timestamp_ms: int) -> int:
        """Stream time at which a left record at ``timestamp_ms`` without a partner is
        emitted unmatched (left/outer joins): its own window closes, ``after`` plus grace
        after it (Kafka Streams' rule)."""
        return timestamp_ms + self.after_ms + self.grace_ms + 1

    def right_close_time(self, timestamp_ms: int) -> int:
        """The same for a right record (outer joins): ``before`` plus grace after it."""
        return timestamp_ms + self.before_ms + self.grace_ms + 1

    @property
    def size_ms(self) -> int:
        """``before + after``: the width of the window of timestamps one record joins."""
        return self.before_ms + self.after_ms

    @property
    def retention_ms(self) -> int:
        """How long (in stream time) each side's buffer must keep a record: the window
        width plus grace."""
        return self.size_ms + self.grace_ms
