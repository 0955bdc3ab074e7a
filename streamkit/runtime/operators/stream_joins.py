"""Compiled stream-stream joins (windowed, inner/left/outer), with Kafka Streams 4.1's rules.

Each side's records are buffered in a window store keyed by (key, timestamp), a list
of values per entry (duplicates kept). A record arriving on one side joins every
buffered record of the other side within the join window, then is buffered itself.

Time: the join keeps one stream time shared by both sides (every record reaching it
moves it, None keys and values too), and one per buffer (moved by the records of its
side that have a key). A buffer keeps what is at most ``before + after + grace`` behind
its own time, so a record too old for its own buffer is not buffered, but still joins
the partners the other buffer holds.

Left and outer joins must also say "no partner". A record that found none on arrival
is emitted at once, joined with None, if its window already ended (``t + after`` for a
left record, ``t + before`` for a right one, is behind the shared stream time). Else it
waits in the *unmatched* store (ordered by timestamp) until its window plus grace has
closed (:meth:`JoinWindows.left_close_time` / ``right_close_time``); a partner arriving
meanwhile takes it out. Closed entries are emitted, each with its own timestamp, when a
record with a key and a value arrives at the shared stream time (not an out-of-order
one), unless the earliest waiting timestamp plus the arriving side's window end
(``after`` for a left record, ``before`` for a right one) plus grace has not been passed.
A partner that arrives after that, still buffered, joins it as well: both results stand.

A record that is too old for its own buffer and gives no result (no partner, no
unmatched result) is late: counted and written to the late-records topic if one is set.
"""
from __future__ import annotations

import struct
from typing import Any, List, Tuple

from ...state.value_list import ValueListSerde
from ...topology import nodes as ir
from .base import CompileEnv, Downstream, user_error
from .late_records import LateRecords

_TIME = struct.Struct(">Q")
_TIME_BIAS = 2**63  # unsigned big-endian of (t + bias) sorts signed times in order
_LEFT, _RIGHT = b"L", b"R"
_NEVER = 2**63


