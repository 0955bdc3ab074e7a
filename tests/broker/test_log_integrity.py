"""Damaged logs (issue 34): gaps between segment files, a damaged last batch, records
before damage. Real segment files on disk, damaged as an operator (or a disk) would,
read by the broker in-process and by the real CLI and worker in subprocesses."""
from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path

import pytest

from streamkit.broker import CorruptLogError, EmbeddedBroker, SegmentGapError
from streamkit.broker.batch_format import HEADER, HEADER_SIZE, encode_batch
from streamkit.core.records import PartitionOffsets, TopicPartition
from tests.cli_processes import broker_dir, cli  # noqa: F401 (fixtures)

BATCH = 10  # records per append, so one batch each


def values(n: int, start: int = 0) -> list:
    return [(b"k%d" % i, json.dumps({"n": i}).encode(), 1_000 + i, None) for i in range(start, start + n)]


def fill(directory: Path, batches: int, *, segment_bytes: int = 0) -> None:
    """Topic 'events' (1 partition) holding `batches` batches of BATCH records."""
    with EmbeddedBroker(directory) as b:
        config = {"segment.bytes": str(segment_bytes)} if segment_bytes else None
        b.create_topic("events", 1, config)
        for i in range(batches):
            b.append("events", 0, values(BATCH, BATCH * i))


def partition_dir(directory: Path) -> Path:
    return directory / "topics" / "events" / "0"


def segment_files(directory: Path) -> list[Path]:
    return sorted(partition_dir(directory).glob("*.log"))


def batch_starts(path: Path) -> list[int]:
    data = path.read_bytes()
    pos, starts = 0, []
    while pos < len(data):
        starts.append(pos)
        pos += 4 + HEADER.unpack_from(data, pos)[0]
    return starts


def flip_byte(path: Path, pos: int) -> None:
    data = bytearray(path.read_bytes())
    data[pos] ^= 0x5A
    path.write_bytes(bytes(data))


def read_until_error(reader, error=CorruptLogError) -> tuple[list, Exception]:
    """Every record the reader returns, then the error it raises (it must raise)."""
    out = []
    for _ in range(1000):
        try:
            got = reader.read(7)
        except error as exc:
            return out, exc
        assert got, f"the reader stopped at offset {reader.position} without an error"
        out.extend(got)
    raise AssertionError("the reader never stopped")


def offsets_of(stdout: str) -> list[int]:
    return [json.loads(line)["offset"] for line in stdout.splitlines()]


def assert_clean_failure(run, *fragments: str) -> None:
    """Exit code 1, one error message holding each fragment, no traceback."""
    assert run.returncode == 1, (run.returncode, run.stdout[-2000:], run.stderr[-2000:])
    assert "Traceback" not in run.stderr, run.stderr
    for fragment in fragments:
        assert fragment in run.stderr, (fragment, run.stderr)


COPY_APP = """
    import streamkit as sk

    app = sk.App("copier")
    events = app.topic("events", key_serde=sk.serdes.String(), value_serde=sk.serdes.String(), partitions=1)


    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        b.stream(events).to("copied")
"""


def run_copier(cli, tmp_path: Path):
    (tmp_path / "copy_app.py").write_text(textwrap.dedent(COPY_APP))
    return cli("worker", "copy_app", "--until-idle", "2", cwd=tmp_path, timeout=120)


# ---------------------------------------------------------------- 2: gaps between segments

def test_a_deleted_middle_segment_is_refused_by_consume_describe_produce_and_workers(cli, broker_dir, tmp_path):
    fill(broker_dir, 30, segment_bytes=2048)
    files = segment_files(broker_dir)
    assert len(files) >= 4
    gone = files[1]
    gone.unlink()
    where = [str(partition_dir(broker_dir)), files[0].name, files[2].name]
    missing = f"offsets {int(gone.name[:20])} to {int(files[2].name[:20]) - 1} are missing"

    consume = cli("consume", "events", "--from-beginning", "--timeout", "1")
    assert_clean_failure(consume, *where, missing, "topic 'events' partition 0")
    assert_clean_failure(cli("topics", "describe", "events"), *where, missing)
    produce = cli("produce", "events", stdin='{"n": 1}\n')
    assert_clean_failure(produce, *where, missing)
    assert_clean_failure(run_copier(cli, tmp_path), *where, missing)
    with EmbeddedBroker(broker_dir) as b:
        with pytest.raises(SegmentGapError, match=missing):
            b.append("events", 0, values(1))
        with pytest.raises(SegmentGapError, match=missing):
            b.reader("events", 0)
    assert segment_files(broker_dir) == [files[0], *files[2:]]  # nothing appended around the gap


