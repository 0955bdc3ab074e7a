"""Topic administration, consumer-group offsets and task locks (one process)."""
import json
import os

import pytest

from streamkit.transport.base import PartitionOffsets, TopicMetadata, TopicPartition
from streamkit.broker import (
    EmbeddedBroker, EmbeddedBrokerError, GroupNotEmptyError, PartitionCountMismatchError,
    TopicExistsError, UnknownGroupError, UnknownPartitionError, UnknownTopicError)


@pytest.fixture
def broker(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        yield b


# ---------------------------------------------------------------- topics

def test_create_list_describe_and_delete_topics(broker, tmp_path):
    assert broker.create_topic("orders", 3, {"retention.ms": "1000"}) == \
        TopicMetadata("orders", 3, {"retention.ms": "1000"})
    broker.create_topic("a.b_c-D", 1)
    assert broker.topic("orders") == TopicMetadata("orders", 3, {"retention.ms": "1000"})
    assert broker.topic("missing") is None
    assert [t.name for t in broker.list_topics()] == ["a.b_c-D", "orders"]
    meta = json.loads((tmp_path / "topics" / "orders" / "meta.json").read_text())
    assert meta["partitions"] == 3 and meta["config"] == {"retention.ms": "1000"}
    for p in range(3):
        assert broker.partition_offsets("orders", p) == PartitionOffsets(0, 0)

    broker.append("orders", 1, [(b"k", b"v", 1, None)])
    broker.delete_topic("orders")
    assert broker.topic("orders") is None
    assert [t.name for t in broker.list_topics()] == ["a.b_c-D"]
    assert sorted(os.listdir(tmp_path / "topics")) == ["a.b_c-D"]
    with pytest.raises(UnknownTopicError, match="orders"):
        broker.delete_topic("orders")
    with pytest.raises(UnknownTopicError, match="orders"):
        broker.append("orders", 1, [(b"k", b"v", 1, None)])


def test_a_deleted_and_recreated_topic_starts_empty_even_for_a_cached_writer(broker, tmp_path):
    broker.create_topic("t", 2)
    broker.append("t", 0, [(b"k", b"v", 1, None)] * 5)
    with EmbeddedBroker(tmp_path) as other:
        other.delete_topic("t")
        other.create_topic("t", 1)
    assert broker.append("t", 0, [(b"k", b"new", 1, None)]) == 0
    assert [r[3] for r in broker.reader("t", 0).read()] == [b"new"]
    with pytest.raises(UnknownPartitionError):
        broker.append("t", 1, [(b"k", b"v", 1, None)])


def test_a_reader_of_a_deleted_topic_never_returns_the_new_topics_records(broker, tmp_path):
    broker.create_topic("t", 1)
    small = EmbeddedBroker(tmp_path, segment_bytes=200)
    small.append("t", 0, [(b"k", b"old", 1, None)] * 3)
    reader = small.reader("t", 0)
    assert [r[3] for r in reader.read()] == [b"old"] * 3
    broker.delete_topic("t")
    broker.create_topic("t", 1)
    for _ in range(8):  # rolls: segments 2.log, 3.log ... exist again
        small.append("t", 0, [(b"k", b"new", 1, None)])
    try:
        for _ in range(5):
            assert reader.read() == []
    except UnknownTopicError as exc:
        assert "deleted" in str(exc)
    assert [r[3] for r in small.reader("t", 0).read()] == [b"new"] * 8
    small.close()


def test_no_file_descriptors_leak_across_rolls_syncs_and_readers(tmp_path):
    fds = lambda: len(os.listdir("/proc/self/fd"))  # noqa: E731
    before = fds()
    with EmbeddedBroker(tmp_path, segment_bytes=300) as b:
        b.create_topic("t", 1)
        for i in range(50):
            b.append("t", 0, [(b"k", b"v" * 100, i, None)] * 2)
        b.sync()
        with b.reader("t", 0) as reader:
            assert len(reader.read()) == 100
        assert fds() <= before + 3  # the lock file, the active segment, the partition's dir
    assert fds() == before


def test_create_existing_topic(broker):
    broker.create_topic("t", 3)
    with pytest.raises(TopicExistsError, match="'t' already exists"):
        broker.create_topic("t", 3)
    assert broker.create_topic("t", 3, exist_ok=True).partitions == 3
    with pytest.raises(PartitionCountMismatchError) as info:
        broker.create_topic("t", 5, exist_ok=True)
    assert "3" in str(info.value) and "5" in str(info.value)


@pytest.mark.parametrize("name", ["", ".", "..", "a/b", "has space", "ü", "x" * 250, "a\x00",
                                  None])
def test_invalid_topic_names_are_rejected(broker, name):
    with pytest.raises(ValueError, match="invalid topic name"):
        broker.create_topic(name, 1)


def test_longest_valid_name_and_bad_partition_counts(broker):
    broker.create_topic("x" * 249, 1)
    for partitions in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="partitions must be an int"):
            broker.create_topic("y", partitions)


def test_unknown_topics_and_partitions_are_named_in_errors(broker):
    broker.create_topic("t", 2)
    for call in (lambda: broker.reader("t", 2),
                 lambda: broker.append("t", -1, [(b"k", b"v", 1, None)]),
                 lambda: broker.partition_offsets("t", 7)):
        with pytest.raises(UnknownPartitionError) as info:
            call()
        assert "topic 't'" in str(info.value) and "2 partition" in str(info.value)
    with pytest.raises(UnknownTopicError, match="'nope'"):
        broker.reader("nope", 0)
    with pytest.raises(UnknownTopicError, match="'nope'"):
        broker.append("nope", 0, [(b"k", b"v", 1, None)])


