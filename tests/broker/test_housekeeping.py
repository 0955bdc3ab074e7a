"""Retention and compaction on real segment files, with readers in this and other processes."""
import fcntl
import json
import logging
import os
import threading
import time
from pathlib import Path

import pytest

from streamkit.transport.base import PartitionOffsets
from streamkit.broker import EmbeddedBroker
from streamkit.broker.batch_format import FLAG_COMPACTED, HEADER
from tests.broker.subprocesses import TIMEOUT, finish, spawn, wait_for_line

DAY = 86_400_000


def partition_dir(root, topic="t", partition=0):
    return Path(root) / "topics" / topic / str(partition)


def segments(root, topic="t"):
    return sorted(int(p.stem) for p in partition_dir(root, topic).glob("*.log"))


def batch_flags(path):
    data = Path(path).read_bytes()
    pos, flags = 0, []
    while pos < len(data):
        length, _crc, _magic, f, *_ = HEADER.unpack_from(data, pos)
        flags.append(f)
        pos += 4 + length
    return flags


def read_all(reader, n=10_000):
    out = []
    while True:
        got = reader.read(n)
        if not got:
            return out
        out.extend(got)


def kv(records):
    return [(r[0], r[2], r[3]) for r in records]


# ---------------------------------------------------------------- configuration

