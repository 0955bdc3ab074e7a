"""Compiled suppression: table updates held in a changelogged buffer until due.

``until_window_closes``: an update of window W is due when W closes (the same
instant at which the windowed aggregation starts dropping W's records as late),
so each window is forwarded once with its final value. ``until_time_limit``:
a key's first held-back update is due when stream time reaches its timestamp plus
``time_limit``; later updates replace its value, not its due time.

Due entries are forwarded when the suppression's own stream time reaches them: the
largest timestamp among the updates that reached it (as Kafka Streams'
``observedStreamTime``; see :mod:`.operator_time`), or an idle advance of it. Records
dropped upstream (late, None keys, filtered) and other branches of the task do not
move it.
"""
from __future__ import annotations

import math
from typing import Any, Optional

from ...errors import SuppressionBufferFullError
from ...topology import nodes as ir
from .base import CompileEnv, Downstream, user_error


def compile_suppress(node: ir.SuppressNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    task = env.task
    buffer = task.stores[node.store]
    suppressed = node.suppressed
    key_serialize, key_deserialize = buffer.key_serde.serialize, buffer.key_serde.deserialize
    value_serialize, value_deserialize = buffer.value_serde.serialize, buffer.value_serde.deserialize
    final, limit_ms = suppressed.final_results, suppressed.time_limit_ms
    max_records = suppressed.max_records or math.inf
    max_bytes = suppressed.max_bytes or math.inf
    close_time = node.windows.close_time if final else None
    name = node.name
    Change = ir.Change

    def emit(key_bytes: bytes, new: Optional[bytes], old: Optional[bytes], timestamp: int) -> None:
        new_value = None if new is None else value_deserialize(new)
        old_value = None if old is None else value_deserialize(old)
        downstream(key_deserialize(key_bytes), Change(new_value, old_value), timestamp)

    holds, next_due = buffer.holds, buffer.next_due
    clock = task.observed_time(name, (node.store,))
    clock.listeners.append(lambda stream_time: buffer.evict_due(stream_time, emit))

    def suppress(key: Any, change: ir.Change, timestamp: int) -> None:
        if timestamp > clock.time:
            clock.time = timestamp
        stream_time = clock.time
        # until_time_limit measures the limit from the first held update's own timestamp (as
        # Kafka Streams does): an update already that far behind stream time goes out at once.
        due = close_time(key.end) if final else timestamp + limit_ms  # type: ignore[misc]
        if final and due <= stream_time:
            # An update of a window already closed here (the DSL's aggregations drop late
            # records and never merge a closed session, so only other upstreams): what is due
            # goes out first, then this update.
            buffer.evict_due(stream_time, emit)
            downstream(key, change, timestamp)
            return
        try:
            key_bytes = key_serialize(key)
            new = None if change.new is None else value_serialize(change.new)
            # A held key keeps the old value its first held update carried: this one's is not needed.
            old = None if change.old is None or holds(key_bytes) else value_serialize(change.old)
        except Exception as exc:
            raise user_error(name, exc) from exc
        buffer.put(key_bytes, due, timestamp, new, old)
        if next_due() <= stream_time:
            buffer.evict_due(stream_time, emit)  # what this record closed is out before the bound counts
        while buffer.count > max_records or buffer.size_bytes > max_bytes:
            if final:
                raise SuppressionBufferFullError(
                    f"suppression '{name}' (task {task.task_id}) holds {buffer.count} window results "
                    f"({buffer.size_bytes} bytes), over its bound (max_records={suppressed.max_records}, "
                    f"max_bytes={suppressed.max_bytes}): until_window_closes never emits early; raise the "
                    "bound, or shorten the windows or their grace")
            buffer.evict_oldest(emit)
    return suppress
