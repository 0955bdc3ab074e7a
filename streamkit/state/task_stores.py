"""The stores of one task: opened from their specs, flushed and persisted together."""
from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from typing import Dict, Iterable, List, Mapping, Optional, Tuple

from ..serdes import Json
from ..stores import KeyValueStore, StoreSpec
from ..transport.base import OutgoingRecord, TopicPartition
from .bytes_store import BytesStore
from .memory import InMemoryBytesStore
from .rocksdb import RocksDBBytesStore
from .serialized import SerializedKeyValueStore
from .timestamped import TimestampedKeyValueStore
from .write_buffer import WriteBuffer

log = logging.getLogger(__name__)

BACKENDS = ("rocksdb", "memory")


@dataclass
class OpenStore:
    spec: StoreSpec
    buffer: WriteBuffer
    store: KeyValueStore
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
        self.by_name: Dict[str, KeyValueStore] = {s.spec.name: s.store for s in stores}

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

    def persist(self, next_offsets: Mapping[TopicPartition, int]) -> None:
        """After the transport commit: write each buffer to its persistent store, with the
        changelog offset the store now reflects, in one batch per store."""
        for store in self.open_stores:
            offset = next_offsets.get(store.changelog) if store.changelog is not None else None
            store.buffer.persist(offset)

    def reset(self) -> None:
        """Empty every store of the task, checkpoints included (before a rebuild from input)."""
        for store in self.open_stores:
            store.buffer.discard()
            store.buffer.forget_cached()
            store.buffer.persistent.reset()

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


def open_bytes_store(backend: str, path: Optional[str]) -> Tuple[BytesStore, Optional[str]]:
    if backend == "memory":
        return InMemoryBytesStore(), None
    if backend == "rocksdb":
        assert path is not None
        return RocksDBBytesStore.open_or_rebuild(path)
    raise ValueError(f"unknown store backend {backend!r}: use one of {', '.join(BACKENDS)}")


def open_task_stores(specs: Iterable[StoreSpec], *, app_id: str, task_id: str, partition: int,
                     backend: str = "memory", state_dir: Optional[str] = None) -> TaskStores:
    """Open (or create) every store of a task. RocksDB stores live in
    ``<state_dir>/<task_id>/<store>``."""
    opened = []
    for spec in specs:
        path = os.path.join(state_dir, task_id, spec.name) if state_dir else None
        existed = backend != "memory" and path is not None and os.path.isdir(path)
        persistent, rebuilt = open_bytes_store(backend, path)
        buffer = WriteBuffer(spec.name, persistent)
        store_class = TimestampedKeyValueStore if spec.timestamped else SerializedKeyValueStore
        store = store_class(spec.name, buffer, spec.key_serde or Json(), spec.value_serde or Json())
        changelog = TopicPartition(changelog_topic(app_id, spec.name), partition) if spec.changelog else None
        opened.append(OpenStore(spec, buffer, store, changelog, rebuilt, created=not existed or rebuilt is not None))
    return TaskStores(opened)


def changelog_topic(app_id: str, store: str) -> str:
    return f"{app_id}-{store}-changelog"
