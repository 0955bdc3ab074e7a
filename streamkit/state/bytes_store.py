"""The innermost layer of a store: keys and values as bytes."""
from __future__ import annotations

import abc
from typing import Iterator, Optional, Tuple


class BytesStore(abc.ABC):
    """Ordered bytes → bytes map, the layer a RocksDB or memory store implements."""

    @abc.abstractmethod
    def get(self, key: bytes) -> Optional[bytes]: ...

    @abc.abstractmethod
    def put(self, key: bytes, value: bytes) -> None: ...

    @abc.abstractmethod
    def delete(self, key: bytes) -> None: ...

    @abc.abstractmethod
    def range(self, start: Optional[bytes], end: Optional[bytes]) -> Iterator[Tuple[bytes, bytes]]:
        """Entries with start <= key <= end in byte order (None = open end)."""

    @abc.abstractmethod
    def __len__(self) -> int: ...

    def flush(self) -> None:
        """Make written entries durable (no-op for memory)."""

    def close(self) -> None:
        """Release resources."""
