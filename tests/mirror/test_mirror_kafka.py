"""``streamkit mirror`` with Apache Kafka on either side: embedded → Kafka, Kafka → Kafka,
Kafka → embedded; exactly once into Kafka across a kill -9; group translation on Kafka."""
from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from streamkit.core.records import TopicPartition
from streamkit.transport.embedded.transport import EmbeddedTransport

from tests.kafka.topics import create_test_topic, kafka_transport
from tests.kafka.workers import wait_for

from .conftest import REPO
from .records import commit_group, committed, read_all, values, write_transactions


def _env(*brokers) -> dict:
    env = {}
    for broker in brokers:
        env.update(broker.streamkit_env())
    return env


def test_embedded_to_kafka_keeps_records_partitions_and_configs(tmp_path: Path, kafka, unique_name,
                                                                 streamkit) -> None:
    topic = unique_name("orders")
    source = EmbeddedTransport(str(tmp_path / "a"))
    source.admin.create_topic(topic, 3, {"retention.ms": "-1", "retention.bytes": "1000000000"})
    write_transactions(source, topic, 3, transactions=5, per=4)
    done = streamkit("mirror", "--from", f"embedded://{tmp_path / 'a'}", "--to", kafka.url, "--name", topic,
                     "--until-caught-up", env=_env(kafka))
    assert done.returncode == 0, done.stderr[-3000:]
    with kafka_transport(kafka) as target:
        meta = target.admin.topic(topic)
        assert meta.partitions == 3
        assert {k: meta.config.get(k) for k in ("retention.ms", "retention.bytes", "message.timestamp.type")} == \
            {"retention.ms": "-1", "retention.bytes": "1000000000", "message.timestamp.type": "CreateTime"}
        assert values(read_all(target, topic, 3)) == values(read_all(source, topic, 3))


def test_kafka_to_kafka_and_its_groups(kafka, second_kafka, unique_name, streamkit) -> None:
    topic = unique_name("clicks")
    with kafka_transport(kafka) as source, kafka_transport(second_kafka) as target:
        create_test_topic(source.admin, topic, 2)
        write_transactions(source, topic, 2, transactions=6, per=3, transactional_id=unique_name("w"))
        originals = read_all(source, topic, 2)
        offsets = {TopicPartition(topic, 0): originals[0][4][0], TopicPartition(topic, 1): originals[1][9][0] + 1}
        group = unique_name("readers")
        commit_group(source, group, offsets, {TopicPartition(topic, 0): "my-note"})
        done = streamkit("mirror", "--from", kafka.url, "--to", second_kafka.url, "--include", topic,
                         "--name", topic, "--until-caught-up", "--translate-groups", group,
                         env=_env(kafka, second_kafka))
        assert done.returncode == 0, done.stderr[-3000:]
        copies = read_all(target, topic, 2)
        assert values(copies) == values(originals)
        translated = committed(target, group, list(offsets))
        for tp, offset in offsets.items():
            assert [r for o, r in copies[tp.partition] if o >= translated[tp]] == \
                [r for o, r in originals[tp.partition] if o >= offset]


def test_kafka_to_embedded_keeps_what_the_embedded_log_understands(tmp_path: Path, kafka, unique_name,
                                                                   streamkit) -> None:
    topic = unique_name("profiles")
    with kafka_transport(kafka) as source:
        create_test_topic(source.admin, topic, 2, {"cleanup.policy": "compact", "max.message.bytes": "200000"})
        write_transactions(source, topic, 2, transactions=3, per=5, transactional_id=unique_name("w"))
        done = streamkit("mirror", "--from", kafka.url, "--to", f"embedded://{tmp_path / 'b'}", "--include", topic,
                         "--name", topic, "--until-caught-up", env=_env(kafka))
        assert done.returncode == 0, done.stderr[-3000:]
        warning = next(line for line in done.stderr.splitlines() if "not understood by the target" in line)
        assert f"topic '{topic}': configs " in warning and "max.message.bytes=200000" in warning
        target = EmbeddedTransport(str(tmp_path / "b"))
        assert target.admin.topic(topic).config == {"cleanup.policy": "compact"}
        assert values(read_all(target, topic, 2)) == values(read_all(source, topic, 2))


def test_a_mirror_killed_mid_copy_resumes_without_loss_or_duplicate(tmp_path: Path, kafka, unique_name,
                                                                    streamkit) -> None:
    topic = unique_name("bulk")
    source = EmbeddedTransport(str(tmp_path / "a"))
    source.admin.create_topic(topic, 3, {"retention.ms": "-1"})
    write_transactions(source, topic, 3, transactions=60, per=500)  # 90,000 records
    command = [sys.executable, "-m", "streamkit", "mirror", "--from", f"embedded://{tmp_path / 'a'}", "--to",
               kafka.url, "--name", topic, "--continuous"]
    with kafka_transport(kafka) as target:
        for _attempt in range(2):  # killed twice, each time once some records are on Kafka
            before = sum(target.admin.partition_offsets(topic, p).end for p in range(3)) \
                if target.admin.topic(topic) else 0
            log = open(tmp_path / "mirror.log", "a")
            proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=log, cwd=REPO,
                                    env={**__import__("os").environ, "PYTHONPATH": str(REPO), **_env(kafka)})
            try:
                wait_for(lambda: target.admin.topic(topic) is not None and
                         sum(target.admin.partition_offsets(topic, p).end for p in range(3)) > before + 1000,
                         120, "the mirror to copy records")
            finally:
                proc.kill()  # SIGKILL: mid-transaction, most likely
                proc.wait(30)
                log.close()
        done = streamkit("mirror", "--from", f"embedded://{tmp_path / 'a'}", "--to", kafka.url, "--name", topic,
                         "--until-caught-up", env=_env(kafka))
        assert done.returncode == 0, done.stderr[-3000:]
        assert "resumed from the position committed on the target" in done.stderr
        copied = values(read_all(target, topic, 3))
        assert sum(len(v) for v in copied.values()) == 90_000
        assert copied == values(read_all(source, topic, 3))


def test_a_continuous_kafka_to_kafka_mirror_follows_groups_and_grows_with_its_source(
        tmp_path: Path, kafka, second_kafka, unique_name) -> None:
    import re

    from .continuous import follow_group_commits, grown_and_new_topics_are_mirrored, moved_app_reads_exactly_the_rest
    from .running import RunningMirror

    topic, late, group, writer = unique_name("stream"), unique_name("late"), unique_name("app"), unique_name("w")
    with kafka_transport(kafka) as source, kafka_transport(second_kafka) as target:
        create_test_topic(source.admin, topic, 2)
        write_transactions(source, topic, 2, transactions=2, per=3, transactional_id=writer)
        with RunningMirror(tmp_path / "mirror.log", "--from", kafka.url, "--to", second_kafka.url,
                           "--include", f"{re.escape(topic)}|{re.escape(late)}", "--name", topic,
                           "--translate-groups", group, "--translate-interval", "1", "--rescan-interval", "1",
                           env=_env(kafka, second_kafka)) as mirror:
            offsets = follow_group_commits(source, target, topic, group, writer=writer, first=6)
            moved_app_reads_exactly_the_rest(source, target, topic, group, offsets, writer=writer, first=100)
            grown_and_new_topics_are_mirrored(
                source, target, mirror, topic, topic, late,
                add_partitions=source.admin.add_partitions,
                create_topic=lambda name, n: create_test_topic(source.admin, name, n), writer=writer)
