"""``streamkit mirror --continuous`` between embedded brokers while the source changes:
groups translated again and again (exact, never past the copy, never backwards, never
under a live group), partitions added to a mirrored topic, new topics picked up."""
from __future__ import annotations

import asyncio
from pathlib import Path

from streamkit.core.partitioner import partition_for_key
from streamkit.core.records import TopicPartition
from streamkit.mirror.groups import translate_groups
from streamkit.runtime.ordering.writer_merge import CommitNote
from streamkit.transport.embedded.admin import add_partitions
from streamkit.transport.embedded.transport import EmbeddedTransport

from tests.kafka.workers import wait_for

from .continuous import (PARTITIONS, copied_everything, follow_group_commits, grown_and_new_topics_are_mirrored,
                         metric, moved_app_reads_exactly_the_rest, translation)
from .records import commit_group, read_all, values, write_transactions
from .running import RunningMirror, group_offsets


def _urls(tmp_path: Path):
    return ("--from", f"embedded://{tmp_path / 'a'}", "--to", f"embedded://{tmp_path / 'b'}")


def test_a_group_committing_on_the_source_is_followed_on_the_target(tmp_path: Path) -> None:
    source = EmbeddedTransport(str(tmp_path / "a"))
    target = EmbeddedTransport(str(tmp_path / "b"))
    source.admin.create_topic("events", PARTITIONS, {"retention.ms": "-1"})
    write_transactions(source, "events", PARTITIONS, transactions=2, per=3)
    with RunningMirror(tmp_path / "mirror.log", *_urls(tmp_path), "--translate-groups", "app",
                       "--translate-interval", "1", "--rescan-interval", "1") as mirror:
        offsets = follow_group_commits(source, target, "events", "app", writer="writer", first=6)

        # While the group lives on the target, the mirror leaves it alone (and says so once).
        def refusals() -> float:
            return metric(mirror.scrape(), "streamkit_mirror_group_translations_total", group="app", outcome="refused")

        member = target.broker.join_group("app")
        try:
            wait_for(lambda: refusals() >= 1, 60, "the mirror to see the live group")
            before = group_offsets(target, "app", "events")
            moved_on = {TopicPartition("events", p): o + 3 for p, o in offsets.items()}
            commit_group(source, "app", moved_on)
            seen = refusals()
            wait_for(lambda: refusals() >= seen + 2, 60, "two more translations while the group is live")
            assert group_offsets(target, "app", "events") == before
            assert "group 'app' not translated: group 'app' has 1 live member(s)" in mirror.log()
        finally:
            member.leave()
        originals, copies = read_all(source, "events", PARTITIONS), read_all(target, "events", PARTITIONS)
        expected = {tp.partition: translation(originals[tp.partition], copies[tp.partition], o)
                    for tp, o in moved_on.items()}
        wait_for(lambda: group_offsets(target, "app", "events") == expected, 60, "the translation once the group left")
        assert mirror.log().count("group 'app' not translated") == 1

        moved_app_reads_exactly_the_rest(source, target, "events", "app",
                                         {tp.partition: o for tp, o in moved_on.items()}, writer="writer", first=100)


def test_a_group_ahead_of_the_mirror_is_translated_to_the_mirrored_position_never_past_nor_back(
        tmp_path: Path, streamkit) -> None:
    source = EmbeddedTransport(str(tmp_path / "a"))
    target = EmbeddedTransport(str(tmp_path / "b"))
    source.admin.create_topic("events", 2, {"retention.ms": "-1"})
    write_transactions(source, "events", 2, transactions=3, per=4)  # offsets 0..14, end 15
    done = streamkit("mirror", *_urls(tmp_path), "--until-caught-up")
    assert done.returncode == 0, done.stderr[-3000:]
    write_transactions(source, "events", 2, transactions=2, per=4, first=12)  # not mirrored yet: 15..24
    p0, p1 = TopicPartition("events", 0), TopicPartition("events", 1)
    note = CommitNote(1_700_000_000_021, {1: 8, 2: 23})
    commit_group(source, "app", {p0: 22, p1: 9}, {p0: note.encode(22)})

    [result] = asyncio.run(translate_groups(source, target, "mirror", ["app"], {"events": True}))
    originals, copies = read_all(source, "events", 2), read_all(target, "events", 2)
    after_last_copy = copies[0][-1][0] + 1
    assert result.held_back == {p0: (22, 15)} and result.offsets[p0] == after_last_copy
    assert result.offsets[p1] == translation(originals[1], copies[1], 9)
    assert group_offsets(target, "app", "events") == {0: after_last_copy, 1: result.offsets[p1]}
    held = CommitNote.decode(target.broker.committed_metadata("app")[p0], after_last_copy)
    assert held == CommitNote(note.stream_time, {1: translation(originals[0], copies[0], 8)})  # 23: not copied

    commit_group(source, "app", {p1: 2})  # the source group went back: the target's stays
    [again] = asyncio.run(translate_groups(source, target, "mirror", ["app"], {"events": True}))
    assert again.offsets == {} and "left there" in again.skipped[p1]
    assert group_offsets(target, "app", "events") == {0: after_last_copy, 1: result.offsets[p1]}

    done = streamkit("mirror", *_urls(tmp_path), "--until-caught-up", "--translate-groups", "app")
    assert done.returncode == 0, done.stderr[-3000:]
    originals, copies = read_all(source, "events", 2), read_all(target, "events", 2)
    exact = translation(originals[0], copies[0], 22)
    assert group_offsets(target, "app", "events")[0] == exact
    moved = CommitNote.decode(target.broker.committed_metadata("app")[p0], exact)
    assert moved.cursor == {1: translation(originals[0], copies[0], 8), 2: translation(originals[0], copies[0], 23)}


