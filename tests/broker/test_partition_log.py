"""One partition in one process: offsets, segments, readers, seeks, recovery."""
import logging
import os
import random
from pathlib import Path

import pytest

from streamkit.transport.base import PartitionOffsets
from streamkit.broker import CorruptLogError, EmbeddedBroker
from streamkit.broker.batch_format import HEADER, encode_batch
from streamkit.broker.partition_log import MAX_BATCH_BYTES


def records(n, start=0, size=20):
    return [(b"k%d" % i, b"v%d-" % i + b"x" * size, 1000 + i, None)
            for i in range(start, start + n)]


def as_read(recs, first_offset):
    return [(first_offset + i, ts, k, v, h) for i, (k, v, ts, h) in enumerate(recs)]


def read_all(reader, max_records=10_000):
    out = []
    while True:
        got = reader.read(max_records)
        if not got:
            return out
        out.extend(got)


def segments(root, topic="t", partition=0):
    return sorted((Path(root) / "topics" / topic / str(partition)).glob("*.log"))


def batch_starts(path):
    """Byte positions of the batches in a segment file."""
    data = Path(path).read_bytes()
    pos, starts = 0, []
    while pos < len(data):
        starts.append(pos)
        pos += 4 + HEADER.unpack_from(data, pos)[0]
    return starts


@pytest.fixture
def broker(tmp_path):
    b = EmbeddedBroker(tmp_path, segment_bytes=1024)
    b.create_topic("t", 2)
    yield b
    b.close()


def test_offsets_are_contiguous_per_partition_across_appends_and_segment_rolls(broker, tmp_path):
    written = {0: [], 1: []}
    rng = random.Random(7)
    for i in range(40):
        partition = i % 2
        batch = records(rng.randint(1, 9), start=len(written[partition]), size=rng.randint(0, 120))
        assert broker.append("t", partition, batch) == len(written[partition])
        written[partition].extend(batch)
    for partition in (0, 1):
        assert len(segments(tmp_path, "t", partition)) > 3
        names = [int(p.stem) for p in segments(tmp_path, "t", partition)]
        assert names[0] == 0 and names == sorted(names)
        assert read_all(broker.reader("t", partition)) == as_read(written[partition], 0)
        assert broker.partition_offsets("t", partition) == \
            PartitionOffsets(0, len(written[partition]))


def test_records_survive_closing_and_reopening_the_broker(tmp_path):
    with EmbeddedBroker(tmp_path, segment_bytes=600) as first:
        first.create_topic("t", 1)
        first.append("t", 0, records(10))
        first.append("t", 0, records(10, start=10))
        first.sync()
    with EmbeddedBroker(tmp_path, segment_bytes=600) as second:
        assert second.partition_offsets("t", 0) == PartitionOffsets(0, 20)
        assert second.append("t", 0, records(5, start=20)) == 20
        assert read_all(second.reader("t", 0)) == as_read(records(25), 0)


def test_empty_append_writes_nothing_and_returns_the_end(broker):
    broker.append("t", 0, records(3))
    assert broker.append("t", 0, []) == 3
    assert broker.partition_offsets("t", 0).end == 3


