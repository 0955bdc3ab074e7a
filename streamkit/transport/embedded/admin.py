"""Admin operations of the embedded broker that the console tools need beyond the
broker's own :class:`~streamkit.broker.EmbeddedBroker` methods: changing a topic's
configs and growing its partition count after creation, and finding the offset of a timestamp.

The embedded log has no timestamp index: :func:`offset_for_time` reads the partition
from its start until it finds the timestamp (one pass, as fast as a consumer reads)."""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
from pathlib import Path
from typing import Dict, Iterator, Mapping, Optional, Sequence, Tuple

from ...broker import EmbeddedBroker, UnknownTopicError, validate_topic_name
from ...broker.broker import META_FILE
from ...broker.group_store import fsync_dir, write_json_atomic
from ...broker.segment_files import LOCK_FILE_NAME, segment_file_name
from ...core.records import TopicMetadata
from ...broker.topic_config import validate_topic_config

CONFIG_LOCK_FILE = ".config.lock"
"""In the topic's directory: held while its meta.json is rewritten, so that two
concurrent changes of different keys both stay."""
_READ_CHUNK = 10_000


@contextlib.contextmanager
def _topic_meta_locked(broker: EmbeddedBroker, name: str) -> Iterator[Tuple[Path, dict]]:
    """Topic ``name``'s directory and its ``meta.json`` contents, read under the topic's
    config lock (held until the block ends, so a change written in it is not lost to
    another process's). UnknownTopicError for a topic that does not exist, also one
    deleted while the lock was awaited."""
    directory = broker.directory / "topics" / validate_topic_name(name)
    try:
        fd = os.open(directory / CONFIG_LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
    except (FileNotFoundError, NotADirectoryError):
        raise UnknownTopicError(f"unknown topic '{name}' on embedded://{broker.directory}") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        try:
            with open(directory / META_FILE, "rb") as f:
                meta = json.loads(f.read())
        except FileNotFoundError:  # deleted while we waited for the lock
            raise UnknownTopicError(f"unknown topic '{name}' on embedded://{broker.directory}") from None
        yield directory, meta
    finally:
        os.close(fd)


def alter_topic_config(broker: EmbeddedBroker, name: str, set_configs: Mapping[str, str],
                       delete_configs: Sequence[str] = ()) -> Dict[str, str]:
    """Set ``set_configs`` and remove ``delete_configs`` (back to the default) on topic
    ``name``, keeping its other configs; return its configs after. ValueError for an
    unknown key or a bad value (nothing is changed then), UnknownTopicError for a topic
    that does not exist. Retention and compaction follow the new configs at their next
    pass; ``segment.bytes`` applies to processes that open the topic afterwards."""
    with _topic_meta_locked(broker, name) as (directory, meta):
        config = {k: v for k, v in dict(meta.get("config", {})).items() if k not in delete_configs}
        config.update(set_configs)
        try:
            meta["config"] = validate_topic_config(config)
        except ValueError as exc:
            raise ValueError(f"topic '{name}': {exc}") from None
        write_json_atomic(directory / META_FILE, meta)
        return dict(meta["config"])


def add_partitions(broker: EmbeddedBroker, name: str, partitions: int) -> TopicMetadata:
    """Grow topic ``name`` to ``partitions`` partitions, as Kafka's CreatePartitions; nothing
    when it has that many already. ValueError when it has more (partitions are never
    removed), UnknownTopicError for a topic that does not exist. The new partitions' files
    are made before ``meta.json`` counts them: no process sees a partition without its log."""
    with _topic_meta_locked(broker, name) as (directory, meta):
        current = int(meta["partitions"])
        if current > partitions:
            raise ValueError(f"topic '{name}' has {current} partitions: it cannot shrink to {partitions}")
        if current < partitions:
            for partition in range(current, partitions):
                (directory / str(partition)).mkdir(exist_ok=True)
                for file_name in (LOCK_FILE_NAME, segment_file_name(0)):
                    os.close(os.open(directory / str(partition) / file_name, os.O_WRONLY | os.O_CREAT, 0o644))
            fsync_dir(directory)
            meta["partitions"] = partitions
            write_json_atomic(directory / META_FILE, meta)
        return TopicMetadata(name, partitions, dict(meta.get("config", {})))


def offset_for_time(broker: EmbeddedBroker, topic: str, partition: int, timestamp_ms: int) -> Optional[int]:
    """The earliest offset of a record whose timestamp is >= ``timestamp_ms`` (records of
    open and aborted transactions included, as Kafka's ListOffsets), None when there is none."""
    reader = broker.reader(topic, partition, read_committed=False)
    try:
        reader.seek_to_start()
        while True:
            records = reader.read(_READ_CHUNK)
            if not records:
                return None
            for offset, timestamp, *_ in records:
                if timestamp >= timestamp_ms:
                    return offset
    finally:
        reader.close()