def test_errors_share_a_base_class(broker):
    broker.create_topic("t", 1)
    with pytest.raises(EmbeddedBrokerError):
        broker.create_topic("t", 1)


def test_a_closed_broker_refuses_work(tmp_path):
    broker = EmbeddedBroker(tmp_path)
    broker.create_topic("t", 1)
    reader = broker.reader("t", 0)
    broker.close()
    broker.close()
    with pytest.raises(EmbeddedBrokerError, match="closed"):
        broker.append("t", 0, [(b"k", b"v", 1, None)])
    with pytest.raises(EmbeddedBrokerError, match="closed"):
        reader.read()


# ---------------------------------------------------------------- group offsets

def tp(topic, partition):
    return TopicPartition(topic, partition)


def test_commit_merges_and_survives_a_new_broker(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        assert b.list_groups() == [] and b.committed_offsets("g") == {}
        b.commit_offsets("g", {tp("a", 0): 5, tp("a", 1): 7})
        b.commit_offsets("g", {tp("a", 1): 9, ("b", 0): 1})
        b.commit_offsets("other group/ü", {tp("a", 0): 1})
    with EmbeddedBroker(tmp_path) as b:
        assert b.committed_offsets("g") == {tp("a", 0): 5, tp("a", 1): 9, tp("b", 0): 1}
        assert b.list_groups() == ["g", "other group/ü"]
        assert b.committed_offsets("other group/ü") == {tp("a", 0): 1}


def test_reset_replaces_entries_may_go_backwards_and_checks_partitions(broker):
    broker.create_topic("a", 2)
    broker.commit_offsets("g", {tp("a", 0): 50, tp("a", 1): 60})
    broker.reset_offsets("g", {tp("a", 0): 0})
    assert broker.committed_offsets("g") == {tp("a", 0): 0, tp("a", 1): 60}
    with pytest.raises(UnknownTopicError, match="'zzz'"):
        broker.reset_offsets("g", {tp("zzz", 0): 0})
    with pytest.raises(UnknownPartitionError):
        broker.reset_offsets("g", {tp("a", 5): 0})


@pytest.mark.parametrize("offsets, error", [
    ({tp("a", 0): -1}, ValueError), ({tp("a", 0): "1"}, ValueError), ({"a": 1}, TypeError),
    ({tp("a", -1): 1}, TypeError),
])
def test_bad_commits_are_rejected(broker, offsets, error):
    with pytest.raises(error):
        broker.commit_offsets("g", offsets)


def test_delete_group(broker):
    broker.commit_offsets("g", {tp("a", 0): 1})
    broker.commit_offsets("h", {tp("a", 0): 2})
    broker.delete_group("g")
    assert broker.list_groups() == ["h"]
    assert broker.committed_offsets("g") == {}
    with pytest.raises(UnknownGroupError, match="'g'"):
        broker.delete_group("g")
    broker.commit_offsets("g", {tp("a", 0): 3})  # a group can come back
    assert broker.committed_offsets("g") == {tp("a", 0): 3}


def test_a_group_with_a_live_task_owner_cannot_be_deleted(broker):
    lock = broker.try_lock_task("g", "0_0")
    with pytest.raises(GroupNotEmptyError, match="0_0"):
        broker.delete_group("g")
    lock.release()
    broker.delete_group("g")
    assert broker.list_groups() == []


@pytest.mark.parametrize("group", ["", None])
def test_invalid_group_names(broker, group):
    with pytest.raises(ValueError):
        broker.commit_offsets(group, {tp("a", 0): 1})


def test_any_group_name_maps_to_a_safe_directory(broker, tmp_path):
    names = [".", "..", ".hidden", "a/b", "../escape", "+tmp", "50%", "ü ü"]
    for i, name in enumerate(names):
        broker.commit_offsets(name, {tp("a", 0): i})
    assert broker.list_groups() == sorted(names)
    assert all(broker.committed_offsets(name) == {tp("a", 0): i} for i, name in enumerate(names))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["groups", "topics"]
    assert all(not p.name.startswith((".", "+")) for p in (tmp_path / "groups").iterdir())


# ---------------------------------------------------------------- task locks

def test_task_locks_are_exclusive_until_released(broker, tmp_path):
    lock = broker.try_lock_task("g", "0_2")
    assert lock is not None and lock.task_id == "0_2" and lock.held
    assert broker.try_lock_task("g", "0_2") is None
    with EmbeddedBroker(tmp_path) as other:
        assert other.try_lock_task("g", "0_2") is None
        owner = other.task_owner("g", "0_2")
    assert owner["pid"] == os.getpid() and "host" in owner
    assert broker.list_groups() == ["g"]
    lock.release()
    lock.release()
    assert not lock.held
    assert broker.task_owner("g", "0_2") is None
    with broker.try_lock_task("g", "0_2") as again:
        assert again is not None
    assert broker.task_owner("g", "0_2") is None


def test_a_stale_owner_file_is_not_reported(broker, tmp_path):
    lock = broker.try_lock_task("g", "1_0")
    owner_file = tmp_path / "groups" / "g" / "tasks" / "1_0.owner"
    stale = owner_file.read_text()
    lock.release()
    owner_file.write_text(stale)  # e.g. the holder died between two steps
    assert broker.task_owner("g", "1_0") is None


def test_closing_the_broker_releases_its_task_locks(tmp_path):
    first = EmbeddedBroker(tmp_path)
    assert first.try_lock_task("g", "0_0") is not None
    first.close()
    with EmbeddedBroker(tmp_path) as second:
        assert second.try_lock_task("g", "0_0") is not None
