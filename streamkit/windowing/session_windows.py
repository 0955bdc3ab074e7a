"""Session windows (``[start, end]``, end inclusive, grown by records until a gap of
inactivity): how a record merges the sessions around it. Pure code: no I/O, no state.
Shared rules: :mod:`.windows`."""
from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta
from typing import ClassVar, Iterable, Tuple

from .windows import Window, _check_timestamp, _to_ms, _Windows

__all__ = ["SessionWindows", "SessionMerge"]


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
