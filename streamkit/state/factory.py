"""Opens the stores of a task from their specs."""
from __future__ import annotations

from typing import Dict, Iterable

from ..serdes import Json
from ..stores import KeyValueStore, StoreSpec
from .memory import InMemoryBytesStore
from .serialized import SerializedKeyValueStore
from .timestamped import TimestampedKeyValueStore


def open_memory_store(spec: StoreSpec) -> KeyValueStore:
    """An in-memory key-value store (state is rebuilt from input when the task restarts)."""
    store_class = TimestampedKeyValueStore if spec.timestamped else SerializedKeyValueStore
    return store_class(spec.name, InMemoryBytesStore(), spec.key_serde or Json(), spec.value_serde or Json())


def open_task_stores(specs: Iterable[StoreSpec]) -> Dict[str, KeyValueStore]:
    return {spec.name: open_memory_store(spec) for spec in specs}
