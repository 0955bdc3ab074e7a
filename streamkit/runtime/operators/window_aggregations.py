"""Compiled windowed aggregations: tumbling/hopping, sliding and session windows.

Each keeps its windows in a window (or session) store keyed by the grouping key's
bytes and the window, and forwards every update as ``Change(new, old)`` keyed by
``Windowed(key, start, end)`` (once per commit per window with caching on, unless
a suppression follows: the suppression buffer is the cache then). A window
accepts records until it closes (``Windows.close_time``: its end plus grace; for a
session, its end plus gap plus grace); a record with no open window left is late
(see :mod:`late_records`).
"""
from __future__ import annotations

from typing import Any, Callable

from ...topology import nodes as ir
from ...windowing.windowed_keys import windowed_of_valid
from .base import CompileEnv, Downstream, new_values_target, user_error
from .late_records import LateRecords

Step = Callable[[Any, Any, Any], Any]


def _forwards_each(node: ir.Node, store: Any, downstream: Downstream, env: CompileEnv) -> bool:
    """Whether to forward every update (caching off, or a suppression follows); else the
    store forwards each changed window once per commit, when it is flushed."""
    if not env.task.caching or env.feeds(node.name, ir.SuppressNode):
        return True
    store.on_flush(lambda windowed, new, old, timestamp: downstream(windowed, ir.Change(new, old), timestamp))
    return False


def _add_step(node: ir.WindowAggregationNode) -> Step:
    """``step(key, value, aggregate_or_None) -> new aggregate`` for one record: the node's
    aggregation's ``add``, its exceptions named by node."""
    name, add = node.name, node.aggregation.add

    def add_step(key: Any, value: Any, old: Any) -> Any:
        try:
            return add(key, value, old)
        except Exception as exc:
            raise user_error(name, exc) from exc
    return add_step


def _serialize_key(store: Any, name: str) -> Callable[[Any], bytes]:
    serialize = store.serialize_key

    def key_bytes(key: Any) -> bytes:
        try:
            return serialize(key)
        except Exception as exc:
            raise user_error(name, exc) from exc
    return key_bytes


