"""Window definitions and their arithmetic: which windows a record belongs to, when
a window closes and how long a store keeps it. Pure code: no I/O, no state.

All times are integer milliseconds since the epoch. Every window starts at or after
0: records need timestamps ``>= 0`` (the helpers raise ``ValueError`` otherwise).

=============  ======================  ==========================================
window         bounds                  closes when stream time reaches
=============  ======================  ==========================================
tumbling       ``[start, end)``        ``end + grace``
hopping        ``[start, end)``        ``end + grace``
sliding        ``[start, end]``        ``end + 1 + grace``
session        ``[start, end]``        ``end + 1 + gap + grace``
=============  ======================  ==========================================

The closing rule is ARCHITECTURE.md's "``[start, end)`` closes when stream time >=
end + grace"; a window with an inclusive end ``[start, end]`` is the half-open
``[start, end + 1)``, hence the ``+ 1``. A session can still grow by a record up to
``gap`` after its end, so it closes ``gap`` later (the same instants as Kafka Streams).

>>> from datetime import timedelta
>>> TumblingWindows(timedelta(minutes=1)).windows_for(90_000)
[(60000, 120000)]
>>> HoppingWindows(timedelta(minutes=1), advance=timedelta(seconds=30)).windows_for(90_000)
[(60000, 120000), (90000, 150000)]
"""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from datetime import timedelta
from typing import ClassVar, Dict, Iterable, List, Optional, Sequence, Set, Tuple, Union

from ..errors import ConfigError

__all__ = [
    "TumblingWindows", "HoppingWindows", "SlidingWindows", "SessionWindows",
    "SlidingWindowUpdate", "SessionMerge", "Windows",
]

Window = Tuple[int, int]
"""A window as ``(start_ms, end_ms)``; whether ``end`` is inclusive depends on the type."""

_ONE_MS = timedelta(milliseconds=1)


def _to_ms(owner: str, name: str, value: object, *, positive: bool) -> int:
    """``value`` (a timedelta) in whole milliseconds, or a ConfigError saying how to fix it."""
    if not isinstance(value, timedelta):
        hint = (f"; write {name}=timedelta(milliseconds={value})"
                if isinstance(value, int) and not isinstance(value, bool) else "")
        raise ConfigError(
            f"{owner} {name} must be a datetime.timedelta, got {type(value).__name__} ({value!r}){hint}")
    if value % _ONE_MS:
        raise ConfigError(
            f"{owner} {name} ({value}) has sub-millisecond precision: windows work in whole "
            "milliseconds, round it to a multiple of timedelta(milliseconds=1)")
    ms = value // _ONE_MS
    if positive and ms <= 0:
        raise ConfigError(f"{owner} {name} must be positive, got {value}: use at least 1 ms")
    if ms < 0:
        raise ConfigError(
            f"{owner} {name} must not be negative, got {value}: use timedelta(0) to accept no late records")
    return ms


def _check_timestamp(timestamp_ms: int) -> None:
    if timestamp_ms < 0:
        raise ValueError(
            f"timestamp {timestamp_ms} is negative: windows need event times >= 0 ms since the epoch; "
            "fix the timestamp extractor or filter such records out before windowing")


class _Windows:
    """Shared by every window type: grace, the closing rule."""

    _end_inclusive: ClassVar[bool] = False
    _grace_ms: int

    @property
    def grace_ms(self) -> int:
        """How long after a window's end it still accepts out-of-order records, in ms."""
        return self._grace_ms

    def is_closed(self, window_end_ms: int, stream_time_ms: int) -> bool:
        """Whether the window ending at ``window_end_ms`` is closed at ``stream_time_ms``.

        ``window_end_ms`` is the end as carried by ``Windowed.end``: exclusive for
        tumbling/hopping windows (closed once stream time >= end + grace), inclusive
        for sliding/session windows (closed once stream time >= end + 1 + grace).
        A record for a closed window is late.
        """
        return stream_time_ms >= self.close_time(window_end_ms)

    def close_time(self, window_end_ms: int) -> int:
        """The stream time at which the window ending at ``window_end_ms`` closes."""
        exclusive_end = window_end_ms + 1 if self._end_inclusive else window_end_ms
        return exclusive_end + self._grace_ms