def test_a_file_named_like_a_later_segment_gets_no_appends(cli, broker_dir):
    fill(broker_dir, 5)
    stray = partition_dir(broker_dir) / "00000000000000005000.log"
    stray.touch()
    produce = cli("produce", "events", stdin='{"n": 1}\n')
    assert_clean_failure(produce, str(partition_dir(broker_dir)), "00000000000000000000.log",
                         "00000000000000005000.log", "offsets 50 to 4999 are missing")
    assert stray.stat().st_size == 0  # nothing was written at offset 5000
    assert_clean_failure(cli("topics", "describe", "events"), "00000000000000005000.log")
    assert_clean_failure(cli("consume", "events", "--from-beginning", "--timeout", "1"),
                         "00000000000000005000.log")
    stray.unlink()  # the operator's fix: the log is whole again
    assert cli("produce", "events", stdin='{"n": 50}\n').returncode == 0
    with EmbeddedBroker(broker_dir) as b:
        assert b.partition_offsets("events", 0) == PartitionOffsets(0, 51)


@pytest.mark.parametrize("name", ["5000.log", "00000000000000000050.log.log", "0000000000000000005x.log"])
def test_a_misnamed_segment_file_is_refused(broker_dir, name):
    fill(broker_dir, 5)
    (partition_dir(broker_dir) / name).write_bytes(b"")
    with EmbeddedBroker(broker_dir) as b:
        with pytest.raises(SegmentGapError, match=f"{name}.*named like segment files"):
            b.reader("events", 0)
        with pytest.raises(SegmentGapError, match=str(partition_dir(broker_dir))):
            b.append("events", 0, values(1))


def test_a_segment_whose_records_do_not_start_at_its_name_is_refused(broker_dir):
    fill(broker_dir, 20, segment_bytes=2048)
    files = segment_files(broker_dir)
    # named by the end of the log, so no offset is missing, but holding records from 0
    stray = partition_dir(broker_dir) / "00000000000000000200.log"
    stray.write_bytes(files[0].read_bytes())
    with EmbeddedBroker(broker_dir) as b:
        with pytest.raises(SegmentGapError, match="00000000000000000200.log holds records from offset 0,"):
            b.partition_offsets("events", 0)


def test_a_deleted_first_segment_is_refused(broker_dir):
    fill(broker_dir, 20, segment_bytes=2048)
    files = segment_files(broker_dir)
    files[0].unlink()
    with EmbeddedBroker(broker_dir) as b:
        with pytest.raises(SegmentGapError, match=f"offsets 0 to {int(files[1].name[:20]) - 1} are missing"):
            b.reader("events", 0)


def test_a_segment_deleted_under_an_open_reader_stops_it_at_the_gap_with_an_error(broker_dir):
    fill(broker_dir, 30, segment_bytes=2048)
    files = segment_files(broker_dir)
    with EmbeddedBroker(broker_dir) as b:
        reader = b.reader("events", 0)
        files[1].unlink()
        got, error = read_until_error(reader, SegmentGapError)
        first_missing = int(files[1].name[:20])
        assert [r[0] for r in got] == list(range(first_missing))  # everything before the gap
        assert files[0].name in str(error) and files[2].name in str(error)
        with pytest.raises(SegmentGapError):  # and it stays stopped there
            reader.read()


def test_segments_that_retention_deleted_are_no_gap(broker_dir):
    fill(broker_dir, 30, segment_bytes=2048)
    with EmbeddedBroker(broker_dir) as b:
        b.delete_records({TopicPartition("events", 0): 150})  # unlinks the segments wholly below 150
        start = b.partition_offsets("events", 0).start
    with EmbeddedBroker(broker_dir) as b:
        assert start == 150
        assert [r[0] for r in b.reader("events", 0).read(1000)] == list(range(150, 300))
        assert b.append("events", 0, values(1, 300)) == 300


