"""What a ``--continuous`` mirror must do while the source changes, written once for any
pair of brokers: consumer groups translated again and again, partitions and topics added."""
from __future__ import annotations

from typing import Callable, Dict, List, Tuple

from prometheus_client.parser import text_string_to_metric_families

from streamkit.core.records import TopicPartition
from streamkit.transport.base import Transport

from tests.kafka.workers import wait_for

from .records import Copied, commit_group, read_all, values, write_transactions
from .running import RunningMirror, group_offsets

PARTITIONS = 2
PER = 3
"""Records per partition and transaction (each transaction also leaves a marker)."""


def copied_everything(source: Transport, target: Transport, topic: str, partitions: int) -> bool:
    """Whether ``target`` holds every committed record of ``topic`` on ``source``, in order."""
    if target.admin.topic(topic) is None or target.admin.topic(topic).partitions != partitions:
        return False
    copies = values(read_all(target, topic, partitions, wait=0.2))
    return copies == values(read_all(source, topic, partitions, wait=0.2))


def translation(source_records: List[Tuple[int, Copied]], target_records: List[Tuple[int, Copied]],
                offset: int) -> int:
    """The target offset of the first record at or after source ``offset`` (found by content:
    every test record is distinct)."""
    record = next(r for o, r in source_records if o >= offset)
    return next(o for o, r in target_records if r == record)


def follow_group_commits(source: Transport, target: Transport, topic: str, group: str, *, writer: str,
                         first: int, steps: int = 4, timeout: float = 120) -> Dict[int, int]:
    """While records keep arriving, ``group`` commits on the source at a new offset per step
    (one on a record, one after a record: on a marker or the next record); a running mirror
    translating it must set the target group, each time, to the exact translation, and
    never move it backwards meanwhile. Return the group's last source offsets."""
    seen: Dict[int, List[int]] = {p: [] for p in range(PARTITIONS)}
    offsets: Dict[int, int] = {}
    for step in range(steps):
        write_transactions(source, topic, PARTITIONS, transactions=2, per=PER, first=first, transactional_id=writer)
        first += 2 * PER
        wait_for(lambda: copied_everything(source, target, topic, PARTITIONS), timeout, "the new records copied")
        originals, copies = read_all(source, topic, PARTITIONS), read_all(target, topic, PARTITIONS)
        offsets = {0: originals[0][3 * step + 2][0], 1: originals[1][3 * step + 4][0] + 1}
        commit_group(source, group, {TopicPartition(topic, p): o for p, o in offsets.items()})
        expected = {p: translation(originals[p], copies[p], o) for p, o in offsets.items()}

        def followed() -> bool:
            now = group_offsets(target, group, topic)
            for p, o in now.items():
                seen[p].append(o)
            return now == expected

        wait_for(followed, timeout, f"step {step}: group {group} at {expected} on the target (source {offsets})")
    for p, history in seen.items():
        assert history == sorted(history), f"the target group went backwards on partition {p}: {history}"
    assert all(len(set(history)) >= steps for history in seen.values()), seen
    return offsets


def moved_app_reads_exactly_the_rest(source: Transport, target: Transport, topic: str, group: str,
                                     source_offsets: Dict[int, int], *, writer: str, first: int,
                                     timeout: float = 120) -> None:
    """An app that read ``topic`` on the source up to ``source_offsets`` and goes on, on the
    target, from its translated group reads every other record once: none skipped, none twice."""
    write_transactions(source, topic, PARTITIONS, transactions=1, per=PER, first=first, transactional_id=writer)
    wait_for(lambda: copied_everything(source, target, topic, PARTITIONS), timeout, "the last records copied")
    originals = values(read_all(source, topic, PARTITIONS))
    read_on_source = {p: [r for o, r in read_all(source, topic, PARTITIONS)[p] if o < source_offsets[p]]
                      for p in range(PARTITIONS)}
    on_target = values(read_all(target, topic, PARTITIONS, start=group_offsets(target, group, topic)))
    for p in range(PARTITIONS):
        assert read_on_source[p] + on_target[p] == originals[p], p
        assert on_target[p], p


def metric(text: str, name: str, **labels: str) -> float:
    """The value of sample ``name`` with ``labels`` in /metrics ``text`` (NaN when absent)."""
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                return sample.value
    return float("nan")


def grown_and_new_topics_are_mirrored(source: Transport, target: Transport, mirror: RunningMirror, name: str,
                                      topic: str, late_topic: str, *, add_partitions: Callable[[str, int], None],
                                      create_topic: Callable[[str, int], None], writer: str,
                                      timeout: float = 120) -> None:
    """``topic`` (2 partitions, mirrored) grows to 4 on the source and ``late_topic`` appears
    while the mirror runs: the target gets both, partition for partition, and /metrics counts
    the new partitions as the others."""
    add_partitions(topic, 4)
    write_transactions(source, topic, 4, transactions=2, per=PER, first=1000, transactional_id=writer)
    create_topic(late_topic, 3)
    write_transactions(source, late_topic, 3, transactions=2, per=PER, transactional_id=writer)
    wait_for(lambda: copied_everything(source, target, topic, 4), timeout, f"{topic}'s new partitions mirrored")
    wait_for(lambda: copied_everything(source, target, late_topic, 3), timeout, f"the new topic {late_topic} mirrored")
    assert all(values(read_all(target, topic, 4))[p] for p in (2, 3))

    def counted() -> bool:
        text = mirror.scrape()
        return (metric(text, "streamkit_mirror_topic_partitions", mirror=name, topic=topic, side="target") == 4
                and metric(text, "streamkit_mirror_topic_partitions", mirror=name, topic=topic, side="source") == 4
                and metric(text, "streamkit_mirror_lag_records", mirror=name, topic=topic, partition="3") == 0
                and metric(text, "streamkit_mirror_position", mirror=name, topic=topic, partition="3")
                == source.admin.partition_offsets(topic, 3).end
                and metric(text, "streamkit_mirror_records_copied_total", mirror=name, topic=topic, partition="3") > 0)

    wait_for(counted, timeout, "the new partitions in /metrics")
    assert f"topic '{topic}' grew from 2 to 4 partition(s) on the source: added on the target" in mirror.log()