def _aligned_windows(timestamp_ms: int, size_ms: int, advance_ms: int) -> List[Window]:
    _check_timestamp(timestamp_ms)
    # The earliest window holding t starts after t - size; starts are multiples of advance.
    first = max(0, timestamp_ms - size_ms + advance_ms)
    start = first - first % advance_ms
    windows = []
    while start <= timestamp_ms:
        windows.append((start, start + size_ms))
        start += advance_ms
    return windows


@dataclass(frozen=True)
class TumblingWindows(_Windows):
    """Fixed-size, non-overlapping windows ``[start, start + size)`` aligned to the epoch.

    Each record falls in exactly one window, the one with ``start = t - t % size``.

    >>> from datetime import timedelta
    >>> w = TumblingWindows(timedelta(seconds=10), grace=timedelta(seconds=2))
    >>> w.windows_for(10_000), w.is_closed(20_000, 21_999), w.is_closed(20_000, 22_000)
    ([(10000, 20000)], False, True)
    """

    size: timedelta
    grace: timedelta = timedelta(0)
    _size_ms: int = field(init=False, repr=False, compare=False)
    _grace_ms: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_size_ms", _to_ms("TumblingWindows", "size", self.size, positive=True))
        object.__setattr__(self, "_grace_ms", _to_ms("TumblingWindows", "grace", self.grace, positive=False))

    @property
    def size_ms(self) -> int:
        """``end - start`` of every window, in ms."""
        return self._size_ms

    @property
    def advance_ms(self) -> int:
        """The distance between consecutive window starts: the size."""
        return self._size_ms

    @property
    def retention_ms(self) -> int:
        """A window store must keep every window with ``start >= stream time - retention_ms``.

        ``size + grace``: a window is kept until it closes.
        """
        return self._size_ms + self._grace_ms

    def windows_for(self, timestamp_ms: int) -> List[Window]:
        """The one window ``(start, end)`` (end exclusive) holding ``timestamp_ms``."""
        return _aligned_windows(timestamp_ms, self._size_ms, self._size_ms)


@dataclass(frozen=True)
class HoppingWindows(_Windows):
    """Fixed-size windows ``[start, start + size)`` whose starts are ``advance`` apart.

    Starts are the multiples of ``advance`` (aligned to the epoch), so a record at
    ``t`` falls in every window with ``start <= t < start + size``: ``size / advance``
    windows when ``advance`` divides ``size``. Windows that would start before 0 do
    not exist, so records earlier than ``size - advance`` fall in fewer windows.
    ``advance == size`` is a tumbling window.

    >>> from datetime import timedelta
    >>> w = HoppingWindows(timedelta(seconds=10), advance=timedelta(seconds=5))
    >>> w.windows_for(3_000), w.windows_for(12_000)
    ([(0, 10000)], [(5000, 15000), (10000, 20000)])
    """

    size: timedelta
    advance: timedelta
    grace: timedelta = timedelta(0)
    _size_ms: int = field(init=False, repr=False, compare=False)
    _advance_ms: int = field(init=False, repr=False, compare=False)
    _grace_ms: int = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        size_ms = _to_ms("HoppingWindows", "size", self.size, positive=True)
        advance_ms = _to_ms("HoppingWindows", "advance", self.advance, positive=True)
        if advance_ms > size_ms:
            raise ConfigError(
                f"HoppingWindows advance ({self.advance}) must not exceed size ({self.size}): records "
                "between two windows would fall in none; use advance <= size "
                "(advance == size is TumblingWindows(size))")
        object.__setattr__(self, "_size_ms", size_ms)
        object.__setattr__(self, "_advance_ms", advance_ms)
        object.__setattr__(self, "_grace_ms", _to_ms("HoppingWindows", "grace", self.grace, positive=False))

    @property
    def size_ms(self) -> int:
        """``end - start`` of every window, in ms."""
        return self._size_ms

    @property
    def advance_ms(self) -> int:
        """The distance between consecutive window starts, in ms."""
        return self._advance_ms

    @property
    def retention_ms(self) -> int:
        """A window store must keep every window with ``start >= stream time - retention_ms``.

        ``size + grace``: a window is kept until it closes.
        """
        return self._size_ms + self._grace_ms

    def windows_for(self, timestamp_ms: int) -> List[Window]:
        """Every window ``(start, end)`` (end exclusive) holding ``timestamp_ms``, by start."""
        return _aligned_windows(timestamp_ms, self._size_ms, self._advance_ms)


