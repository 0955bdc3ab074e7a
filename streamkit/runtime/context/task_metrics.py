"""Per-task counters, read by the worker's log lines, its metrics endpoint and the test driver."""
from __future__ import annotations

from dataclasses import dataclass, fields


@dataclass
class TaskMetrics:
    records_processed: int = 0
    records_skipped: int = 0
    """Records dropped by the log_and_skip handler."""
    records_dead_lettered: int = 0
    null_key_records_dropped: int = 0
    """Records with a ``None`` key dropped before a key-based aggregation."""
    punctuations: int = 0
    late_records_dropped: int = 0
    """Records whose windows had all closed when they arrived (see late_records_topic)."""
    idle_stream_time_advances: int = 0
    """Times stream time was advanced by the wall clock because the task's input was idle."""
    records_lost_to_retention: int = 0
    """Input records deleted (retention, delete_records, a reset below the log start)
    before the task read them (see Consumer.take_lost)."""
    processing_seconds: float = 0.0
    """Wall seconds the worker spent running this task's records through its topology
    (with records_processed: the mean processing time per record)."""

    def as_dict(self) -> dict:
        return {f.name: getattr(self, f.name) for f in fields(self)}

    def add(self, other: "TaskMetrics") -> None:
        for f in fields(self):
            setattr(self, f.name, getattr(self, f.name) + getattr(other, f.name))
