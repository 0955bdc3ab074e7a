"""``CollectingSinkWriter``: stands in for an external sink's writer where records must not
leave the process (the test driver by default, the Spark replay always): it keeps what the
task wrote, in order, for the caller to read."""
from __future__ import annotations

from typing import Any, List

from .base import SinkRecord


class CollectingSinkWriter:
    """Has a :class:`~.base.SinkWriter`'s task-facing methods; delivers nothing anywhere."""

    def __init__(self) -> None:
        self.records: List[SinkRecord] = []
        """Every record written, in order (a commit keeps them; nothing is delivered)."""

    def write(self, record: SinkRecord) -> None:
        self.records.append(record)

    def start(self) -> None:
        pass

    def commit(self, positions: Any) -> None:
        pass

    def discard(self) -> int:
        return 0

    def close(self) -> None:
        pass