def compile_stream_stream_join(node: ir.StreamStreamJoinNode, downstream: Downstream,
                               env: CompileEnv) -> Tuple[Downstream, Downstream]:
    task = env.task
    name, joiner = node.name, node.joiner
    windows = node.windows
    before, after, grace = windows.before_ms, windows.after_ms, windows.grace_ms
    kept_for = windows.retention_ms  # a buffer keeps timestamps >= its own time - this
    buffers = {_LEFT: task.stores[node.left_store], _RIGHT: task.stores[node.right_store]}
    clock = task.observed_time(name)  # shared by both sides
    buffer_clocks = {_LEFT: task.observed_time(f"{name}.left", (node.left_store,)),
                     _RIGHT: task.observed_time(f"{name}.right", (node.right_store,))}
    resumed = [False]
    late = LateRecords(task, name, node.late_records_topic, clock)
    unmatched = task.stores[node.unmatched_store] if node.unmatched_store else None
    lists = {_LEFT: ValueListSerde(node.value_serde), _RIGHT: ValueListSerde(node.other_value_serde)}
    deserialize_key = node.key_serde.deserialize
    serialize_key = buffers[_LEFT].serialize_key
    # The earliest timestamp that may wait in the unmatched store: the earliest kept by the
    # last scan, lowered by every entry since (a partner taking one out does not raise it).
    # Unknown after a restart: look once.
    earliest_waiting = [-_NEVER]

    def join(left_value: Any, right_value: Any) -> Any:
        try:
            return joiner(left_value, right_value)
        except Exception as exc:
            raise user_error(name, exc) from exc

    # Stream time after a record's timestamp at which its unmatched result is due, per side
    # (JoinWindows.left_close_time / right_close_time).
    delay = {_LEFT: after + grace + 1, _RIGHT: before + grace + 1}
    min_delay = min(delay.values())

    def unmatched_key(side: bytes, timestamp: int, key_bytes: bytes) -> bytes:
        return _TIME.pack(timestamp + _TIME_BIAS) + side + key_bytes

    def remember(side: bytes, timestamp: int, key_bytes: bytes, value: Any) -> None:
        assert unmatched is not None
        ukey = unmatched_key(side, timestamp, key_bytes)
        serde = lists[side]
        prior = unmatched.get(ukey)
        values = [value] if prior is None else serde.deserialize(prior) + [value]
        unmatched.put(ukey, serde.serialize(values))
        if timestamp < earliest_waiting[0]:
            earliest_waiting[0] = timestamp

    def forget(side: bytes, timestamp: int, key_bytes: bytes) -> None:
        assert unmatched is not None
        ukey = unmatched_key(side, timestamp, key_bytes)
        if unmatched.get(ukey) is not None:
            unmatched.delete(ukey)

    # Every unmatched entry is younger than this much behind the stream time of the last scan:
    # older ones were emitted then, and later ones had not ended their window when they came.
    look_back = max(delay.values())
    last_scan = [-_NEVER]

    def emit_closed(stream_time: int) -> None:
        """Emit (and drop) every unmatched record whose window plus grace has closed."""
        assert unmatched is not None
        lowest = max(last_scan[0] - look_back, -_TIME_BIAS)
        start = None if lowest == -_TIME_BIAS else _TIME.pack(lowest + _TIME_BIAS)
        last_scan[0] = stream_time
        # Scan only the range that may be due (the store's pending writes get sorted for it).
        closed_to = _TIME.pack(min(stream_time - min_delay, _TIME_BIAS - 1) + _TIME_BIAS) + b"\xff"
        candidates: List[Tuple[bytes, bytes]] = list(unmatched.range(start, closed_to))
        earliest = _NEVER
        for ukey, _raw in unmatched.range(closed_to, None):
            earliest = _TIME.unpack_from(ukey)[0] - _TIME_BIAS
            break
        for ukey, raw in candidates:
            side, timestamp = ukey[8:9], _TIME.unpack_from(ukey)[0] - _TIME_BIAS
            if timestamp + delay[side] > stream_time:  # the other side's window is longer: not yet
                if timestamp < earliest:
                    earliest = timestamp
                continue
            key = deserialize_key(ukey[9:])
            for value in lists[side].deserialize(raw):
                downstream(key, join(value, None) if side == _LEFT else join(None, value), timestamp)
            unmatched.delete(ukey)
        earliest_waiting[0] = earliest

    def resume() -> None:
        """After a restart the buffers' times are restored: the shared time is at least theirs."""
        resumed[0] = True
        restored = max(buffer_clocks[_LEFT].time, buffer_clocks[_RIGHT].time)
        if restored > clock.time:
            clock.time = restored

    def side_entry(side: bytes) -> Downstream:
        other = _RIGHT if side == _LEFT else _LEFT
        own_buffer, other_buffer = buffers[side], buffers[other]
        own_clock, other_clock = buffer_clocks[side], buffer_clocks[other]
        low, high = (before, after) if side == _LEFT else (after, before)
        own_get, own_put = own_buffer.get_serialized, own_buffer.put_serialized
        scan = other_buffer.scan_serialized
        keeps_unmatched = node.how == "outer" or (node.how == "left" and side == _LEFT)
        partner_waits = node.how == "outer" or (node.how == "left" and side == _RIGHT)
        is_left = side == _LEFT
        # A scan from this side is skipped while the earliest waiting record plus this much
        # is not behind stream time (Kafka Streams' shortcut, by the arriving side's window).
        scan_gate = high + grace

        def stream_stream_join(key: Any, value: Any, timestamp: int) -> None:
            if not resumed[0]:
                resume()
            # As Kafka Streams: every record reaching the join moves its time, None keys too.
            if timestamp > clock.time:
                clock.time = timestamp
            stream_time = clock.time
            if key is None:
                if keeps_unmatched and value is not None:
                    # As Kafka Streams 3.7+ (KIP-962): no partner can share a None key, so the
                    # record is emitted at once, joined with None.
                    downstream(None, join(value, None) if is_left else join(None, value), timestamp)
                else:
                    env.task.drop_null_key(node.name)
                return
            if timestamp > own_clock.time:  # a buffer's time moves with None values too
                own_clock.time = timestamp
            if value is None:
                return  # as in Kafka Streams: a null value joins nothing
            if unmatched is not None and timestamp == stream_time \
                    and earliest_waiting[0] + scan_gate < stream_time:
                emit_closed(stream_time)
            try:
                key_bytes = serialize_key(key)
            except Exception as exc:
                raise user_error(name, exc) from exc
            matched = False
            # The other buffer shows only what it still keeps.
            lowest = max(timestamp - low, other_clock.time - kept_for)
            for other_time, values, _ts, _first in scan(key_bytes, lowest, timestamp + high):
                matched = True
                if partner_waits:
                    forget(other, other_time, key_bytes)
                result_time = other_time if other_time > timestamp else timestamp
                for other_value in values:
                    downstream(key, join(value, other_value) if is_left else join(other_value, value),
                               result_time)
            buffered = timestamp >= own_clock.time - kept_for
            if buffered:
                prior = own_get(key_bytes, timestamp)
                own_put(key_bytes, timestamp, [value] if prior is None else prior[0] + [value], timestamp)
            if matched:
                return
            if keeps_unmatched:
                if timestamp + high < stream_time:  # its window has ended: no wait
                    downstream(key, join(value, None) if is_left else join(None, value), timestamp)
                    return
                remember(side, timestamp, key_bytes, value)
                return
            if not buffered:
                late.drop(key, timestamp, f"[{timestamp - low},{timestamp + high}] (grace {grace} ms)")
        return stream_stream_join

    return side_entry(_LEFT), side_entry(_RIGHT)