# ---------------------------------------------------------------- 3: a damaged last batch

def test_a_flipped_byte_in_the_last_complete_batch_is_corruption_not_a_torn_write(broker_dir):
    fill(broker_dir, 30)
    path = segment_files(broker_dir)[-1]
    last = batch_starts(path)[-1]
    size = path.stat().st_size
    flip_byte(path, last + HEADER_SIZE + 40)  # inside the payload: the header stays plausible
    with EmbeddedBroker(broker_dir) as b:
        got, error = read_until_error(b.reader("events", 0))
        assert [r[0] for r in got] == list(range(290))
        message = str(error)
        assert all(s in message for s in ("topic 'events' partition 0", str(path), f"byte {last}",
                                          "offset 290", "CRC"))
        assert b.partition_offsets("events", 0) == PartitionOffsets(0, 300)  # the end does not shrink
        with pytest.raises(CorruptLogError, match=f"(?s){path}.*byte {last}.*refusing to truncate"):
            b.append("events", 0, values(1, 300))
    assert path.stat().st_size == size  # the committed batch is still there, untouched


def test_the_cli_reports_a_damaged_last_batch_and_keeps_it(cli, broker_dir):
    fill(broker_dir, 30)
    path = segment_files(broker_dir)[-1]
    last = batch_starts(path)[-1]
    size = path.stat().st_size
    flip_byte(path, last + HEADER_SIZE + 40)
    consume = cli("consume", "events", "--from-beginning", "--timeout", "2")
    assert_clean_failure(consume, str(path), f"byte {last}", "offset 290", "CRC")
    assert offsets_of(consume.stdout) == list(range(290))
    describe = cli("topics", "describe", "events")
    assert describe.returncode == 0 and describe.stdout.splitlines()[-1].split() == ["0", "0", "300", "300"]
    assert_clean_failure(cli("produce", "events", stdin='{"n": 300}\n'), str(path), "refusing to truncate")
    assert path.stat().st_size == size


def test_a_batch_cut_short_is_still_a_torn_write_and_repaired(broker_dir, caplog):
    fill(broker_dir, 30)
    path = segment_files(broker_dir)[-1]
    last = batch_starts(path)[-1]
    os.truncate(path, path.stat().st_size - 5)
    with EmbeddedBroker(broker_dir) as b:
        assert [r[0] for r in b.reader("events", 0).read(1000)] == list(range(290))
        assert b.partition_offsets("events", 0) == PartitionOffsets(0, 290)
        assert b.append("events", 0, values(1, 290)) == 290
        assert any("torn write" in r.getMessage() for r in caplog.records)
    assert batch_starts(path)[-1] == last  # the new batch replaced the torn one


def test_a_torn_write_after_a_damaged_batch_drops_only_the_torn_bytes(broker_dir):
    fill(broker_dir, 30)
    path = segment_files(broker_dir)[-1]
    last = batch_starts(path)[-1]
    flip_byte(path, last + HEADER_SIZE + 40)
    complete = path.stat().st_size
    with open(path, "ab") as f:
        f.write(path.read_bytes()[last:last + 50])  # the start of a batch, cut short
    with EmbeddedBroker(broker_dir) as b:
        b.append("events", 0, values(1, 300))  # drops the torn bytes only
        assert path.stat().st_size > complete
        got, error = read_until_error(b.reader("events", 0))
        assert [r[0] for r in got] == list(range(290)) and f"byte {last}" in str(error)


# ---------------------------------------------------------------- 4: records before damage

@pytest.mark.parametrize("damaged_batch", [28, 30], ids=["middle", "last"])
def test_consume_delivers_the_records_before_a_checksum_error_then_fails(cli, broker_dir, damaged_batch):
    fill(broker_dir, damaged_batch + 3 if damaged_batch == 28 else damaged_batch + 1)
    path = segment_files(broker_dir)[-1]
    bad = batch_starts(path)[damaged_batch]
    flip_byte(path, bad + HEADER_SIZE + 40)
    consume = cli("consume", "events", "--from-beginning", "--timeout", "2")
    assert offsets_of(consume.stdout) == list(range(BATCH * damaged_batch))
    assert_clean_failure(consume, "topic 'events' partition 0", str(path), f"byte {bad}",
                         f"offset {BATCH * damaged_batch}")


