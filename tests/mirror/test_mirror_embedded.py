"""``streamkit mirror`` between embedded brokers: what is copied, what is skipped, resuming,
re-partitioning and group translation (the embedded broker has transactions: exactly once)."""
from __future__ import annotations

from pathlib import Path

import pytest

from streamkit.core.records import TopicPartition
from streamkit.mirror.offset_syncs import OffsetRun, PartitionOffsetMap, runs_of
from streamkit.runtime.ordering.writer_merge import CommitNote
from streamkit.transport.embedded.transport import EmbeddedTransport
from streamkit.core.partitioner import partition_for_key

from .records import commit_group, committed, read_all, values, write_transactions


def _mirror(streamkit, source: Path, target: Path, *args: str):
    done = streamkit("mirror", "--from", f"embedded://{source}", "--to", f"embedded://{target}", *args)
    assert done.returncode == 0, done.stderr[-3000:]
    return done


def test_runs_map_every_copied_record_and_every_position_between() -> None:
    runs = runs_of([3, 4, 5, 8, 9, 12], 100)
    assert runs == [OffsetRun(3, 100, 3), OffsetRun(8, 103, 2), OffsetRun(12, 105, 1)]
    mapping = PartitionOffsetMap(runs)
    assert [mapping.record(o) for o in (3, 5, 6, 8, 12)] == [100, 102, None, 103, 105]
    # The next offset to read → the first copied record at or after it; past the last, after it.
    assert [mapping.position(o) for o in (0, 3, 4, 6, 7, 8, 10, 12, 13, 50)] == \
        [100, 100, 101, 103, 103, 103, 105, 105, 106, 106]
    assert PartitionOffsetMap().position(5) == 0


def test_a_long_running_map_stays_bounded_and_never_translates_past_the_exact_position(monkeypatch) -> None:
    from streamkit.mirror import offset_syncs

    monkeypatch.setattr(offset_syncs, "EXACT_RUNS", 50)
    history, bounded = [], PartitionOffsetMap()
    source, target = 0, 0
    for transaction in range(2_000):  # 3 records per transaction, a marker after each on both sides
        history.append(OffsetRun(source, target, 3))
        bounded.add(history[-1:])
        source, target = source + 4, target + 4 + transaction % 2
    monkeypatch.setattr(offset_syncs, "EXACT_RUNS", len(history))
    exact = PartitionOffsetMap(history)  # the whole history, unthinned, as the reference
    assert len(bounded.runs) <= 100
    recent_from = bounded.runs[-50].source
    for position in range(0, source + 2):
        if position >= recent_from:
            assert bounded.position(position) == exact.position(position)
            assert bounded.record(position) == exact.record(position)
        else:
            assert bounded.position(position) <= exact.position(position)  # at least once, never a skip
            assert bounded.record(position) in (None, exact.record(position))


def test_records_configs_and_partitions_are_copied_and_skips_are_said(tmp_path: Path, streamkit) -> None:
    source = EmbeddedTransport(str(tmp_path / "a"))
    source.admin.create_topic("events", 3, {"retention.ms": "-1", "retention.bytes": "1000000000"})
    source.admin.create_topic("audit", 1, {"cleanup.policy": "compact"})
    source.admin.create_topic("noise", 1)
    source.admin.create_topic("shop-counts-changelog", 2, {"cleanup.policy": "compact"})
    write_transactions(source, "events", 3, transactions=4, per=5)
    write_transactions(source, "shop-counts-changelog", 2, transactions=2, per=3, transactional_id="w2")
    expected = values(read_all(source, "events", 3))

    done = _mirror(streamkit, tmp_path / "a", tmp_path / "b", "--include", "events|noise|shop-.*",
                   "--exclude", "noi.*", "--until-caught-up")
    assert "not mirroring topic 'audit': matches no --include pattern" in done.stderr
    assert "not mirroring topic 'noise': matches --exclude 'noi.*'" in done.stderr
    assert "not mirroring topic 'shop-counts-changelog': an app's internal topic" in done.stderr
    target = EmbeddedTransport(str(tmp_path / "b"))
    assert {t.name for t in target.admin.list_topics()} == {"events", "streamkit-mirror.mirror.offset-syncs"}
    events = target.admin.topic("events")
    assert events.partitions == 3 and events.config == {"retention.ms": "-1", "retention.bytes": "1000000000"}
    assert values(read_all(target, "events", 3)) == expected  # key, value, timestamp, headers, partition
    assert sum(len(v) for v in expected.values()) == 60

    _mirror(streamkit, tmp_path / "a", tmp_path / "b", "--include-internal", "--exclude", "noise|audit",
            "--until-caught-up")
    changelog = target.admin.topic("shop-counts-changelog")
    assert changelog.partitions == 2 and changelog.config == {"cleanup.policy": "compact"}
    assert values(read_all(target, "shop-counts-changelog", 2)) == values(read_all(source, "shop-counts-changelog", 2))
    assert values(read_all(target, "events", 3)) == expected  # resumed: nothing copied twice


