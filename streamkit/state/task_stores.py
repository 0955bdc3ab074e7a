"""The stores of one task: opened from their specs, flushed and persisted together."""
from __future__ import annotations

import json
import logging
import os
from dataclasses import dataclass
from typing import Any, Dict, Iterable, List, Mapping, Optional, Tuple

from ..core.names import changelog_topic
from ..core.settings import STORE_BACKENDS
from ..errors import StorageError
from ..serdes import Json
from ..stores import WINDOWED_KINDS, StoreSpec
from ..core.records import OutgoingRecord, TopicPartition
from .bytes_store import BytesStore
from .memory import InMemoryBytesStore
from .segmented import SegmentedBytesStore
from .serialized import SerializedKeyValueStore
from .session_store import SessionStore, session_time_of
from .suppression_buffer import SuppressionBuffer
from .timestamped import TimestampedKeyValueStore
from .window_store import WindowStore, window_time_of
from .write_buffer import WriteBuffer

log = logging.getLogger(__name__)

TIME_TRACKING_KINDS = ("window", "session", "suppression")
"""Stores that record their task's stream time (a restart must not reopen closed windows)."""


@dataclass
class OpenStore:
    spec: StoreSpec
    buffer: WriteBuffer
    store: Any
    """A KeyValueStore, WindowStore, SessionStore or SuppressionBuffer, by the spec's kind."""
    changelog: Optional[TopicPartition]
    """Where the store is logged; None when its changelog is off."""
    rebuilt: Optional[str] = None
    """Why the local state was discarded on open (corruption), if it was."""
    created: bool = False
    """The store started empty: no local state existed (or it was discarded)."""


class TaskStores:
    """A task's stores in topological order (upstream stores flush first)."""

    def __init__(self, stores: List[OpenStore]) -> None:
        self.open_stores = stores
        self.by_name: Dict[str, Any] = {s.spec.name: s.store for s in stores}
        self._timed = [s.store for s in stores if s.spec.kind in TIME_TRACKING_KINDS]

    def stream_time(self) -> int:
        """The stream time the task's windowed stores reflect (-1 if none recorded one)."""
        return max((store.stream_time() for store in self._timed), default=-1)

    def record_stream_time(self, stream_time: int, own: Optional[Mapping[str, int]] = None) -> None:
        """Write stream time into the windowed stores (and so their changelogs), with the
        commit: a restarted task resumes at it, so windows closed before stay closed. A
        store named in ``own`` records that time (its operator's), the others ``stream_time``
        (the task's)."""
        own = own or {}
        for store in self._timed:
            time = own.get(store.name, stream_time)
            if time >= 0:
                store.record_stream_time(time)

    @property
    def pending_bytes(self) -> int:
        return sum(s.buffer.size_bytes for s in self.open_stores)

    def flush(self) -> None:
        """Step 1 of a commit: forward cached updates downstream (record caches)."""
        for store in self.open_stores:
            store.buffer.flush()

    def changelog_batches(self, timestamp: int) -> List[Tuple[str, int, List[OutgoingRecord]]]:
        """Step 2 of a commit: one changelog record per key written since the last commit."""
        out = []
        for store in self.open_stores:
            if store.changelog is not None and store.buffer.pending:
                records = [(key, value, timestamp, None) for key, value in store.buffer.pending.items()]
                out.append((store.changelog.topic, store.changelog.partition, records))
        return out

    def persist(self, next_offsets: Mapping[TopicPartition, int],
                input_positions: Optional[Mapping[TopicPartition, int]] = None) -> None:
        """After the transport commit: write each buffer to its persistent store, in one
        batch per store, with what the store now reflects: the changelog offset, or for a
        store without a changelog, the task's ``input_positions`` (the offsets committed
        with it). A crash before a store's batch leaves it behind the committed offsets
        by the interval; :meth:`unlogged_positions` tells from where to replay."""
        encoded = None if input_positions is None else encode_positions(input_positions)
        for store in self.open_stores:
            try:
                if store.changelog is not None:
                    store.buffer.persist(next_offsets.get(store.changelog))
                else:
                    store.buffer.persist(None, encoded)
            except StorageError as exc:
                raise exc.within(f"state store '{store.spec.name}' {_logged_where(store)}",
                                 "checkpoint after the commit") from exc.cause

    @property
    def has_changelogged_stores(self) -> bool:
        return any(s.changelog is not None for s in self.open_stores)

    def unlogged_positions(self) -> Dict[str, Optional[Dict[TopicPartition, int]]]:
        """For each store without a changelog (and with local state), the input positions
        its contents reflect (None: not recorded, e.g. by an older version)."""
        out: Dict[str, Optional[Dict[TopicPartition, int]]] = {}
        for s in self.open_stores:
            if s.changelog is None and not s.created:
                raw = s.buffer.persistent.input_positions()
                out[s.spec.name] = None if raw is None else decode_positions(raw)
        return out

    def adopt_pending(self, input_positions: Mapping[TopicPartition, int]) -> None:
        """Make the buffered writes the committed state without forwarding or logging them:
        after a rebuild from input, they are what the committed offsets already stand for
        (forwarding them again would repeat outputs; their changelogs hold them). Stores
        without a changelog record the ``input_positions`` replayed so far."""
        encoded = encode_positions(input_positions)
        for store in self.open_stores:
            store.buffer.persist(None, None if store.changelog is not None else encoded)

    def reset(self) -> None:
        """Empty every store of the task, checkpoints included (before a rebuild from input)."""
        for store in self.open_stores:
            store.buffer.discard()
            store.buffer.forget_cached()
            store.buffer.persistent.reset()
            if isinstance(store.store, SuppressionBuffer):
                store.store.reset_index()
            if store.changelog is None:  # reflects no input at all (not "unknown")
                store.buffer.persist(None, encode_positions({}))

    @property
    def lost_unlogged(self) -> List[str]:
        """Stores without a changelog whose local state is gone: only the input can rebuild them."""
        return [s.spec.name for s in self.open_stores if s.changelog is None and s.created]

    def discard(self) -> None:
        for store in self.open_stores:
            store.buffer.discard()

    def close(self) -> None:
        for store in self.open_stores:
            store.buffer.persistent.close()


