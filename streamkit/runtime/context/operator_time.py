"""Stream time per stateful operator, as Kafka Streams keeps it.

A windowed aggregation, a suppression and a stream-stream join each track the
largest timestamp among the records that *reach them* (Kafka Streams'
``observedStreamTime``; a join's two sides share one). A record dropped or
filtered upstream, or routed to another branch of the task, does not move it, so
it cannot make the operator's own records late or close its windows early.

The task's stream time (the largest timestamp the task has read) still drives
stream-time punctuations and the progress a task reports downstream.

An operator's time is written into its stores at each commit (next to the data,
in their changelogs) and resumed from them after a restart. An idle advance of
stream time (``close_idle_windows_after``) moves every operator's time by the same
wall-clock interval.
"""
from __future__ import annotations

from typing import Any, Callable, List


class ObservedStreamTime:
    """One operator's stream time: ``time`` is -1 until a record reaches it.

    Hot paths update ``time`` inline (``if t > clock.time: clock.time = t``)."""

    __slots__ = ("operator", "time", "stores", "listeners")

    def __init__(self, operator: str) -> None:
        self.operator = operator
        self.time = -1
        self.stores: List[Any] = []
        """The windowed stores whose expiry follows this time, and that record it."""
        self.listeners: List[Callable[[int], None]] = []
        """Called with the new time after an idle advance (suppression evicts then)."""

    def bind(self, store: Any) -> None:
        """``store`` hides what it holds beyond retention by this time, and records it."""
        store.stream_time_source = self._current
        self.stores.append(store)

    def _current(self) -> int:
        return self.time

    def recover(self) -> None:
        """Resume at the time the (restored) stores recorded, if later."""
        for store in self.stores:
            recorded = store.stream_time()
            if recorded > self.time:
                self.time = recorded

    def advance_by(self, delta_ms: int) -> None:
        """Move the time on by ``delta_ms`` (an idle advance); nothing before a first record."""
        if self.time < 0 or delta_ms <= 0:
            return
        self.time += delta_ms
        for listener in self.listeners:
            listener(self.time)