@dataclass(frozen=True)
class SlidingWindowUpdate:
    """One window a new record touches (see :meth:`SlidingWindows.updates_for_stored`).

    ``created``: the window is not stored yet. ``base_start``: the stored window whose
    aggregate, as it was before this record, the result starts from: the window itself
    when it is updated; for a created window the one Kafka Streams copies, or ``None``
    when it starts empty. ``includes_record``: the new record is added to it (false only
    for the new record's own right window, a copy of a window holding the later records).
    """

    start: int
    end: int
    created: bool
    includes_record: bool
    base_start: Optional[int] = None

    @property
    def window(self) -> Window:
        return (self.start, self.end)


def _left_window(timestamp_ms: int, difference_ms: int) -> Window:
    # Windows never start before 0: as in Kafka Streams, every record earlier than the
    # time difference shares the window [0, difference] instead of [t - difference, t].
    if timestamp_ms < difference_ms:
        return (0, difference_ms)
    return (timestamp_ms - difference_ms, timestamp_ms)


def _sliding_windows(timestamps: Sequence[int], difference_ms: int) -> Set[Window]:
    """Every window that ``timestamps`` (sorted) define: the left window of each record,
    and the right window of each record with a later record within the difference."""
    windows = {_left_window(t, difference_ms) for t in timestamps}
    previous = None
    for t in timestamps:
        if previous is not None and previous < t <= previous + difference_ms:
            windows.add((previous + 1, previous + 1 + difference_ms))
        previous = t
    return windows


def _updated(start: int, difference_ms: int) -> SlidingWindowUpdate:
    return SlidingWindowUpdate(start, start + difference_ms, created=False, includes_record=True,
                               base_start=start)