def test_a_rerun_copies_only_what_is_new(tmp_path: Path, streamkit) -> None:
    source = EmbeddedTransport(str(tmp_path / "a"))
    source.admin.create_topic("events", 2, {"retention.ms": "-1"})
    write_transactions(source, "events", 2, transactions=3, per=4)
    _mirror(streamkit, tmp_path / "a", tmp_path / "b", "--until-caught-up")
    write_transactions(source, "events", 2, transactions=2, per=4, first=12)
    done = _mirror(streamkit, tmp_path / "a", tmp_path / "b", "--until-caught-up")
    assert "2 resumed from the position committed on the target" in done.stderr
    target = EmbeddedTransport(str(tmp_path / "b"))
    assert values(read_all(target, "events", 2)) == values(read_all(source, "events", 2))
    status = streamkit("mirror", "--from", f"embedded://{tmp_path / 'a'}", "--to", f"embedded://{tmp_path / 'b'}",
                       "--status")
    assert status.returncode == 0 and "total lag 0" in status.stdout, status.stdout + status.stderr


def test_repartition_places_records_by_key(tmp_path: Path, streamkit) -> None:
    source = EmbeddedTransport(str(tmp_path / "a"))
    source.admin.create_topic("events", 3, {"retention.ms": "-1"})
    write_transactions(source, "events", 3, transactions=2, per=6)
    target = EmbeddedTransport(str(tmp_path / "b"))
    target.admin.create_topic("events", 2, {"retention.ms": "-1"})
    _mirror(streamkit, tmp_path / "a", tmp_path / "b", "--repartition", "--until-caught-up")
    copied = values(read_all(target, "events", 2))
    assert sum(len(v) for v in copied.values()) == 36
    for partition, records in copied.items():
        assert all(partition_for_key(key, 2) == partition for key, *_ in records)
    original = values(read_all(source, "events", 3))
    for key in {r[0] for rs in original.values() for r in rs}:  # each source partition's order, per key
        for p, records in original.items():
            mine = [r for r in records if r[0] == key]
            assert [r for r in copied[partition_for_key(key, 2)] if r in mine] == mine


def test_group_offsets_are_translated_exactly_over_transaction_gaps(tmp_path: Path, streamkit) -> None:
    source = EmbeddedTransport(str(tmp_path / "a"))
    source.admin.create_topic("events", 2, {"retention.ms": "-1"})
    write_transactions(source, "events", 2, transactions=5, per=3)  # 3 records + a marker, 5 times
    originals = read_all(source, "events", 2)
    # Positions after a record, on a marker, at the start and at the end; a streamkit note with a cursor.
    positions = {TopicPartition("events", 0): 5, TopicPartition("events", 1): 7}
    note = CommitNote(1_700_000_000_009, {1: 9})
    commit_group(source, "app", positions, {TopicPartition("events", 1): note.encode(7)})
    commit_group(source, "app-done", {TopicPartition("events", 0): 20, TopicPartition("events", 1): 0})
    _mirror(streamkit, tmp_path / "a", tmp_path / "b", "--until-caught-up", "--translate-groups", "app,app-done")

    target = EmbeddedTransport(str(tmp_path / "b"))
    copies = read_all(target, "events", 2)
    for group, offsets in (("app", positions), ("app-done", {TopicPartition("events", 0): 20,
                                                             TopicPartition("events", 1): 0})):
        translated = committed(target, group, list(offsets))
        for tp, offset in offsets.items():
            left_on_source = [r for o, r in originals[tp.partition] if o >= offset]
            left_on_target = [r for o, r in copies[tp.partition] if o >= translated[tp]]
            assert left_on_target == left_on_source, (group, tp, offset, translated[tp])
    metadata = target.broker.committed_metadata("app")[TopicPartition("events", 1)]
    moved = CommitNote.decode(metadata, committed(target, "app", [TopicPartition("events", 1)])
                              [TopicPartition("events", 1)])
    record_9 = next(r for o, r in originals[1] if o == 9)
    assert moved.stream_time == note.stream_time
    assert [r for o, r in copies[1] if o == moved.cursor[1]] == [record_9]