def compile_windowed_aggregate(node: ir.WindowedAggregateNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    from ...windowing import SlidingWindows
    if isinstance(node.windows, SlidingWindows):
        return _compile_sliding(node, downstream, env)
    return _compile_fixed(node, downstream, env)


def _compile_fixed(node: ir.WindowedAggregateNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    """Tumbling and hopping windows: a record updates each open window holding it."""
    task = env.task
    store = task.stores[node.store]
    forward_each = _forwards_each(node, store, downstream, env)
    forward_new = new_values_target(downstream) if forward_each else None
    key_bytes = _serialize_key(store, node.name)
    serialize_key, name = store.serialize_key, node.name
    if store.with_first_timestamp:  # only sliding windows keep first timestamps
        raise ValueError(f"{node.name}: store {node.store!r} keeps first timestamps; tumbling and "
                         "hopping windows use a plain window store")
    window_key, get, put = store.open_window_key, store.get_open, store.put_open
    step, add = _add_step(node), node.aggregation.add
    windows = node.windows
    size, advance, grace = windows.size_ms, windows.advance_ms, windows.grace_ms
    windows_for = windows.windows_for
    clock = task.observed_time(node.name, (node.store,))
    late = LateRecords(task, node.name, node.late_records_topic, clock)
    Change = ir.Change

    def update(key: Any, kb: bytes, value: Any, timestamp: int, start: int, end: int) -> None:
        stored_key = window_key(kb, start)  # the window is open: within retention
        prior = get(stored_key)
        if prior is None:
            old = None
            result_time = timestamp
        else:
            old, result_time = prior
            if timestamp > result_time:
                result_time = timestamp
        new = step(key, value, old)
        if new is None:  # a reduce or aggregate may return None: the window is deleted
            store.put_serialized(kb, start, None, result_time)
        else:
            put(stored_key, new, result_time)
        if forward_new is not None:
            forward_new(windowed_of_valid(key, start, end), new, result_time)
        elif forward_each:
            downstream(windowed_of_valid(key, start, end), Change(new, old), result_time)

    def windowed_aggregate(key: Any, value: Any, timestamp: int) -> None:
        if key is None:  # a None value counts and is aggregated, as in Kafka Streams
            env.task.drop_null_key(node.name)
            return
        if timestamp > clock.time:
            clock.time = timestamp
        open_after = clock.time - grace  # a window ending at or before this is closed
        if advance == size:  # tumbling: one window, no list
            start = timestamp - timestamp % size if timestamp >= 0 else windows_for(timestamp)[0][0]
            end = start + size
            if end <= open_after:
                late.drop(key, timestamp, f"[{start},{end})")
                return
            # update() inlined: this path runs once per record of a tumbling aggregation
            try:
                kb = serialize_key(key)
            except Exception as exc:
                raise user_error(name, exc) from exc
            stored_key = window_key(kb, start)
            prior = get(stored_key)
            if prior is None:
                old, result_time = None, timestamp
            else:
                old, result_time = prior
                if timestamp > result_time:
                    result_time = timestamp
            try:
                new = add(key, value, old)
            except Exception as exc:
                raise user_error(name, exc) from exc
            if new is None:
                store.put_serialized(kb, start, None, result_time)
            else:
                put(stored_key, new, result_time)
            if forward_new is not None:
                forward_new(windowed_of_valid(key, start, end), new, result_time)
            elif forward_each:
                downstream(windowed_of_valid(key, start, end), Change(new, old), result_time)
            return
        kb = None
        for start, end in windows_for(timestamp):
            if end <= open_after:
                continue
            if kb is None:
                kb = key_bytes(key)
            update(key, kb, value, timestamp, start, end)
        if kb is None:
            late.drop(key, timestamp, f"ending at or before {open_after}")
    return windowed_aggregate


def _compile_sliding(node: ir.WindowedAggregateNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    """Sliding windows (KIP-450): windows ``[start, start + d]`` defined by the records.

    Which windows a record updates and creates, and which stored window's aggregate a
    created one starts from, is Kafka Streams' rule (``SlidingWindows.updates_for_stored``),
    so no record needs to be kept. The store keeps, per window, the latest and the
    earliest record time.
    """
    task = env.task
    store = task.stores[node.store]
    forward_each = _forwards_each(node, store, downstream, env)
    key_bytes = _serialize_key(store, node.name)
    scan, put = store.scan_serialized, store.put_serialized
    step = _add_step(node)
    windows = node.windows
    difference = windows.time_difference_ms
    updates_for_stored, read_range, is_closed = windows.updates_for_stored, windows.read_range, windows.is_closed
    clock = task.observed_time(node.name, (node.store,))
    late = LateRecords(task, node.name, node.late_records_topic, clock)
    Change = ir.Change

    def sliding_aggregate(key: Any, value: Any, timestamp: int) -> None:
        if key is None:
            env.task.drop_null_key(node.name)
            return
        if value is None:
            return  # as Kafka Streams: dropped before it counts towards stream time
        if timestamp > clock.time:
            clock.time = timestamp
        stream_time = clock.time
        if is_closed(timestamp + difference, stream_time):
            late.drop(key, timestamp, f"[{max(0, timestamp - difference)},{timestamp + difference}]")
            return
        kb = key_bytes(key)
        stored = {start: (v, latest, earliest) for start, v, latest, earliest in scan(kb, *read_range(timestamp))}
        for update in updates_for_stored([(start, entry[1]) for start, entry in stored.items()], timestamp):
            start, end = update.start, update.end
            if is_closed(end, stream_time):
                continue
            if update.base_start is None:
                base, latest, earliest = None, -1, timestamp
            else:  # the stored aggregate as it was before this record
                base, latest, earliest = stored[update.base_start]
            old = None if update.created else base
            if update.includes_record:
                new = step(key, value, base)
                latest = max(latest, timestamp)
                earliest = min(earliest, timestamp)
            else:
                new = base
                if new is None:
                    continue  # a right window always holds a later record; nothing to create otherwise
            put(kb, start, new, latest, earliest)
            if forward_each:
                downstream(windowed_of_valid(key, start, end), Change(new, old), latest)
    return sliding_aggregate


def compile_session_aggregate(node: ir.SessionAggregateNode, downstream: Downstream, env: CompileEnv) -> Downstream:
    """Sessions: a record merges every session within the inactivity gap that is still open
    into one; each merged-away session is deleted and retracted downstream (``Change(None,
    old)``). A closed session (stream time past ``end + gap + grace``) is final: a record
    within its gap starts a new session beside it, as in Kafka Streams."""
    task = env.task
    store = task.stores[node.store]
    forward_each = _forwards_each(node, store, downstream, env)
    key_bytes = _serialize_key(store, node.name)
    find, put, remove = store.find_serialized, store.put_serialized, store.remove_serialized
    step = _add_step(node)
    windows = node.windows
    gap, is_closed = windows.inactivity_gap_ms, windows.is_closed
    clock = task.observed_time(node.name, (node.store,))
    late = LateRecords(task, node.name, node.late_records_topic, clock)
    name, aggregation = node.name, node.aggregation
    Change = ir.Change

    def merge(key: Any, aggregate: Any, other: Any) -> Any:
        if aggregate is None:
            return other
        try:
            return aggregation.merge(key, aggregate, other)
        except Exception as exc:
            raise user_error(name, exc) from exc

    def session_aggregate(key: Any, value: Any, timestamp: int) -> None:
        if key is None:  # a None value counts and is aggregated, as in Kafka Streams
            env.task.drop_null_key(node.name)
            return
        if timestamp > clock.time:
            clock.time = timestamp
        kb = key_bytes(key)
        stream_time = clock.time
        overlapping = [session for session in find(kb, timestamp - gap, timestamp + gap)
                       if not is_closed(session[1], stream_time)]
        merged = windows.merge([(start, end) for start, end, _v, _t in overlapping], timestamp)
        if is_closed(merged.end, clock.time):
            late.drop(key, timestamp, f"[{merged.start},{merged.end}]")
            return
        try:
            aggregate = aggregation.initial()
        except Exception as exc:
            raise user_error(name, exc) from exc
        same_bounds = None
        for start, end, session_value, _ts in overlapping:
            aggregate = merge(key, aggregate, session_value)
            if (start, end) == merged.window:
                same_bounds = session_value
            else:
                remove(kb, start, end)
                if forward_each:
                    downstream(windowed_of_valid(key, start, end), Change(None, session_value), end)
        new = step(key, value, aggregate)
        put(kb, merged.start, merged.end, new, merged.end)
        if forward_each:
            downstream(windowed_of_valid(key, merged.start, merged.end), Change(new, same_bounds), merged.end)
    return session_aggregate
