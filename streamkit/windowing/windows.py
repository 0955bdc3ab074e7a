"""Window definitions and their arithmetic: which windows a record belongs to, when
a window closes and how long a store keeps it. Pure code: no I/O, no state. This module
holds what every window type shares and the aligned types (tumbling, hopping);
``sliding_windows`` and ``session_windows`` hold the record-driven ones.

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

from dataclasses import dataclass, field
from datetime import timedelta
from typing import ClassVar, List, Tuple

from ..errors import ConfigError

__all__ = ["TumblingWindows", "HoppingWindows"]

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
