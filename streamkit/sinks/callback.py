"""``Callback``: hand records to a function, for destinations without a sink of their own."""
from __future__ import annotations

from typing import Callable, Sequence

from ..errors import ConfigError
from .base import Positions, Sink, SinkRecord, SinkTask, SinkWriter


class Callback(Sink):
    """Call ``fn(record)`` for every record (a :class:`SinkRecord`), in order, at each commit.

    At least once: a crash after ``fn`` ran but before the offsets were committed calls
    it again for those records on restart, so ``fn`` should be idempotent. To have a
    call retried with backoff, raise ``sk.TransientSinkError`` (or return normally);
    any other exception stops the worker with the records' origin in the error.
    """

    external = False  # the function runs in this process: the test driver calls it too

    def __init__(self, fn: Callable[[SinkRecord], object], *, name: str = "") -> None:
        if not callable(fn):
            raise ConfigError(f"Callback sink: fn must be callable, got {fn!r}")
        self.fn = fn
        self.label = name or getattr(fn, "__qualname__", repr(fn))

    def open(self, task: SinkTask) -> SinkWriter:
        return CallbackWriter(self, task)

    def describe(self) -> str:
        return f"Callback({self.label})"


class CallbackWriter(SinkWriter):
    """Delivers in order; a retry resumes at the record that failed."""

    sink: Callback

    def __init__(self, sink: Callback, task: SinkTask) -> None:
        super().__init__(sink, task)
        self._done = 0

    def deliver(self, records: Sequence[SinkRecord], positions: Positions) -> None:
        fn = self.sink.fn
        while self._done < len(records):
            fn(records[self._done])
            self._done += 1
        self._done = 0

    def discard(self) -> int:
        self._done = 0
        return super().discard()
