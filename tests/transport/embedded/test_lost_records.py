"""delete_records, and consumers that report records deleted before they read them
(take_lost), on real segment files of the embedded log."""
import asyncio
import fcntl
import os

import pytest

import streamkit as sk
from streamkit.runtime.task.external_sources import ExternalSourceConsumer
from streamkit.runtime.context.task_metrics import TaskMetrics
from streamkit.runtime.worker.topics import prepare_topics
from streamkit.transport.base import PartitionOffsets, TopicPartition
from streamkit.broker import EmbeddedBroker
from streamkit.broker.errors import UnknownPartitionError, UnknownTopicError
from streamkit.transport.embedded.transport import EmbeddedConsumer
from tests.broker.test_housekeeping import fill, partition_dir, read_all, segments

TP = TopicPartition("t", 0)


def consumer(b, group="g"):
    return EmbeddedConsumer(b, group, read_committed=True)


def fetch_all(c):
    out = []
    while True:
        batches = asyncio.run(c.fetch(0))
        if not batches:
            return out
        out.extend(r[0] for batch in batches for r in batch.records)


# ---------------------------------------------------------------- delete_records

def test_delete_records_moves_the_start_idempotently_and_never_backwards(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        b.create_topic("t", 1, {"segment.bytes": "400"})
        fill(b, 40)
        per = segments(tmp_path)[1]
        b.delete_records({TP: per + 2})  # into the middle of the second segment
        assert b.partition_offsets("t", 0) == PartitionOffsets(per + 2, 40)
        assert segments(tmp_path)[0] == per  # the first is wholly below: gone now
        assert [r[0] for r in read_all(b.reader("t", 0))] == list(range(per + 2, 40))
        b.delete_records({TP: per + 2})
        b.delete_records({TP: 3})  # lower: changes nothing
        assert b.partition_offsets("t", 0).start == per + 2
        b.delete_records({TP: 40})  # up to the end: empty, appends go on
        assert b.partition_offsets("t", 0) == PartitionOffsets(40, 40)
        assert len(segments(tmp_path)) == 1
        assert b.append("t", 0, [(b"k", b"v", 1, None)]) == 40
        with pytest.raises(ValueError, match=r"below offset 42.*ends at 41"):
            b.delete_records({TP: 42})
        with pytest.raises(ValueError, match=">= 0"):
            b.delete_records({TP: -1})
        with pytest.raises(UnknownTopicError):
            b.delete_records({TopicPartition("nope", 0): 1})
        with pytest.raises(UnknownPartitionError):
            b.delete_records({TopicPartition("t", 1): 1})
    with EmbeddedBroker(tmp_path) as b:  # durable
        assert b.partition_offsets("t", 0) == PartitionOffsets(40, 41)
        assert [r[0] for r in read_all(b.reader("t", 0))] == [40]


def test_segments_below_the_start_wait_for_a_busy_cleaner_even_with_infinite_retention(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        b.create_topic("t", 1, {"segment.bytes": "400", "retention.ms": "-1"})
        b.create_topic("c", 1, {"segment.bytes": "400", "cleanup.policy": "compact"})
        fill(b, 40)
        fill(b, 40, topic="c")
        before = segments(tmp_path)
        fds = []
        for topic in ("t", "c"):  # another process is cleaning these partitions
            fd = os.open(partition_dir(tmp_path, topic) / ".cleaner.lock", os.O_RDWR | os.O_CREAT)
            fcntl.flock(fd, fcntl.LOCK_EX)
            fds.append(fd)
        b.delete_records({TP: before[2], TopicPartition("c", 0): 30})
        assert segments(tmp_path) == before  # left in place, but no longer readable
        assert b.partition_offsets("t", 0).start == before[2]
        assert read_all(b.reader("t", 0))[0][0] == before[2]
        for fd in fds:
            os.close(fd)
        assert b.run_housekeeping(now_ms=10 ** 13)["t"]["segments_deleted"] == 2
        assert segments(tmp_path) == before[2:]
        b.run_housekeeping(now_ms=10 ** 13)
        assert segments(tmp_path, "c")[0] <= 30 and read_all(b.reader("c", 0))[0][0] >= 30


# ---------------------------------------------------------------- gaps seen by consumers

def test_a_position_below_the_log_start_is_reported_as_lost_and_reading_goes_on(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        b.create_topic("t", 1, {"segment.bytes": "400"})
        fill(b, 40)
        b.commit_offsets("g", {TP: 5})
        b.delete_records({TP: 12})
        c = consumer(b)
        committed = asyncio.run(c.committed([TP]))
        c.assign([TP], committed)  # e.g. a committed offset below the start
        assert c.take_lost() == [(TP, 5, 12)]
        assert c.take_lost() == []  # since the last call
        assert fetch_all(c) == list(range(12, 40))
        assert c.take_lost() == []
        c.assign([TP], {TP: 3})  # reset-offsets below the start
        assert c.take_lost() == [(TP, 3, 12)]
        c.close()


def test_reading_from_the_earliest_offset_loses_nothing(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        b.create_topic("t", 1, {"segment.bytes": "400"})
        fill(b, 40)
        c = consumer(b)
        c.assign([TP], {})
        b.delete_records({TP: 20})  # before the first fetch: the start moved, nothing lost
        assert fetch_all(c) == list(range(20, 40))
        assert c.take_lost() == []
        c.close()


def test_records_deleted_ahead_of_a_reader_are_reported_those_in_its_open_file_are_read(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        b.create_topic("t", 1, {"segment.bytes": "400"})
        fill(b, 40)
        per = segments(tmp_path)[1]
        reader = b.reader("t", 0)
        reader.seek(0)
        assert [r[0] for r in reader.read(2)] == [0, 1]
        b.delete_records({TP: 3 * per + 1})  # unlinks three segments, the reader's among them
        assert [r[0] for r in read_all(reader)] == list(range(2, per)) + list(range(3 * per + 1, 40))
        assert reader.take_lost() == [(per, 3 * per + 1)]
        assert reader.take_lost() == []


def test_retention_that_passes_a_reader_is_reported(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        b.create_topic("t", 1, {"retention.ms": "1000", "segment.bytes": "400"})
        fill(b, 40, ts=lambda i: 10_000 + 100 * i)
        per = segments(tmp_path)[1]
        c = consumer(b)
        c.assign([TP], {TP: 0})
        b.run_housekeeping(now_ms=10_000 + 100 * (2 * per) + 1001)  # two segments go
        assert b.partition_offsets("t", 0).start == 2 * per
        assert fetch_all(c) == list(range(2 * per, 40))
        assert c.take_lost() == [(TP, 0, 2 * per)]
        c.close()


def test_compaction_holes_are_not_losses(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        b.create_topic("t", 1, {"cleanup.policy": "compact", "segment.bytes": "300"})
        for i in range(30):
            b.append("t", 0, [(b"k%d" % (i % 3), b"v%d" % i, 1000 + i, None)])
        c = consumer(b)
        c.assign([TP], {TP: 0})
        assert b.run_housekeeping(now_ms=10 ** 13)["t"]["records_removed"] > 0
        offsets = fetch_all(c)
        assert offsets[0] == 0 or b.partition_offsets("t", 0).start == 0
        assert len(offsets) < 30 and offsets[-3:] == [27, 28, 29]
        assert c.take_lost() == []
        c.close()


def test_wrappers_pass_losses_on(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        b.create_topic("t", 1)
        fill(b, 5)
        b.delete_records({TP: 2})
        c = ExternalSourceConsumer(consumer(b), {})
        c.assign([TP], {TP: 0})
        assert c.take_lost() == [(TP, 0, 2)]
        c.close()


def test_the_task_metric_counts_losses():
    total, one = TaskMetrics(), TaskMetrics(records_lost_to_retention=7)
    total.add(one)
    total.add(one)
    assert total.as_dict()["records_lost_to_retention"] == 14


# ---------------------------------------------------------------- repartition topics

def test_repartition_topics_are_created_without_time_retention(tmp_path):
    app = sk.App("rp")
    app.topic("in", partitions=2)
    app.topology(lambda b_: b_.stream("in").group_by(lambda k, v: v).count(name="c"))
    topology = app.build()
    with EmbeddedBroker(tmp_path) as b:
        prepare_topics(topology, b, with_dlq=False)
        [topic] = topology.repartition_topics
        assert b.topic(topic).config == {"retention.ms": "-1"}
        b.append(topic, 0, [(b"k", b"v", 1, None)] * 3)
        assert b.run_housekeeping(now_ms=10 ** 13)[topic]["records_removed"] == 0
        assert b.partition_offsets(topic, 0) == PartitionOffsets(0, 3)
