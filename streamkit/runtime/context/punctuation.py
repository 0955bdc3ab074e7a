"""Scheduled callbacks of Processor-API functions, by stream time or wall clock."""
from __future__ import annotations

import math
from typing import Callable, List, Protocol

from ...processor import Cancellable, Punctuation


class Schedule(Cancellable):
    """One ``ctx.schedule(...)`` registration."""

    def __init__(self, owner: str, interval_ms: int, kind: Punctuation, callback: Callable[[int], None],
                 run: Callable[["Schedule", int], None], next_at: float) -> None:
        self.owner = owner
        self.interval_ms = interval_ms
        self.kind = kind
        self.callback = callback
        self.run = run
        self.next_at = next_at
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True

    def identity(self) -> tuple:
        code = getattr(self.callback, "__code__", self.callback)
        return (self.owner, code, self.interval_ms, self.kind)


class StreamTimeWatcher(Protocol):
    """Something that acts when stream time reaches a point (a suppression's next due
    result): the task calls ``on_stream_time`` once stream time >= ``next_due()``."""

    def next_due(self) -> float: ...

    def on_stream_time(self, stream_time: int) -> None: ...


class PunctuationQueue:
    """The schedules of one task, fired in order of due time.

    Stream-time schedules first fire on the first record after they are made, then
    each ``interval`` of stream time; wall-clock ones each ``interval`` from when
    they are made. Missed intervals fire once, not once per interval (as in
    Kafka Streams).
    """

    def __init__(self) -> None:
        self.schedules: List[Schedule] = []
        self.watchers: List[StreamTimeWatcher] = []
        self.next_stream_time: float = math.inf
        """When the task must next call ``fire(STREAM_TIME, ...)``: the earliest due schedule or watcher."""

    def watch(self, watcher: StreamTimeWatcher) -> None:
        """Call ``watcher`` as stream time reaches its due times; it is first asked on the
        next record (its state may still be restoring now)."""
        self.watchers.append(watcher)
        self.next_stream_time = -math.inf

    def due_at(self, stream_time: float) -> None:
        """A watcher's next due time moved earlier."""
        if stream_time < self.next_stream_time:
            self.next_stream_time = stream_time

    def add(self, schedule: Schedule) -> Schedule:
        for existing in self.schedules:
            if not existing.cancelled and existing.identity() == schedule.identity():
                return existing
        self.schedules.append(schedule)
        self._refresh()
        return schedule

    def _refresh(self) -> None:
        self.schedules = [s for s in self.schedules if not s.cancelled]
        due = [s.next_at for s in self.schedules if s.kind is Punctuation.STREAM_TIME]
        due.extend(watcher.next_due() for watcher in self.watchers)
        self.next_stream_time = min(due, default=math.inf)

    def fire(self, kind: Punctuation, now: int) -> int:
        """Run every schedule of ``kind`` due at ``now``; return how many ran."""
        fired = 0
        for schedule in list(self.schedules):
            if schedule.kind is kind and not schedule.cancelled and now >= schedule.next_at:
                first = schedule.next_at == -math.inf
                schedule.run(schedule, now)
                fired += 1
                if first:
                    schedule.next_at = now + schedule.interval_ms
                else:
                    missed = (now - schedule.next_at) // schedule.interval_ms
                    schedule.next_at += (missed + 1) * schedule.interval_ms
        if kind is Punctuation.STREAM_TIME:
            for watcher in self.watchers:
                if watcher.next_due() <= now:
                    watcher.on_stream_time(now)
        self._refresh()
        return fired
