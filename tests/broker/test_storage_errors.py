"""OS errors of the embedded broker's writes (a real full tmpfs): each names the
topic-partition or group, the file and the stage, keeps the errno and chains the
original; and the log stays consistent, so writes resume once space is freed."""
from __future__ import annotations

import errno
from pathlib import Path

import pytest

from streamkit.broker.broker import EmbeddedBroker
from streamkit.core.records import TopicPartition
from streamkit.errors import StorageError
from tests.storage_limits import fill, small_filesystem


def records(n: int, start: int = 0, size: int = 2000) -> list:
    return [(b"k%d" % i, b"v%d-" % i + b"x" * size, 1000 + i, None) for i in range(start, start + n)]


def values(broker: EmbeddedBroker, topic: str, partition: int) -> list:
    with broker.reader(topic, partition) as reader:
        out = []
        while batch := reader.read():
            out.extend((offset, value) for offset, _ts, _key, value, _headers in batch)
        return out


def assert_disk_full(error: StorageError, *parts: str) -> None:
    assert isinstance(error, OSError) and error.errno == errno.ENOSPC
    assert isinstance(error.__cause__, OSError) and error.__cause__.errno == errno.ENOSPC
    message = str(error)
    assert "No space left on device" in message
    for part in parts:
        assert part in message, (part, message)


@pytest.fixture
def full_disk_dir(tmp_path: Path):
    with small_filesystem(tmp_path / "fs", 4 << 20) as directory:
        yield directory


def test_append_to_a_full_disk_names_the_partition_and_leaves_no_partial_batch(full_disk_dir: Path) -> None:
    with EmbeddedBroker(full_disk_dir / "broker") as broker:
        broker.create_topic("t", 2)
        assert broker.append("t", 1, records(10)) == 0
        filler = fill(full_disk_dir)
        with pytest.raises(StorageError) as failed:
            broker.append("t", 1, records(50, start=10))
        assert_disk_full(failed.value, "produce (append of offsets 10 to 59", "topic 't' partition 1",
                         "00000000000000000000.log")
        assert broker.partition_offsets("t", 1).end == 10
        filler.unlink()
        assert broker.append("t", 1, records(50, start=10)) == 10  # no gap, no torn batch to skip
        assert values(broker, "t", 1) == [(i, b"v%d-" % i + b"x" * 2000) for i in range(60)]


def test_segment_roll_on_a_full_disk_names_the_new_segment(full_disk_dir: Path) -> None:
    with EmbeddedBroker(full_disk_dir / "broker") as broker:
        broker.create_topic("t", 1, {"segment.bytes": str(64 << 10)})
        for start in range(0, 60, 10):
            broker.append("t", 0, records(10, start=start))
        end = broker.partition_offsets("t", 0).end
        fill(full_disk_dir)
        with pytest.raises(StorageError) as failed:
            for start in range(end, end + 200, 10):
                broker.append("t", 0, records(10, start=start))
        assert_disk_full(failed.value, "topic 't' partition 0")
        assert "produce (append of offsets" in str(failed.value) or "produce (segment roll" in str(failed.value)
        landed = broker.partition_offsets("t", 0).end
        assert [offset for offset, _ in values(broker, "t", 0)] == list(range(landed))


def test_offset_commit_on_a_full_disk_keeps_the_committed_offsets(full_disk_dir: Path) -> None:
    with EmbeddedBroker(full_disk_dir / "broker") as broker:
        broker.create_topic("t", 1)
        tp = TopicPartition("t", 0)
        broker.commit_offsets("g", {tp: 5})
        filler = fill(full_disk_dir)
        with pytest.raises(StorageError) as failed:
            broker.commit_offsets("g", {tp: 7})
        assert_disk_full(failed.value, "offset commit", "group 'g'", "t-0: 7 not committed")
        assert broker.committed_offsets("g") == {tp: 5}
        filler.unlink()
        broker.commit_offsets("g", {tp: 7})
        assert broker.committed_offsets("g") == {tp: 7}


def test_disk_full_after_the_commit_point_completes_the_transaction_later(full_disk_dir: Path) -> None:
    # The commit point (the transactional id's record, rewritten in place) still fits; the
    # group's offsets file does not: the transaction is committed, and says so.
    with EmbeddedBroker(full_disk_dir / "broker") as broker:
        broker.create_topic("t", 1)
        tp = TopicPartition("t", 0)
        txn = broker.begin_transaction("app-1")
        txn.append("t", 0, records(5))
        txn.commit_offsets("g", {tp: 3})
        filler = fill(full_disk_dir)
        with pytest.raises(StorageError) as failed:
            txn.commit()
        assert_disk_full(failed.value, "completing the committed transaction", "transactional id 'app-1'",
                         "partitions t-0", "group 'g'", "offsets.json")
        filler.unlink()
        assert [offset for offset, _ in values(broker, "t", 0)] == [0, 1, 2, 3, 4]
        retry = broker.begin_transaction("app-1")  # finishes the committed one: its offsets
        assert broker.committed_offsets("g") == {tp: 3}
        retry.append("t", 0, records(2, start=100))
        retry.commit()
        assert [value[:4] for _offset, value in values(broker, "t", 0)][5:] == [b"v100", b"v101"]
