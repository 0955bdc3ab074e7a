"""Kafka's default partitioner: murmur2 of the serialized key, positive, modulo partitions.

Used on every transport so streamkit, Java producers and aiokafka place a key on
the same partition.
"""
from __future__ import annotations

from typing import Dict

from aiokafka.partitioner import murmur2

_HASHES: Dict[bytes, int] = {}
_CACHE_LIMIT = 200_000  # murmur2 in Python costs ~3 µs; hot keys repeat


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for ``key``.

    >>> partition_for_key(b"a", 3) == (murmur2(b"a") & 0x7fffffff) % 3
    True
    """
    h = _HASHES.get(key)
    if h is None:
        if len(_HASHES) >= _CACHE_LIMIT:
            _HASHES.clear()
        h = _HASHES[key] = murmur2(key) & 0x7FFFFFFF
    return h % partitions
