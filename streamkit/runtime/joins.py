"""Compiled joins. Stream-table: each stream record reads the table's row for its key
as of the moment it is processed (pending writes of the interval included)."""
from __future__ import annotations

from typing import Any, Callable, Optional

from ..topology import nodes as ir
from .compiler import CompileEnv, Downstream, user_error


def _table_reader(node: ir.StreamTableJoinNode, store: Any) -> Callable[[Any], Optional[Any]]:
    """``read(key)``: the table's value for ``key`` after its filter/map_values steps."""
    get, name = store.get, node.name
    if not node.table_view:
        return get
    steps = node.table_view

    def read(key: Any) -> Optional[Any]:
        value = get(key)
        for kind, fn, negate in steps:
            if value is None:
                return None
            try:
                if kind == "filter":
                    if bool(fn(key, value)) == negate:
                        return None
                else:
                    value = fn(value)
            except Exception as exc:
                raise user_error(name, exc) from exc
        return value
    return read


def compile_stream_table_join(node: ir.StreamTableJoinNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    task = env.task
    read = _table_reader(node, task.stores[node.store])
    joiner, left, name = node.joiner, node.left, node.name
    metrics = task.metrics

    def stream_table_join(key: Any, value: Any, timestamp: int) -> None:
        if key is None:
            metrics.null_key_records_dropped += 1
            return
        if value is None:
            return  # as Kafka Streams: a null stream value joins nothing
        row = read(key)
        if row is None and not left:
            return
        try:
            joined = joiner(value, row)
        except Exception as exc:
            raise user_error(name, exc) from exc
        downstream(key, joined, timestamp)
    return stream_table_join
