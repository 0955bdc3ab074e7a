"""Kafka's default partitioner: murmur2 of the serialized key, positive, modulo partitions.

Used on every transport so streamkit, Java producers and aiokafka place a key on
the same partition.
"""
from __future__ import annotations

import struct
from typing import Callable, Dict, Optional

_HASHES: Dict[bytes, int] = {}
_CACHE_LIMIT = 200_000  # hot keys repeat: a dict lookup beats hashing again
cached_key_hash: Callable[[bytes], Optional[int]] = _HASHES.get
"""The positive murmur2 hash of a key seen recently, else None: for hot paths that then
take ``hash % partitions`` without a call (the cache is cleared in place, never replaced)."""
_M = 0x5BD1E995
_MASK = 0xFFFFFFFF


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 (``org.apache.kafka.common.utils.Utils.murmur2``) as an unsigned
    32-bit int. Reads the key four bytes at a time with one ``struct`` call, about
    three times faster than a byte-by-byte loop on the long keys of windowed results.

    >>> murmur2(b"21")
    3321034988
    """
    length = len(data)
    h = 0x9747B28C ^ length
    words = length // 4
    for k in struct.unpack_from(f"<{words}I", data):
        k = (k * _M) & _MASK
        k ^= k >> 24
        h = ((h * _M) & _MASK) ^ ((k * _M) & _MASK)
    tail = length & 3
    if tail:
        at = words * 4
        if tail == 3:
            h ^= data[at + 2] << 16
        if tail >= 2:
            h ^= data[at + 1] << 8
        h ^= data[at]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    return h ^ (h >> 15)


def partition_for_key(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner picks for ``key``.

    >>> partition_for_key(b"a", 3)
    1
    """
    h = _HASHES.get(key)
    if h is None:
        if len(_HASHES) >= _CACHE_LIMIT:
            _HASHES.clear()
        h = _HASHES[key] = murmur2(key) & 0x7FFFFFFF
    return h % partitions