def test_topic_configs_are_checked_and_returned_as_given(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        config = {"cleanup.policy": "compact,delete", "retention.ms": "-1",
                  "retention.bytes": 1000, "segment.bytes": "512",
                  "delete.retention.ms": "5", "min.compaction.lag.ms": "0"}
        b.create_topic("t", 1, config)
        assert b.topic("t").config == {k: str(v) for k, v in config.items()}
        with pytest.raises(ValueError, match=r"'retention\.msec'.*cleanup\.policy.*retention\.ms"):
            b.create_topic("u", 1, {"retention.msec": "1"})
        for bad in ({"cleanup.policy": "archive"}, {"retention.ms": "-2"},
                    {"segment.bytes": "0"}, {"retention.bytes": "lots"}):
            with pytest.raises(ValueError, match=next(iter(bad)).replace(".", r"\.")):
                b.create_topic("u", 1, bad)
        assert b.topic("u") is None
        for i in range(20):  # the topic's own segment size
            b.append("t", 0, [(b"k%d" % i, b"x" * 100, i, None)])
        assert len(segments(tmp_path)) >= 4


# ---------------------------------------------------------------- retention

def fill(b, n, *, ts=lambda i: 1000 + i, size=60, topic="t"):
    for i in range(n):
        b.append(topic, 0, [(b"k%d" % i, bytes([65 + i % 26]) * size, ts(i), None)])


def test_retention_by_time_deletes_whole_old_segments_and_moves_the_start(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        b.create_topic("t", 1, {"retention.ms": "1000", "segment.bytes": "400"})
        fill(b, 40, ts=lambda i: 10_000 + 100 * i)
        before = segments(tmp_path)
        per = before[1]  # records per segment
        assert before[:3] == [0, per, 2 * per]
        reader = b.reader("t", 0)
        assert [r[0] for r in reader.read(2)] == [0, 1]

        newest_of_first = 10_000 + 100 * (per - 1)
        assert b.run_housekeeping(now_ms=newest_of_first + 1000)["t"]["segments_deleted"] == 0
        result = b.run_housekeeping(now_ms=newest_of_first + 100 * per + 1001)
        assert result["t"] == {"segments_rolled": 0, "segments_deleted": 2, "records_removed": 2 * per,
                               "segments_compacted": 0}
        start = 2 * per
        assert segments(tmp_path) == before[2:]
        assert b.partition_offsets("t", 0) == PartitionOffsets(start, 40)
        assert (partition_dir(tmp_path) / "log-start-offset").read_text().strip() == str(start)
        # the open reader finishes its (deleted) file, then continues from the start
        assert [r[0] for r in read_all(reader)] == list(range(2, per)) + list(range(start, 40))
        assert reader.take_lost() == [(per, start)]  # and says what it skipped
        fresh = b.reader("t", 0)
        assert fresh.position == start
        fresh.seek(3)
        assert fresh.position == start and fresh.read(1)[0][0] == start
        assert fresh.take_lost() == [(3, start)]

        # an active segment whose records are all too old is sealed, then deleted: an idle
        # topic is cleaned by time too (as Kafka rolls a deletable active segment)
        result = b.run_housekeeping(now_ms=10 ** 12)
        assert result["t"]["segments_rolled"] == 1
        assert segments(tmp_path) == [40]
        assert b.partition_offsets("t", 0) == PartitionOffsets(40, 40)
        assert b.append("t", 0, [(b"k", b"new", 10 ** 12, None)]) == 40
        assert b.run_housekeeping(now_ms=10 ** 12)["t"]["segments_rolled"] == 0  # fresh: kept
    with EmbeddedBroker(tmp_path) as b:  # the start survives a restart
        assert b.partition_offsets("t", 0) == PartitionOffsets(40, 41)


def test_segment_ms_seals_an_active_segment_spanning_that_much_record_time(tmp_path):
    """A low-volume topic never fills segment.bytes: its active segment is sealed once its
    records span segment.ms of record time, so retention can delete it later; a segment
    spanning less is left alone, and nothing is lost or renumbered."""
    with EmbeddedBroker(tmp_path) as b:
        b.create_topic("t", 1, {"retention.ms": "100000", "segment.ms": "5000"})
        fill(b, 10, ts=lambda i: 1_000 + 400 * i)  # spans 3.6 s
        assert b.run_housekeeping(now_ms=5_000)["t"]["segments_rolled"] == 0
        fill(b, 5, ts=lambda i: 5_000 + 400 * i)  # now spans 5.6 s
        assert b.run_housekeeping(now_ms=7_000)["t"]["segments_rolled"] == 1
        assert segments(tmp_path) == [0, 15]
        assert [r[0] for r in read_all(b.reader("t", 0))] == list(range(15))
        assert b.append("t", 0, [(b"k", b"v", 7_000, None)]) == 15
        # the sealed segment goes once all its records are past retention
        assert b.run_housekeeping(now_ms=6_600 + 100_001)["t"]["segments_deleted"] == 1
        assert b.partition_offsets("t", 0).start == 15


def test_retention_by_bytes_keeps_the_partition_under_the_limit(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        b.create_topic("t", 1, {"retention.bytes": "1200", "retention.ms": "-1",
                                "segment.bytes": "400"})
        fill(b, 40)
        assert b.run_housekeeping(now_ms=10 ** 12)["t"]["segments_deleted"] > 0
        sizes = [(partition_dir(tmp_path) / f"{s:020d}.log").stat().st_size
                 for s in segments(tmp_path)]
        assert sum(sizes) >= 1200 > sum(sizes) - sizes[0]  # one more would go under
        start = b.partition_offsets("t", 0).start
        assert [r[0] for r in read_all(b.reader("t", 0))] == list(range(start, 40))


def test_delete_policy_only_topics_are_never_compacted_and_forever_is_forever(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        b.create_topic("t", 1, {"retention.ms": "-1", "segment.bytes": "300"})
        for i in range(30):
            b.append("t", 0, [(b"same", b"v%d" % i, 1, None)])
        assert b.run_housekeeping(now_ms=10 ** 13)["t"] == {
            "segments_rolled": 0, "segments_deleted": 0, "records_removed": 0, "segments_compacted": 0}
        assert len(read_all(b.reader("t", 0))) == 30


# ---------------------------------------------------------------- compaction

def compacted_topic(b, **config):
    b.create_topic("t", 1, {"cleanup.policy": "compact", "segment.bytes": "300",
                            "delete.retention.ms": "1000", **config})


def test_compaction_keeps_the_latest_record_per_key_at_its_offset(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        compacted_topic(b)
        written = {}
        for i in range(60):
            key = b"k%d" % (i % 5)
            b.append("t", 0, [(key, b"v%d" % i, 1000 + i, (("h", b"%d" % i),))])
            written[i] = (key, b"v%d" % i)
        active = segments(tmp_path)[-1]
        result = b.run_housekeeping(now_ms=5000)
        assert result["t"]["segments_compacted"] > 0
        got = read_all(b.reader("t", 0))
        cleaned = [r for r in got if r[0] < active]
        assert len({r[2] for r in cleaned}) == len(cleaned)  # one record per key
        for offset, ts, key, value, headers in got:  # each kept record is unchanged
            assert written[offset] == (key, value) and ts == 1000 + offset
            assert headers == (("h", b"%d" % offset),)
        latest = {}  # of each key, in the range that could be cleaned
        for offset in range(active):
            latest[written[offset][0]] = offset
        assert {r[0] for r in cleaned} == set(latest.values())
        assert [r[0] for r in got if r[0] >= active] == list(range(active, 60))
        assert b.partition_offsets("t", 0) == PartitionOffsets(0, 60)
        assert any(f & FLAG_COMPACTED for s in segments(tmp_path)[:-1]
                   for f in batch_flags(partition_dir(tmp_path) / f"{s:020d}.log"))
        reader = b.reader("t", 0)  # a seek to a removed offset lands on the next record
        reader.seek(1)
        assert reader.read(1)[0][0] == min(o for o in (r[0] for r in got) if o >= 1)
        assert b.run_housekeeping(now_ms=5000)["t"]["segments_compacted"] == 0  # clean now
        assert b.append("t", 0, [(b"k0", b"new", 1, None)]) == 60
    with EmbeddedBroker(tmp_path) as b:
        assert kv(read_all(b.reader("t", 0))) == kv(got) + [(60, b"k0", b"new")]


def test_tombstones_are_dropped_only_after_delete_retention_ms(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        compacted_topic(b)
        for i in range(6):
            b.append("t", 0, [(b"gone", b"v%d" % i, 1, None), (b"kept", b"w%d" % i, 1, None)])
        b.append("t", 0, [(b"gone", None, 1, None)])  # a tombstone
        for i in range(10):
            b.append("t", 0, [(b"pad%d" % i, b"x" * 40, 1, None)])
        tombstone = 12
        b.run_housekeeping(now_ms=50_000)  # first seen: horizon = 51_000
        keys = {r[2]: r for r in read_all(b.reader("t", 0))}
        assert keys[b"gone"][0] == tombstone and keys[b"gone"][3] is None
        assert keys[b"kept"][3] == b"w5"
        assert b.run_housekeeping(now_ms=50_999)["t"]["records_removed"] == 0
        assert b"gone" in {r[2] for r in read_all(b.reader("t", 0))}
        assert b.run_housekeeping(now_ms=51_000)["t"]["records_removed"] == 1
        got = read_all(b.reader("t", 0))
        assert b"gone" not in {r[2] for r in got} and keys[b"kept"] in got


def test_records_without_a_key_are_dropped_with_a_warning(tmp_path, caplog):
    with EmbeddedBroker(tmp_path) as b:
        compacted_topic(b)
        for i in range(20):
            b.append("t", 0, [(None if i % 3 == 0 else b"k", b"v%d" % i, 1, None)])
        with caplog.at_level(logging.WARNING):
            b.run_housekeeping(now_ms=1)
        assert any("without a key" in r.getMessage() for r in caplog.records)
        active = segments(tmp_path)[-1]
        assert all(r[2] is not None for r in read_all(b.reader("t", 0)) if r[0] < active)


def test_min_compaction_lag_leaves_recent_segments_alone(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        compacted_topic(b, **{"min.compaction.lag.ms": "1000"})
        for i in range(30):
            b.append("t", 0, [(b"k", b"v%d" % i, 10_000 + i * 100, None)])
        assert b.run_housekeeping(now_ms=10_000)["t"]["records_removed"] == 0
        b.run_housekeeping(now_ms=10_000 + 1000 + 1500)  # records up to ts 11_500 may go
        offsets = [r[0] for r in read_all(b.reader("t", 0))]
        assert 0 not in offsets and offsets[-16:] == list(range(14, 30))


def test_compact_and_delete_together(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        b.create_topic("t", 1, {"cleanup.policy": "compact,delete", "segment.bytes": "300",
                                "retention.ms": "500"})
        for i in range(40):
            b.append("t", 0, [(b"k%d" % (i % 3), b"v%d" % i, 1000 + i * 10, None)])
        result = b.run_housekeeping(now_ms=1000 + 200 + 500)
        assert result["t"]["segments_deleted"] > 0 and result["t"]["segments_compacted"] > 0
        start = b.partition_offsets("t", 0).start
        assert start > 0 and all(r[0] >= start for r in read_all(b.reader("t", 0)))


def test_compaction_of_transactional_data(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        compacted_topic(b)
        for i in range(12):  # transactions 0, 4, 8 abort
            txn = b.begin_transaction("t")
            txn.append("t", 0, [(b"k%d" % (i % 3), b"txn%d" % i, 1, None)])
            txn.commit() if i % 4 else txn.abort()
        still_open = b.begin_transaction("other")
        still_open.append("t", 0, [(b"k0", b"open", 1, None)])
        for i in range(12):
            b.append("t", 0, [(b"p%d" % i, b"x" * 40, 1, None)])
        assert b.last_stable_offset("t", 0) == 24  # 12 data records + 12 markers before it
        b.run_housekeeping(now_ms=1)
        cleaned_below = max(s for s in segments(tmp_path) if s <= 24)
        assert cleaned_below > 12
        below = kv(r for r in read_all(b.reader("t", 0, read_committed=False))
                   if r[0] < cleaned_below)
        assert not [v for _, _, v in below if v in (b"txn0", b"txn4", b"txn8")]  # gone for good
        assert len({k for _, k, _ in below}) == len(below)  # one per key
        assert kv(read_all(b.reader("t", 0)))[:3] == [(o, k, v) for o, k, v in below][:3]

        still_open.commit()
        for i in range(12):
            b.append("t", 0, [(b"q%d" % i, b"x" * 40, 1, None)])
        b.run_housekeeping(now_ms=2)  # data made plain, markers kept one more pass
        b.run_housekeeping(now_ms=3)  # markers of transactions without data left: gone
        final = {r[2]: r[3] for r in read_all(b.reader("t", 0))}
        assert (final[b"k0"], final[b"k1"], final[b"k2"]) == (b"open", b"txn10", b"txn11")
        for s in segments(tmp_path)[:-1]:  # cleaned: no transactional or control batch left
            if s < cleaned_below:
                assert not any(f & 0x03 for f in batch_flags(
                    partition_dir(tmp_path) / f"{s:020d}.log"))
        assert b.last_stable_offset("t", 0) == b.partition_offsets("t", 0).end


def test_an_open_transaction_stops_compaction_at_the_last_stable_offset(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        compacted_topic(b)
        txn = b.begin_transaction("t")
        txn.append("t", 0, [(b"k", b"open", 1, None)])
        for i in range(30):
            b.append("t", 0, [(b"k", b"v%d" % i, 1, None)])
        assert b.run_housekeeping(now_ms=1)["t"]["segments_compacted"] == 0
        txn.commit()
        assert b.run_housekeeping(now_ms=1)["t"]["segments_compacted"] > 0


def test_a_reader_waiting_on_old_data_whose_marker_was_cleaned_re_reads_the_new_file(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        compacted_topic(b)
        for i in range(3):
            b.append("t", 0, [(b"p%d" % i, b"x" * 40, 1, None)])
        txn = b.begin_transaction("t")
        txn.append("t", 0, [(b"k", b"committed", 1, None)])
        b.append("t", 0, [(b"pad", b"x" * 200, 1, None)] * 2)  # the marker goes to a later segment
        txn.commit()
        for i in range(10):
            b.append("t", 0, [(b"q%d" % i, b"x" * 40, 1, None)])
        reader = b.reader("t", 0)
        assert [r[0] for r in reader.read(3)] == [0, 1, 2]  # the old file is open, before 3
        b.run_housekeeping(now_ms=1)  # the data becomes plain
        b.run_housekeeping(now_ms=2)  # the marker goes
        assert (3, b"k", b"committed") in kv(read_all(reader))


def test_a_reader_in_another_process_reads_consistently_through_compactions(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        compacted_topic(b, **{"segment.bytes": "2000", "delete.retention.ms": str(DAY)})
        written = {}
        for i in range(300):
            key = b"k%d" % (i % 17)
            value = None if i % 23 == 22 else b"v%d-" % i + b"x" * 30
            b.append("t", 0, [(key, value, 1, None)])
            written[i] = (key, value)
        reader = spawn("""
            import json, sys, time
            from streamkit.broker import EmbeddedBroker
            with EmbeddedBroker(sys.argv[1]) as b:
                r = b.reader("t", 0)
                got = r.read(5)
                print("started", flush=True)
                while not open(sys.argv[3]).read():  # until a compaction pass ran behind this position
                    time.sleep(0.001)
                while True:
                    chunk = r.read(5)
                    if not chunk and r.position >= int(open(sys.argv[2]).read() or 10**9):
                        break
                    got.extend(chunk)
                    time.sleep(0.001)
                print(json.dumps([[o, k.decode(), v and v.decode()] for o, _, k, v, _ in got]))
        """, tmp_path, tmp_path / "end", tmp_path / "go")
        (tmp_path / "end").write_text("")
        (tmp_path / "go").write_text("")
        wait_for_line(reader, "started")
        passes = 0
        for round_ in range(6):  # more data and more passes while it reads
            for i in range(300 + 50 * round_, 350 + 50 * round_):
                key = b"k%d" % (i % 17)
                b.append("t", 0, [(key, b"v%d-" % i + b"x" * 30, 1, None)])
                written[i] = (key, b"v%d-" % i + b"x" * 30)
            passes += b.run_housekeeping(now_ms=1)["t"]["segments_compacted"] > 0
            if passes:
                (tmp_path / "go").write_text("go")  # on a loaded machine it could otherwise read all first
            time.sleep(0.02)
        end = b.partition_offsets("t", 0).end
        (tmp_path / "end").write_text(str(end))
        got = json.loads(finish(reader).splitlines()[-1])
    assert passes >= 3
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets))  # increasing, no duplicates
    for offset, key, value in got:  # every record is the one written at its offset
        assert written[offset] == (key.encode(), value and value.encode())
    last_seen = {key: value for _, key, value in got}
    final = {}
    for offset in range(end):
        final[written[offset][0].decode()] = written[offset][1]
    assert last_seen == {k: v and v.decode() for k, v in final.items()}  # the latest of each key
    assert len(got) < end  # it did read compacted files


def test_one_cleaner_per_partition_across_processes_and_leftovers_are_removed(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        compacted_topic(b)
        for i in range(30):
            b.append("t", 0, [(b"k", b"v%d" % i, 1, None)])
        leftover = partition_dir(tmp_path) / "+00000000000000000000.log.dead.clean"
        leftover.write_bytes(b"half a segment")
        holder = spawn("""
            import fcntl, os, sys, time
            fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)
            fcntl.flock(fd, fcntl.LOCK_EX)
            print("locked", flush=True)
            time.sleep(60)
        """, partition_dir(tmp_path) / ".cleaner.lock")
        try:
            wait_for_line(holder, "locked")
            assert b.run_housekeeping(now_ms=1)["t"]["segments_compacted"] == 0
        finally:
            holder.kill()
            holder.wait(TIMEOUT)
        assert b.run_housekeeping(now_ms=1)["t"]["segments_compacted"] > 0
        assert not leftover.exists()
        fd = os.open(partition_dir(tmp_path) / ".cleaner.lock", os.O_RDWR)
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # released after the pass
        os.close(fd)


def test_housekeeping_in_a_background_thread_stops_with_close(tmp_path):
    b = EmbeddedBroker(tmp_path)
    b.create_topic("t", 1, {"retention.ms": "0", "segment.bytes": "300"})
    fill(b, 20)
    b.start_housekeeping(interval=0.02)
    deadline = time.monotonic() + TIMEOUT
    while len(segments(tmp_path)) > 1:
        assert time.monotonic() < deadline
        time.sleep(0.01)
    b.close()
    assert not any(t.name == "streamkit-housekeeping" for t in threading.enumerate())