def test_translation_is_refused_while_the_group_lives_on_the_target(tmp_path: Path, streamkit) -> None:
    source = EmbeddedTransport(str(tmp_path / "a"))
    source.admin.create_topic("events", 1, {"retention.ms": "-1"})
    write_transactions(source, "events", 1, transactions=2, per=2)
    commit_group(source, "app", {TopicPartition("events", 0): 3})
    target = EmbeddedTransport(str(tmp_path / "b"))
    member = target.broker.join_group("app")
    try:
        done = streamkit("mirror", "--from", f"embedded://{tmp_path / 'a'}", "--to", f"embedded://{tmp_path / 'b'}",
                         "--until-caught-up", "--translate-groups", "app")
    finally:
        member.leave()
    assert done.returncode == 1
    assert "group 'app' not translated: group 'app' has 1 live member(s)" in done.stderr
    assert committed(target, "app", [TopicPartition("events", 0)]) == {}


@pytest.mark.parametrize("flag", ["--until-caught-up", "--status"])
def test_unknown_patterns_and_missing_mode_are_usage_errors(tmp_path: Path, streamkit, flag: str) -> None:
    done = streamkit("mirror", "--from", f"embedded://{tmp_path / 'a'}", "--to", f"embedded://{tmp_path / 'b'}",
                     "--include", "(", flag)
    assert done.returncode == 1 and "topic pattern '(' is not a regular expression" in done.stderr
    done = streamkit("mirror", "--from", f"embedded://{tmp_path / 'a'}", "--to", f"embedded://{tmp_path / 'b'}")
    assert done.returncode == 2 and "--until-caught-up or --continuous" in done.stderr


def test_continuous_mirror_serves_its_lag_and_stops_on_sigterm(tmp_path: Path) -> None:
    import os
    import signal
    import socket
    import subprocess
    import sys
    import urllib.request

    from tests.kafka.workers import wait_for

    from .conftest import REPO

    source = EmbeddedTransport(str(tmp_path / "a"))
    source.admin.create_topic("events", 2, {"retention.ms": "-1"})
    write_transactions(source, "events", 2, transactions=3, per=4)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = subprocess.Popen([sys.executable, "-m", "streamkit", "mirror", "--from", f"embedded://{tmp_path / 'a'}",
                             "--to", f"embedded://{tmp_path / 'b'}", "--continuous", "--metrics", f"127.0.0.1:{port}"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env={**os.environ, "PYTHONPATH": str(REPO)})
    try:
        def scrape() -> str:
            try:
                return urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5).read().decode()
            except OSError:
                return ""
        wait_for(lambda: 'streamkit_mirror_position{mirror="mirror",partition="1",topic="events"} 15.0' in scrape(),
                 60, "the mirror's position in /metrics")
        assert 'streamkit_mirror_lag_records{mirror="mirror",partition="0",topic="events"}' in scrape()
        write_transactions(source, "events", 2, transactions=1, per=4, first=12)
        target = EmbeddedTransport(str(tmp_path / "b"))
        wait_for(lambda: sum(len(v) for v in values(read_all(target, "events", 2, wait=0.1)).values()) == 32,
                 60, "the new records on the target")
    finally:
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err[-3000:]
    assert values(read_all(target, "events", 2)) == values(read_all(source, "events", 2))