def test_a_reader_returns_every_record_before_the_damage_whatever_its_batch_size(broker_dir):
    fill(broker_dir, 31)
    path = segment_files(broker_dir)[-1]
    bad = batch_starts(path)[28]
    flip_byte(path, bad + HEADER_SIZE + 40)
    with EmbeddedBroker(broker_dir) as b:
        for max_records in (1, 7, 10, 280, 281, 10_000):
            reader = b.reader("events", 0)
            out = []
            while True:
                try:
                    got = reader.read(max_records)
                except CorruptLogError as exc:
                    assert "offset 280" in str(exc)
                    break
                assert got
                out.extend(got)
            assert [r[0] for r in out] == list(range(280)), max_records
            assert reader.position == 280


def test_a_worker_processes_the_records_before_a_checksum_error_then_stops_with_it(cli, broker_dir, tmp_path):
    fill(broker_dir, 31)
    path = segment_files(broker_dir)[-1]
    bad = batch_starts(path)[28]
    flip_byte(path, bad + HEADER_SIZE + 40)
    run = run_copier(cli, tmp_path)
    assert_clean_failure(run, "topic 'events' partition 0", str(path), f"byte {bad}", "offset 280")
    copied = cli("consume", "copied", "--from-beginning", "--timeout", "1")
    assert copied.returncode == 0, copied.stderr
    copies = [json.loads(line)["value"] for line in copied.stdout.splitlines()]
    assert sorted(json.loads(value)["n"] for value in copies) == list(range(280))  # (copied as strings)


def test_consume_delivers_the_other_partitions_records_read_with_a_damaged_one(cli, broker_dir):
    with EmbeddedBroker(broker_dir) as b:
        b.create_topic("events", 2)
        b.append("events", 0, values(BATCH))
        b.append("events", 1, values(BATCH))
    path = partition_dir(broker_dir).parent / "1" / "00000000000000000000.log"
    flip_byte(path, HEADER_SIZE + 40)  # partition 1's first (and only) batch
    consume = cli("consume", "events", "--from-beginning", "--timeout", "2")
    assert [(r["partition"], r["offset"]) for r in map(json.loads, consume.stdout.splitlines())] == \
        [(0, i) for i in range(BATCH)]
    assert_clean_failure(consume, "topic 'events' partition 1", str(path), "byte 0", "offset 0")


def test_a_gap_between_a_transaction_and_its_marker_stops_a_read_committed_reader(broker_dir):
    with EmbeddedBroker(broker_dir) as b:
        b.create_topic("events", 1, {"segment.bytes": "2048"})
        b.append("events", 0, values(BATCH))
        txn = b.begin_transaction("tx")
        txn.append("events", 0, values(BATCH, BATCH))
        for i in range(2, 20):  # the marker lands segments later
            b.append("events", 0, values(BATCH, BATCH * i))
        txn.commit()
        reader = b.reader("events", 0)
        files = segment_files(broker_dir)
        assert len(files) >= 4
        files[1].unlink()
        got, error = read_until_error(reader, SegmentGapError)
        assert [r[0] for r in got] == list(range(BATCH))  # before the transaction
        assert files[1].name in str(error) or files[0].name in str(error)
        assert reader.position == BATCH


def test_a_segment_rewritten_in_place_is_not_read_through_a_stale_index(broker_dir):
    """There is no index file; the in-memory sparse index is keyed by (segment, inode).
    A segment restored in place (``cp backup.log 000...0.log`` keeps the inode) with other
    batch positions must not be read at the positions remembered for the old content."""
    with EmbeddedBroker(broker_dir) as b:
        b.create_topic("events", 1)
        for i in range(400):
            b.append("events", 0, [(b"k", b"x" * 300, i, None)])
        reader = b.reader("events", 0)
        reader.seek(350)  # walks the segment and indexes it every 64 KiB
        assert reader.read(1)[0][0] == 350
        path = segment_files(broker_dir)[0]
        path.write_bytes(b"".join(encode_batch([(b"k", b"y" * (i % 50), i, None)], i) for i in range(400)))
        for offset in (390, 200, 350):
            fresh = b.reader("events", 0)
            fresh.seek(offset)
            assert fresh.read(1) == [(offset, offset, b"k", b"y" * (offset % 50), None)]