@dataclass(frozen=True)
class SlidingWindows(_Windows):
    """Kafka Streams' sliding windows (KIP-450): windows defined by the records.

    A window is ``[start, end]`` with **both ends inclusive** and ``end - start ==
    time_difference``, so two records share a window iff their timestamps differ by
    at most ``time_difference``. For each record at ``t`` there is its left window
    ``[t - time_difference, t]`` and, when some record lies in ``(t, t + time_difference]``,
    its right window ``[t + 1, t + 1 + time_difference]``. There are no empty
    windows, and no windows starting before 0: records earlier than
    ``time_difference`` share the left window ``[0, time_difference]`` (Kafka's rule).

    A window closes when stream time >= ``end + 1 + grace``. A record is late (all
    its windows are closed) iff ``is_closed(t + time_difference, stream_time)``.
    Which windows a record creates, and from what, follows Kafka Streams 4.1 exactly
    (:meth:`updates_for_stored`): it knows earlier records only through the stored
    windows, so after a record met closed windows the windows can differ from the ideal.

    >>> from datetime import timedelta
    >>> w = SlidingWindows(timedelta(seconds=10))
    >>> [u.window for u in w.updates_for([20_000], 25_000)]   # previous record's right, then left
    [(20001, 30001), (15000, 25000)]
    """

    time_difference: timedelta
    grace: timedelta = timedelta(0)
    _difference_ms: int = field(init=False, repr=False, compare=False)
    _grace_ms: int = field(init=False, repr=False, compare=False)

    _end_inclusive: ClassVar[bool] = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "_difference_ms",
                           _to_ms("SlidingWindows", "time_difference", self.time_difference, positive=True))
        object.__setattr__(self, "_grace_ms", _to_ms("SlidingWindows", "grace", self.grace, positive=False))

    @property
    def time_difference_ms(self) -> int:
        return self._difference_ms

    @property
    def size_ms(self) -> int:
        """``end - start`` of every window: the time difference (a window spans one ms more)."""
        return self._difference_ms

    @property
    def retention_ms(self) -> int:
        """A window store must keep every window with ``start >= stream time - retention_ms``.

        ``2 * time_difference + grace + 1``: the earliest stored window that decides an
        on-time record's open windows is its previous record's, when only that record's
        right window is still open: that record lies at most ``time_difference + grace + 1``
        behind stream time, and its window starts ``time_difference`` before it. Kafka Streams' store keeps ``2 * time_difference +
        grace`` from the largest window start it wrote, which can be stream time itself: it
        can lose such a record.
        """
        return 2 * self._difference_ms + self._grace_ms + 1

    def read_range(self, timestamp_ms: int) -> Window:
        """``(first, last)``: the starts of the stored windows :meth:`updates_for_stored`
        reads for a record at ``timestamp_ms`` (both inclusive)."""
        return (max(0, timestamp_ms - 2 * self._difference_ms), timestamp_ms + 1)

    def updates_for(self, seen_ms: Sequence[int], timestamp_ms: int) -> List[SlidingWindowUpdate]:
        """:meth:`updates_for_stored` for a key whose store holds exactly the windows its
        earlier records ``seen_ms`` define (as it does while none came late).

        ``seen_ms``: their sorted timestamps (duplicates allowed). Only those in
        ``[t - 2 * time_difference - 1, t + time_difference + 1]`` matter; others are
        ignored, so passing more is fine.
        """
        _check_timestamp(timestamp_ms)
        difference = self._difference_ms
        low = bisect_left(seen_ms, timestamp_ms - 2 * difference - 1)
        high = bisect_right(seen_ms, timestamp_ms + difference + 1)
        near = list(seen_ms[low:high])
        if any(a > b for a, b in zip(near, near[1:])):
            raise ValueError("updates_for(): seen_ms must be sorted in ascending order")
        if near and near[0] < 0:
            raise ValueError(f"updates_for(): seen_ms holds a negative timestamp ({near[0]})")
        stored = [(start, max(t for t in near if start <= t <= end))
                  for start, end in _sliding_windows(near, difference)]
        return self.updates_for_stored(stored, timestamp_ms)

    def updates_for_stored(self, stored: Iterable[Tuple[int, int]],
                           timestamp_ms: int) -> List[SlidingWindowUpdate]:
        """The windows to update or create when a record at ``t = timestamp_ms`` arrives,
        in the order Kafka Streams 4.1 forwards them, by its rule.

        ``stored``: the key's stored windows as ``(start, latest)``, ``latest`` the largest
        record timestamp in the window. Only those starting in :meth:`read_range` count
        (Kafka reads no others); passing more is fine. Kafka Streams knows earlier records
        only through these windows. It reads them from the latest start down:

        1. each window holding ``t`` but ending after it is updated; the first one read
           (the latest start) is the *right source*: the records after ``t`` it can see;
        2. the left window ``[t - d, t]``, if stored, is updated; if its latest is ``t``
           (a record at ``t`` came before) nothing else happens, else that latest is the
           *previous record*;
        3. the first window ending before ``t`` stops the reading: its latest is the
           previous record (replacing the one of step 2) and its aggregate the *left source*.

        Then it creates, when not read in 1-3:

        4. the previous record's right window, if ``t`` falls in it: holding only the new
           record (Kafka assumes nothing else lies between the two);
        5. the left window, from the left source if the previous record lies in
           ``[t - d, t]``, else empty, plus the new record (once, when it is the window of 4);
        6. the right window ``[t + 1, t + 1 + d]`` if the right source's latest is after
           ``t``: a copy of the right source, without the new record.

        The previous record is thus the latest record of the latest window that ends
        before ``t`` (or of ``t``'s left window), not any window holding ``t``: a record
        whose left window was closed when it came has no window ending before a later
        record, so it is no one's previous record and gets no right window afterwards.

        An early record (``t < d``, whose left window is the shared ``[0, d]``) reads the
        windows starting in ``[0, t + 1]`` by ascending start: each starting in ``[1, t]``
        is updated, the latest of them is the right source (else ``[0, d]`` if its latest
        is after ``t``); the previous record is ``[0, d]``'s latest if before ``t``. Then:
        the right window (6), the previous record's right window (4), and ``[0, d]``
        updated or created last.

        Closed windows are included (skip those for which :meth:`is_closed` holds); the
        right window of an on-time record is never closed.
        """
        _check_timestamp(timestamp_ms)
        first, last = self.read_range(timestamp_ms)
        latest_by_start = {start: latest for start, latest in stored if first <= start <= last}
        if timestamp_ms < self._difference_ms:
            return self._early_updates(latest_by_start, timestamp_ms)
        return self._updates(latest_by_start, timestamp_ms)

    def _updates(self, latest_by_start: Dict[int, int], t: int) -> List[SlidingWindowUpdate]:
        difference = self._difference_ms
        updates: List[SlidingWindowUpdate] = []
        read: Set[int] = set()
        right_source = left_source = previous = None  # type: Optional[int]
        left_stored = right_stored = False
        for start in sorted(latest_by_start, reverse=True):
            read.add(start)
            end, latest = start + difference, latest_by_start[start]
            if start == t + 1:
                right_stored = True
            elif end > t:
                if right_source is None:
                    right_source = start
                updates.append(_updated(start, difference))
            elif end == t:
                left_stored = True
                updates.append(_updated(start, difference))
                if latest >= t:
                    return updates
                previous = latest
            else:
                left_source, previous = start, latest
                break
        previous_right = None
        if previous is not None and previous + 1 not in read and previous + 1 + difference >= t:
            previous_right = previous + 1
            updates.append(SlidingWindowUpdate(previous_right, previous_right + difference,
                                               created=True, includes_record=True))
        # Kafka writes the left window a second time when it is the previous record's right
        # window just created (the same value: that record is then more than d before t).
        if not left_stored and previous_right != t - difference:
            in_left = previous is not None and previous >= t - difference
            updates.append(SlidingWindowUpdate(t - difference, t, created=True, includes_record=True,
                                               base_start=left_source if in_left else None))
        if not right_stored and right_source is not None and latest_by_start[right_source] > t:
            updates.append(SlidingWindowUpdate(t + 1, t + 1 + difference, created=True, includes_record=False,
                                               base_start=right_source))
        return updates

    def _early_updates(self, latest_by_start: Dict[int, int], t: int) -> List[SlidingWindowUpdate]:
        difference = self._difference_ms
        updates: List[SlidingWindowUpdate] = []
        right_source = previous = None  # type: Optional[int]
        shared = latest_by_start.get(0)
        if shared is not None and shared < t:
            previous = shared
        for start in sorted(latest_by_start):
            if 0 < start <= t:
                right_source = start
                updates.append(_updated(start, difference))
        if right_source is None and shared is not None and shared > t:
            right_source = 0
        if t + 1 not in latest_by_start and right_source is not None and latest_by_start[right_source] > t:
            updates.append(SlidingWindowUpdate(t + 1, t + 1 + difference, created=True, includes_record=False,
                                               base_start=right_source))
        if previous is not None and previous + 1 not in latest_by_start:
            updates.append(SlidingWindowUpdate(previous + 1, previous + 1 + difference,
                                               created=True, includes_record=True))
        if shared is None:
            updates.append(SlidingWindowUpdate(0, difference, created=True, includes_record=True))
        else:
            updates.append(_updated(0, difference))
        return updates


