"""Serdes of a foreign-key join's internal topics.

Subscription (left → right task), keyed by the foreign key's bytes (or, with no
foreign key, the left key's)::

    <1-byte instruction><1-byte hash flag>[<16-byte hash>]<left key bytes>

Response (right → left task), keyed by the left key's bytes::

    <1-byte hash flag>[<16-byte hash>]<1-byte value flag>[<right value bytes>]

The hash is of the left value the subscription was sent for; the left side drops
a response whose hash no longer matches its current value (an outdated answer).
"""
from __future__ import annotations

import hashlib
from typing import NamedTuple, Optional

from ..errors import SerializationError
from ..serdes import Serde

SUBSCRIBE = 1
"""Remember that the left key refers to this foreign key, and answer with the right row."""
UNSUBSCRIBE = 2
"""Forget it (the left row was deleted or now refers to another foreign key); no answer."""
ANSWER_NONE = 3
"""No foreign key (or the left row is gone): answer with no right row."""
UNSUBSCRIBE_AND_ANSWER_NONE = 4
"""Forget it and answer with no right row, as of the later of the update and the row the
foreign key referred to (an inner join's left row deleted or without a foreign key now)."""

HASH_BYTES = 16


def value_hash(data: Optional[bytes]) -> Optional[bytes]:
    """The hash a subscription carries for a left value's bytes."""
    return None if data is None else hashlib.blake2b(data, digest_size=HASH_BYTES).digest()


class Subscription(NamedTuple):
    instruction: int
    hash: Optional[bytes]
    left_key: bytes


class Response(NamedTuple):
    hash: Optional[bytes]
    right_value: Optional[bytes]


def _hash_part(digest: Optional[bytes]) -> bytes:
    return b"\x00" if digest is None else b"\x01" + digest


def _read_hash(data: bytes, position: int):
    if data[position] == 0:
        return None, position + 1
    return data[position + 1:position + 1 + HASH_BYTES], position + 1 + HASH_BYTES


class SubscriptionSerde(Serde[Subscription]):
    def serialize(self, message: Optional[Subscription]) -> Optional[bytes]:
        if message is None:
            return None
        return bytes((message.instruction,)) + _hash_part(message.hash) + message.left_key

    def deserialize(self, data: Optional[bytes]) -> Optional[Subscription]:
        if data is None:
            return None
        if len(data) < 2 or data[0] not in (SUBSCRIBE, UNSUBSCRIBE, ANSWER_NONE, UNSUBSCRIBE_AND_ANSWER_NONE):
            raise SerializationError(f"not a foreign-key subscription message: {data[:20]!r}")
        digest, position = _read_hash(data, 1)
        return Subscription(data[0], digest, data[position:])


class ResponseSerde(Serde[Response]):
    def serialize(self, message: Optional[Response]) -> Optional[bytes]:
        if message is None:
            return None
        value = b"\x00" if message.right_value is None else b"\x01" + message.right_value
        return _hash_part(message.hash) + value

    def deserialize(self, data: Optional[bytes]) -> Optional[Response]:
        if data is None:
            return None
        if not data:
            raise SerializationError("empty foreign-key response message")
        digest, position = _read_hash(data, 0)
        return Response(digest, None if data[position] == 0 else data[position + 1:])