def test_partitions_added_and_topics_created_on_the_source_are_mirrored(tmp_path: Path) -> None:
    source = EmbeddedTransport(str(tmp_path / "a"))
    target = EmbeddedTransport(str(tmp_path / "b"))
    source.admin.create_topic("events", 2, {"retention.ms": "-1"})
    write_transactions(source, "events", 2, transactions=2, per=3)
    with RunningMirror(tmp_path / "mirror.log", *_urls(tmp_path), "--include", "events|late-.*",
                       "--rescan-interval", "1") as mirror:
        wait_for(lambda: copied_everything(source, target, "events", 2), 60, "the first records copied")
        grown_and_new_topics_are_mirrored(
            source, target, mirror, "mirror", "events", "late-orders",
            add_partitions=lambda topic, n: add_partitions(source.broker, topic, n),
            create_topic=lambda topic, n: source.admin.create_topic(topic, n, {"retention.ms": "-1"}),
            writer="writer")
    assert target.admin.topic("late-orders").config == {"retention.ms": "-1"}


def test_a_source_grown_while_the_mirror_was_stopped_grows_the_target_on_restart(tmp_path: Path, streamkit) -> None:
    source = EmbeddedTransport(str(tmp_path / "a"))
    source.admin.create_topic("events", 2, {"retention.ms": "-1"})
    write_transactions(source, "events", 2, transactions=2, per=3)
    assert streamkit("mirror", *_urls(tmp_path), "--until-caught-up").returncode == 0
    add_partitions(source.broker, "events", 3)
    write_transactions(source, "events", 3, transactions=1, per=3, first=6)
    done = streamkit("mirror", *_urls(tmp_path), "--until-caught-up")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "2 resumed from the position committed on the target" in done.stderr
    target = EmbeddedTransport(str(tmp_path / "b"))
    assert target.admin.topic("events").partitions == 3
    assert values(read_all(target, "events", 3)) == values(read_all(source, "events", 3))


def test_with_repartition_the_target_keeps_its_count_when_the_source_grows(tmp_path: Path) -> None:
    source = EmbeddedTransport(str(tmp_path / "a"))
    target = EmbeddedTransport(str(tmp_path / "b"))
    source.admin.create_topic("events", 2, {"retention.ms": "-1"})
    target.admin.create_topic("events", 3, {"retention.ms": "-1"})
    write_transactions(source, "events", 2, transactions=2, per=6)
    with RunningMirror(tmp_path / "mirror.log", *_urls(tmp_path), "--repartition", "--rescan-interval", "1") as mirror:
        wait_for(lambda: sum(map(len, values(read_all(target, "events", 3, wait=0.2)).values())) == 2 * 12, 60,
                 "the first records copied")
        add_partitions(source.broker, "events", 5)
        write_transactions(source, "events", 5, transactions=2, per=6, first=12)
        wait_for(lambda: sum(map(len, values(read_all(target, "events", 3, wait=0.2)).values())) == 2 * 12 + 5 * 12,
                 60, "every record copied by key")
        assert "grew from 2 to 5 partition(s) on the source: the new ones are copied by key into the target's 3" \
            in mirror.log()
    assert target.admin.topic("events").partitions == 3
    copied = values(read_all(target, "events", 3))
    original = values(read_all(source, "events", 5))
    assert sorted(r for rs in copied.values() for r in rs) == sorted(r for rs in original.values() for r in rs)
    for partition, records in copied.items():
        assert all(partition_for_key(key, 3) == partition for key, *_ in records)
    for p, records in original.items():  # each source partition's order, per key
        for key in {r[0] for r in records}:
            mine = [r for r in records if r[0] == key]
            assert [r for r in copied[partition_for_key(key, 3)] if r in mine] == mine