def _logged_where(store: OpenStore) -> str:
    if store.changelog is None:
        return "(no changelog)"
    return f"(changelog topic '{store.changelog.topic}' partition {store.changelog.partition})"


def encode_positions(positions: Mapping[TopicPartition, int]) -> bytes:
    """Input positions as stored next to an unlogged store's data."""
    return json.dumps(sorted([tp.topic, tp.partition, offset] for tp, offset in positions.items())).encode()


def decode_positions(raw: bytes) -> Dict[TopicPartition, int]:
    return {TopicPartition(topic, partition): offset for topic, partition, offset in json.loads(raw)}


def open_bytes_store(backend: str, path: Optional[str]) -> Tuple[BytesStore, Optional[str]]:
    if backend == "memory":
        return InMemoryBytesStore(), None
    if backend == "rocksdb":
        assert path is not None
        from .rocksdb import RocksDBBytesStore  # rocksdict loads when a RocksDB store opens, not on import

        return RocksDBBytesStore.open_or_rebuild(path)
    raise ValueError(f"unknown store backend {backend!r}: use one of {', '.join(STORE_BACKENDS)}")


def open_task_stores(specs: Iterable[StoreSpec], *, app_id: str, task_id: str, partition: int,
                     backend: str = "memory", state_dir: Optional[str] = None) -> TaskStores:
    """Open (or create) every store of a task. RocksDB stores live in
    ``<state_dir>/<task_id>/<store>``."""
    opened = []
    for spec in specs:
        path = os.path.join(state_dir, task_id, spec.name) if state_dir else None
        existed = backend != "memory" and path is not None and os.path.isdir(path)
        persistent, rebuilt = open_bytes_store(backend, path)
        if spec.kind in WINDOWED_KINDS:
            assert spec.retention_ms is not None
            persistent = SegmentedBytesStore(
                persistent, retention_ms=spec.retention_ms, segment_interval_ms=segment_interval(spec.retention_ms),
                time_of=window_time_of if spec.kind == "window" else session_time_of)
        buffer = WriteBuffer(spec.name, persistent)
        store = _typed_store(spec, buffer)
        changelog = TopicPartition(changelog_topic(app_id, spec.name), partition) if spec.changelog else None
        created = not existed or rebuilt is not None
        if created and changelog is None:
            buffer.persist(None, encode_positions({}))  # a crash before its first commit leaves "nothing"
        opened.append(OpenStore(spec, buffer, store, changelog, rebuilt, created=created))
    return TaskStores(opened)


def segment_interval(retention_ms: int) -> int:
    """Windows are dropped a segment at a time: about three segments span the retention."""
    return max(retention_ms // 2, 1)


def _typed_store(spec: StoreSpec, buffer: WriteBuffer) -> Any:
    key_serde, value_serde = spec.key_serde or Json(), spec.value_serde or Json()
    if spec.kind == "window":
        assert spec.window_size_ms is not None
        return WindowStore(spec.name, buffer, key_serde, value_serde, window_size_ms=spec.window_size_ms,
                           with_first_timestamp=spec.with_first_timestamp)
    if spec.kind == "session":
        return SessionStore(spec.name, buffer, key_serde, value_serde)
    if spec.kind == "suppression":
        return SuppressionBuffer(spec.name, buffer, key_serde, value_serde)
    store_class = TimestampedKeyValueStore if spec.timestamped else SerializedKeyValueStore
    return store_class(spec.name, buffer, key_serde, value_serde)