@dataclass(frozen=True)
class SessionMerge:
    """The result of :meth:`SessionWindows.merge`: the session ``[start, end]``
    (inclusive) that now holds the new record.

    ``replaced``: every existing session folded into it, by start; their aggregates
    combine into the new session's. ``removed`` lists those whose bounds changed
    (delete them and forward a tombstone); one equal to ``(start, end)`` is updated
    in place.
    """

    start: int
    end: int
    replaced: Tuple[Window, ...]

    @property
    def window(self) -> Window:
        return (self.start, self.end)

    @property
    def removed(self) -> Tuple[Window, ...]:
        return tuple(s for s in self.replaced if s != (self.start, self.end))


@dataclass(frozen=True)
class SessionWindows(_Windows):
    """Sessions: periods of activity of a key separated by gaps longer than ``inactivity_gap``.

    A session is ``[first record, last record]`` with **both ends inclusive**. A
    record at ``t`` merges every session overlapping ``[t - gap, t + gap]`` (ending
    at or after ``t - gap`` and starting at or before ``t + gap``) into one with
    itself, if it is still open. A session can still grow while a record within the gap
    of its end can come on time, so it closes when stream time passes ``end + gap + grace``
    (``>= end + gap + grace + 1``): until then a record may join it; after that it is final
    (a record within its gap starts a new session beside it, as in Kafka Streams) and a
    suppression emits its final result.

    >>> from datetime import timedelta
    >>> SessionWindows(timedelta(seconds=5)).merge([(0, 1_000), (8_000, 9_000)], 4_000).window
    (0, 9000)
    """

    inactivity_gap: timedelta
    grace: timedelta = timedelta(0)
    _gap_ms: int = field(init=False, repr=False, compare=False)
    _grace_ms: int = field(init=False, repr=False, compare=False)

    _end_inclusive: ClassVar[bool] = True

    def __post_init__(self) -> None:
        object.__setattr__(self, "_gap_ms",
                           _to_ms("SessionWindows", "inactivity_gap", self.inactivity_gap, positive=True))
        object.__setattr__(self, "_grace_ms", _to_ms("SessionWindows", "grace", self.grace, positive=False))

    @property
    def inactivity_gap_ms(self) -> int:
        return self._gap_ms

    @property
    def size_ms(self) -> int:
        """Sessions have no fixed size: this is the inactivity gap, the time by which
        one record can extend a session (and what retention adds to grace)."""
        return self._gap_ms

    @property
    def retention_ms(self) -> int:
        """How long (from a session's end, in stream time) a session store keeps sessions
        by default: ``2 * inactivity_gap + grace``. Merging needs only the open ones
        (``end + gap + grace`` not passed); closed ones stay queryable a while longer."""
        return 2 * self._gap_ms + self._grace_ms

    def close_time(self, window_end_ms: int) -> int:
        """The stream time at which the session ending at ``window_end_ms`` closes:
        ``end + gap + grace + 1``."""
        return window_end_ms + self._gap_ms + self._grace_ms + 1

    def merge(self, sessions: Iterable[Window], timestamp_ms: int) -> SessionMerge:
        """Merge a record at ``timestamp_ms`` with the key's existing ``sessions``.

        ``sessions``: ``(start, end)`` pairs, inclusive. Those overlapping
        ``[t - gap, t + gap]`` merge with the record; others are ignored, so passing
        more is fine. With none, the record starts a session ``[t, t]``.
        """
        _check_timestamp(timestamp_ms)
        gap = self._gap_ms
        start = end = timestamp_ms
        replaced = []
        for session in sessions:
            s_start, s_end = session
            if not 0 <= s_start <= s_end:
                raise ValueError(f"merge(): session {session!r} is not (start, end) with 0 <= start <= end")
            if s_end >= timestamp_ms - gap and s_start <= timestamp_ms + gap:
                replaced.append((s_start, s_end))
                start = min(start, s_start)
                end = max(end, s_end)
        return SessionMerge(start, end, tuple(sorted(replaced)))


Windows = Union[TumblingWindows, HoppingWindows, SlidingWindows, SessionWindows]
"""Any window definition."""
