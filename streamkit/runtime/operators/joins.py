"""Compiled joins. Stream-table: each stream record reads the table's row for its key
as of the moment it is processed (pending writes of the interval included)."""
from __future__ import annotations

from typing import Any, Callable, Optional, Tuple

from ...errors import StreamkitError
from ...topology import nodes as ir
from .base import CompileEnv, Downstream, user_error


def table_reader(name: str, store: Any, steps: Tuple[Tuple[str, Callable[..., Any], bool], ...]
                 ) -> Callable[[Any], Optional[Any]]:
    """``read(key)``: a table's value for ``key``, from its store through its stateless
    steps (filter, map_values); ``name`` is the node reading, for errors."""
    get = store.get
    if not steps:
        return get

    def read(key: Any) -> Optional[Any]:
        return apply_view(name, steps, key, get(key))
    return read


def apply_view(name: str, steps: Tuple[Tuple[str, Callable[..., Any], bool], ...], key: Any, value: Any) -> Any:
    """``value`` through a table's stateless steps (``None`` once a filter drops it)."""
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


def compile_stream_table_join(node: ir.StreamTableJoinNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    task = env.task
    read = table_reader(node.name, task.stores[node.store], node.table_view)
    joiner, left, name = node.joiner, node.left, node.name

    def stream_table_join(key: Any, value: Any, timestamp: int) -> None:
        if key is None:
            if left and value is not None:  # as Kafka Streams 3.7+ (KIP-962): joined with no row
                try:
                    joined = joiner(value, None)
                except Exception as exc:
                    raise user_error(name, exc) from exc
                downstream(None, joined, timestamp)
            else:
                env.task.drop_null_key(node.name)
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


def compile_global_table_join(node: ir.GlobalTableJoinNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    """Each record reads the global table's row for ``key_selector(key, value)``; the
    record keeps its key."""
    task = env.task
    store = task.global_stores.get(node.global_store)
    if store is None:
        raise StreamkitError(f"{node.name}: global table '{node.global_store}' is not loaded on this worker")
    get, selector, joiner, left, name = store.get, node.key_selector, node.joiner, node.left, node.name

    def global_table_join(key: Any, value: Any, timestamp: int) -> None:
        if value is None:
            return
        try:
            table_key = selector(key, value)
        except Exception as exc:
            raise user_error(name, exc) from exc
        row = None if table_key is None else get(table_key)
        if row is None and not left:
            return
        try:
            joined = joiner(value, row)
        except Exception as exc:
            raise user_error(name, exc) from exc
        downstream(key, joined, timestamp)
    return global_table_join
