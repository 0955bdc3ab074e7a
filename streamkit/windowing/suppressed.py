"""Suppression: how a table's updates are held back before they are forwarded.

>>> from datetime import timedelta
>>> Suppressed.until_window_closes().mode
'until_window_closes'
>>> Suppressed.until_time_limit(timedelta(seconds=30)).time_limit_ms
30000
"""
from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta
from typing import Optional

from ..errors import ConfigError

__all__ = ["Suppressed"]

UNTIL_WINDOW_CLOSES = "until_window_closes"
UNTIL_TIME_LIMIT = "until_time_limit"


def _check_limit(name: str, value: Optional[int]) -> Optional[int]:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"Suppressed {name} must be a positive int or None (unbounded), got {value!r}")
    return value


@dataclass(frozen=True)
class Suppressed:
    """A suppression policy for ``Table.suppress``. Build it with one of the two
    constructors, not directly.

    - :meth:`until_window_closes`: a windowed table forwards each window once, its
      final value, when the window closes (stream time >= end + grace). The buffer
      is strict: when it would exceed ``max_records``/``max_bytes`` the task fails
      rather than emit a result that is not final.
    - :meth:`until_time_limit`: forward a key's latest value once stream time reaches
      the timestamp of its first held-back update plus ``time_limit`` (rate limiting,
      as Kafka Streams: an update already that far behind stream time goes out at once). When
      the buffer is full, the oldest keys are forwarded early.
    """

    mode: str
    time_limit_ms: Optional[int] = None
    max_records: Optional[int] = None
    max_bytes: Optional[int] = None

    @staticmethod
    def until_window_closes(max_records: Optional[int] = None, max_bytes: Optional[int] = None) -> "Suppressed":
        """Only each window's final result, when it closes."""
        return Suppressed(UNTIL_WINDOW_CLOSES, None, _check_limit("max_records", max_records),
                          _check_limit("max_bytes", max_bytes))

    @staticmethod
    def until_time_limit(time_limit: timedelta, max_records: Optional[int] = None,
                         max_bytes: Optional[int] = None) -> "Suppressed":
        """At most one update per key per ``time_limit`` of stream time (its latest value)."""
        if not isinstance(time_limit, timedelta):
            raise ConfigError(f"Suppressed.until_time_limit needs a datetime.timedelta, got {time_limit!r}")
        if time_limit < timedelta(0):
            raise ConfigError(f"Suppressed.until_time_limit: time_limit must not be negative, got {time_limit}")
        return Suppressed(UNTIL_TIME_LIMIT, time_limit // timedelta(milliseconds=1),
                          _check_limit("max_records", max_records), _check_limit("max_bytes", max_bytes))

    @property
    def final_results(self) -> bool:
        return self.mode == UNTIL_WINDOW_CLOSES
