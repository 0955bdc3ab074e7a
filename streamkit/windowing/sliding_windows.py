"""Sliding windows (``[start, end]``, end inclusive, made by records, as in Kafka
Streams): which windows a new record creates or updates, given the windows already
stored. Pure code: no I/O, no state. Shared rules: :mod:`.windows`."""
from __future__ import annotations

from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from datetime import timedelta
from typing import ClassVar, Dict, Iterable, List, Optional, Sequence, Set, Tuple

from .windows import Window, _check_timestamp, _to_ms, _Windows

__all__ = ["SlidingWindows", "SlidingWindowUpdate"]


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