def test_huge_append_is_split_into_several_batches_with_contiguous_offsets(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        b.create_topic("t", 1)
        big = [(b"k%d" % i, bytes([i]) * (MAX_BATCH_BYTES // 3), i, None) for i in range(8)]
        assert b.append("t", 0, big) == 0
        assert b.append("t", 0, records(1)) == 8
        assert len(batch_starts(segments(tmp_path)[0])) > 2
        assert read_all(b.reader("t", 0), 3) == as_read(big + records(1), 0)


def test_a_reader_created_before_appends_sees_them(broker):
    reader = broker.reader("t", 0)
    assert reader.read() == [] and reader.position == 0
    broker.append("t", 0, records(5))
    assert reader.read() == as_read(records(5), 0)
    assert reader.read() == []
    for i in range(30):  # also across segment rolls
        broker.append("t", 0, records(3, start=5 + 3 * i, size=50))
    assert read_all(reader) == as_read(records(95, size=50)[5:], 5)
    assert reader.position == 95


def test_max_records_is_honoured_and_nothing_is_skipped(broker):
    broker.append("t", 0, records(100))
    broker.append("t", 0, records(10, start=100))
    reader = broker.reader("t", 0)
    got = []
    while True:
        chunk = reader.read(7)
        assert len(chunk) <= 7
        if not chunk:
            break
        got.extend(chunk)
        assert reader.position == got[-1][0] + 1
    assert got == as_read(records(110), 0)
    assert reader.read(0) == []


def test_seek_clamps_to_the_start_lands_inside_batches_and_may_go_past_the_end(broker):
    for i in range(20):
        broker.append("t", 0, records(5, start=5 * i, size=40))
    everything = as_read(records(100, size=40), 0)
    reader = broker.reader("t", 0)
    reader.seek(-10)
    assert reader.position == 0
    for offset in (0, 3, 57, 99, 42, 5):
        reader.seek(offset)
        assert reader.read(4) == everything[offset:offset + 4]
    reader.seek(100)
    assert reader.read() == []
    reader.seek(103)
    assert reader.read() == []
    broker.append("t", 0, records(5, start=100, size=40))
    assert reader.read() == as_read(records(105, size=40), 0)[103:]


def test_repeated_seeks_in_a_big_segment_use_the_sparse_index(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        b.create_topic("t", 1)
        for i in range(300):
            b.append("t", 0, records(10, start=10 * i, size=300))
        everything = as_read(records(3000, size=300), 0)
        reader = b.reader("t", 0)
        rng = random.Random(1)
        for offset in [rng.randrange(3000) for _ in range(50)] + [2999, 0, 1500]:
            reader.seek(offset)
            assert reader.read(3) == everything[offset:offset + 3]
        log = b._logs[("t", 0)]
        key = next(k for k in log.index._segments if k[0] == 0)  # (segment base, inode)
        assert len(log.index._segments[key][0]) >= 10  # an entry every INDEX_INTERVAL bytes


def test_a_batch_being_written_is_not_returned_until_complete(broker, tmp_path):
    broker.append("t", 0, records(2))
    reader = broker.reader("t", 0)
    assert len(reader.read()) == 2
    batch = encode_batch(records(3, start=2), 2)
    path = segments(tmp_path)[-1]
    with open(path, "ab") as f:  # a writer in the middle of its os.write
        f.write(batch[:len(batch) // 2])
        f.flush()
        assert reader.read() == []
        f.write(batch[len(batch) // 2:])
    assert reader.read() == as_read(records(3, start=2), 2)


# ---------------------------------------------------------------- torn tails

def cut_last_batch_in_half(path):
    start = batch_starts(path)[-1]
    size = path.stat().st_size
    os.truncate(path, start + (size - start) // 2)


def append_bytes(data):
    def damage(path):
        with open(path, "ab") as f:
            f.write(data)
    return damage


@pytest.mark.parametrize("damage", [
    cut_last_batch_in_half,
    append_bytes(random.Random(3).randbytes(5000)),
    append_bytes(b"\x00" * 300),
    append_bytes(b"\x07" * 10),  # less than a header
    append_bytes(encode_batch(records(4, start=30), 30)[:-1]),
], ids=["cut-in-half", "random-garbage", "zeros", "short-garbage", "all-but-one-byte"])
# (a complete last batch failing its CRC is damage, not a torn write: test_log_integrity.py)
def test_a_torn_tail_is_never_returned_and_is_dropped_by_the_next_writer(tmp_path, caplog, damage):
    with EmbeddedBroker(tmp_path) as b:
        b.create_topic("t", 1)
        b.append("t", 0, records(10))
        b.append("t", 0, records(20, start=10))
        tail_reader = b.reader("t", 0)
        assert len(read_all(tail_reader)) == 30
    path = segments(tmp_path)[-1]
    damage(path)
    torn_lost = 20 if damage is cut_last_batch_in_half else 0
    valid = 30 - torn_lost
    with EmbeddedBroker(tmp_path) as b:
        reader = b.reader("t", 0)
        assert read_all(reader) == as_read(records(valid), 0)
        assert reader.read() == []
        assert b.partition_offsets("t", 0) == PartitionOffsets(0, valid)
        with caplog.at_level(logging.WARNING):
            assert b.append("t", 0, records(3, start=valid)) == valid
        assert any("torn write" in r.getMessage() and str(path) in r.getMessage()
                   for r in caplog.records)
        assert reader.read() == as_read(records(3, start=valid), valid)
        assert read_all(b.reader("t", 0)) == as_read(records(valid + 3), 0)


def test_a_reader_waiting_at_a_torn_tail_continues_after_the_repair(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        b.create_topic("t", 1)
        b.append("t", 0, records(5))
        reader = b.reader("t", 0)
        assert len(reader.read()) == 5
        append_bytes(encode_batch(records(4, start=5), 5)[:50])(segments(tmp_path)[-1])
        assert reader.read() == []
        with EmbeddedBroker(tmp_path) as other:  # another writer repairs and appends
            assert other.append("t", 0, records(2, start=5)) == 5
        assert reader.read() == as_read(records(2, start=5), 5)


# ---------------------------------------------------------------- corruption

def flip_byte(path, pos):
    data = bytearray(path.read_bytes())
    data[pos] ^= 0x5A
    path.write_bytes(bytes(data))


def test_a_bad_crc_in_the_middle_of_a_log_raises_corrupt_log_error(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        b.create_topic("t", 1)
        for i in range(5):
            b.append("t", 0, records(10, start=10 * i))
    path = segments(tmp_path)[0]
    third = batch_starts(path)[2]
    flip_byte(path, third + 100)
    with EmbeddedBroker(tmp_path) as b:
        reader = b.reader("t", 0)
        assert reader.read(20) == as_read(records(20), 0)  # before the damage: fine
        with pytest.raises(CorruptLogError) as info:
            reader.read()
        message = str(info.value)
        assert str(path) in message and f"byte {third}" in message
        assert "topic 't' partition 0" in message and "CRC" in message
        reader.seek(30)  # after the damage: fine again
        assert read_all(reader) == as_read(records(20, start=30), 30)


def test_a_bad_header_in_the_middle_raises_for_readers_and_writers(tmp_path):
    with EmbeddedBroker(tmp_path) as b:
        b.create_topic("t", 1)
        for i in range(5):
            b.append("t", 0, records(10, start=10 * i))
    path = segments(tmp_path)[0]
    second = batch_starts(path)[1]
    flip_byte(path, second + 8)  # the magic byte
    with EmbeddedBroker(tmp_path) as b:
        reader = b.reader("t", 0)
        with pytest.raises(CorruptLogError, match=f"byte {second}"):
            read_all(reader)
        with pytest.raises(CorruptLogError, match="refusing to append"):
            b.append("t", 0, records(1, start=50))


def test_an_unreadable_end_of_a_sealed_segment_is_corruption(tmp_path):
    with EmbeddedBroker(tmp_path, segment_bytes=500) as b:
        b.create_topic("t", 1)
        for i in range(6):
            b.append("t", 0, records(5, start=5 * i))
    first = segments(tmp_path)[0]
    assert len(segments(tmp_path)) > 1
    os.truncate(first, first.stat().st_size - 7)
    with EmbeddedBroker(tmp_path) as b:
        with pytest.raises(CorruptLogError, match="followed by a later segment"):
            read_all(b.reader("t", 0))
