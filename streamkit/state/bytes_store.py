"""The persistent layer of a store: keys and values as bytes, plus the changelog
offset the contents reflect (written atomically with the data)."""
from __future__ import annotations

import abc
from typing import Iterator, Mapping, Optional, Tuple


class BytesStore(abc.ABC):
    """Ordered bytes → bytes map (RocksDB or memory) that is written in batches."""

    @abc.abstractmethod
    def get(self, key: bytes) -> Optional[bytes]: ...

    @abc.abstractmethod
    def range(self, start: Optional[bytes], end: Optional[bytes]) -> Iterator[Tuple[bytes, bytes]]:
        """Entries with start <= key <= end in byte order (None = open end)."""

    @abc.abstractmethod
    def apply(self, entries: Mapping[bytes, Optional[bytes]], changelog_offset: Optional[int],
              input_positions: Optional[bytes] = None) -> None:
        """Write ``entries`` (None deletes) and record ``changelog_offset`` and, for a store
        without a changelog, the encoded ``input_positions`` its contents reflect, all or
        nothing."""

    def apply_restored(self, entries: Mapping[bytes, Optional[bytes]], changelog_offset: int) -> None:
        """Write ``entries`` replayed from the changelog, which reach ``changelog_offset`` (the
        next offset to replay). A store may hold them without making them durable until
        :meth:`settle_restored`; its checkpoint never claims more than it holds durably."""
        self.apply(entries, changelog_offset)

    def settle_restored(self) -> None:
        """Make everything :meth:`apply_restored` wrote durable and record the changelog offset
        it reaches (restore calls it now and then, and when it ends)."""

    @abc.abstractmethod
    def delete_range(self, start: bytes, end: bytes) -> None:
        """Delete every entry with start <= key < end (the changelog offset stays)."""

    @abc.abstractmethod
    def changelog_offset(self) -> Optional[int]:
        """The changelog offset the contents reflect (the next one to replay), if known."""

    @abc.abstractmethod
    def input_positions(self) -> Optional[bytes]:
        """The encoded input positions last recorded by :meth:`apply`, if any."""

    @abc.abstractmethod
    def approximate_len(self) -> int: ...

    @abc.abstractmethod
    def reset(self) -> None:
        """Drop every entry and the checkpoint: the store is empty and reflects nothing."""

    def close(self) -> None:
        """Release resources."""
