"""``streamkit broker clean``: the embedded log's housekeeping without a worker (issue 37):
retention by time of an idle topic whose only segment is the active one, and the purge of
repartition topics below the groups' commits, through the real CLI."""
from __future__ import annotations

from pathlib import Path

from streamkit.broker import EmbeddedBroker
from streamkit.core.records import TopicPartition
from streamkit.transport.base import PartitionOffsets

OLD_MS = 1_000_000_000_000  # 2001: far past any retention


def _lines(stdout: str) -> dict:
    rows = [line.split() for line in stdout.splitlines()[1:] if line.strip()]
    return {row[0]: row[1:] for row in rows}


def test_broker_clean_deletes_an_idle_topics_expired_records_and_purges_repartition_topics(
        cli, broker_dir: Path) -> None:
    with EmbeddedBroker(broker_dir) as broker:
        broker.create_topic("old-events", 1, {"retention.ms": "60000"})
        broker.append("old-events", 0, [(b"k%d" % i, b"v", OLD_MS + i, None) for i in range(25)])
        broker.create_topic("kept", 1, {"retention.ms": "-1"})
        broker.append("kept", 0, [(b"k", b"v", OLD_MS, None)])
        broker.create_topic("app-counts-repartition", 2, {"retention.ms": "-1"})
        for partition in (0, 1):
            broker.append("app-counts-repartition", partition, [(b"k", b"v%d" % i, OLD_MS, None) for i in range(10)])
        broker.commit_offsets("app", {TopicPartition("app-counts-repartition", 0): 6})

    done = cli("broker", "clean")
    assert done.returncode == 0, done.stderr
    rows = _lines(done.stdout)
    assert rows["old-events"][:4] == ["1", "1", "0", "25"]  # rolled, deleted, compacted, records removed
    assert rows["kept"][:4] == ["0", "0", "0", "0"]
    assert rows["app-counts-repartition"][-1] == "0:6"  # partition 1: no group committed there

    with EmbeddedBroker(broker_dir) as broker:
        assert broker.partition_offsets("old-events", 0) == PartitionOffsets(25, 25)
        assert broker.partition_offsets("kept", 0) == PartitionOffsets(0, 1)
        assert broker.partition_offsets("app-counts-repartition", 0) == PartitionOffsets(6, 10)
        assert broker.partition_offsets("app-counts-repartition", 1) == PartitionOffsets(0, 10)
        assert broker.append("old-events", 0, [(b"k", b"new", OLD_MS, None)]) == 25  # offsets go on

    again = cli("broker", "clean")
    assert again.returncode == 0 and _lines(again.stdout)["app-counts-repartition"][-1] == "-"


def test_broker_clean_refuses_a_kafka_broker(cli) -> None:
    done = cli("broker", "clean", "--broker", "kafka://127.0.0.1:9")
    assert done.returncode == 2
    assert "Apache Kafka runs its own retention" in done.stderr
