"""A sink remembers a str key's bytes and partition only for serdes whose bytes depend on
the key alone (Json, String): any other key serde is asked again for every record."""
from __future__ import annotations

import itertools
from typing import Any, Optional

import streamkit as sk
from streamkit.serdes import Serde
from streamkit.testing import TopologyTestDriver


class Numbered(Serde[str]):
    """Appends how many keys it has serialized: its bytes are not the key's alone."""

    def __init__(self) -> None:
        self.calls = itertools.count()

    def serialize(self, obj: Optional[str]) -> Optional[bytes]:
        return None if obj is None else f"{obj}#{next(self.calls)}".encode()

    def deserialize(self, data: Optional[bytes]) -> Optional[str]:
        return None if data is None else data.decode()

    def __eq__(self, other: object) -> bool:
        return self is other

    def __hash__(self) -> int:
        return id(self)


def _counts(key_serde: Serde) -> Any:
    app = sk.App("sink-key-bytes")
    words = app.topic("words", key_serde=sk.serdes.String())
    out = app.topic("counts", key_serde=key_serde)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        b.stream(words).group_by_key().count(name="counts").to_stream().to(out)
    return app


def test_a_key_serde_of_its_own_is_asked_for_every_record() -> None:
    with TopologyTestDriver(_counts(Numbered())) as driver:
        for _ in range(3):
            driver.input_topic("words").pipe_input("a", 1, timestamp=0)
        keys = [record.key for record in driver.output_topic("counts", key_serde=sk.serdes.Bytes()).read_records()]
    assert keys == [b"a#0", b"a#1", b"a#2"]


def test_json_keys_are_the_same_bytes_every_time() -> None:
    with TopologyTestDriver(_counts(sk.serdes.Json())) as driver:
        for word in ["a", "b", "a", "a", "b"]:
            driver.input_topic("words").pipe_input(word, 1, timestamp=0)
        records = driver.output_topic("counts", key_serde=sk.serdes.Bytes()).read_records()
    assert [(r.key, r.value) for r in records] == [(b'"a"', 1), (b'"b"', 1), (b'"a"', 2), (b'"a"', 3), (b'"b"', 2)]
