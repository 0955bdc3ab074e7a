"""File sources: ``sk.sources.Files`` (JSON lines / Parquet files matched by a glob) and
``sk.sources.ParquetArchive`` (replaying an archive written by the ParquetArchive sink).

The readers are tested directly (``open_partition(p)``, ``seek``, ``read``,
``has_more``, ``position``) on real files; the end-to-end tests run the real
``streamkit worker`` on the embedded broker in a subprocess.
"""
from __future__ import annotations

import decimal
import os
import subprocess
import sys
import textwrap
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import streamkit as sk
from streamkit.errors import ConfigError, StreamkitError
from streamkit.sinks import SinkRecord, SinkTask
from streamkit.transport.base import TopicPartition
from streamkit.broker import EmbeddedBroker

REPO = Path(__file__).resolve().parents[2]


# -- helpers ---------------------------------------------------------------------------------

def read_all(reader, batch: int = 1000) -> list:
    out = []
    while True:
        records = reader.read(batch)
        if not records:
            return out
        out.extend(records)


def write_lines(path: Path, lines: Sequence[object]) -> Path:
    """One line per item: dicts as JSON, strings as given (blank lines included)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join((item.encode() if isinstance(item, str) else orjson.dumps(item)) + b"\n"
                              for item in lines))
    return path


def ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def write_archive(path: Path, partitions: Dict[Tuple[str, int], List[tuple]], *, roll_records: int = 3,
                  schema=None) -> None:
    """Archive ``(offset, key, value, ts)`` rows per (topic, partition) with the real sink writer,
    a commit per offset; a clean close rolls the rest."""
    sink = sk.sinks.ParquetArchive(str(path), roll_records=roll_records, schema=schema)
    for (topic, partition), rows in partitions.items():
        tp = TopicPartition(topic, partition)
        writer = sink.open(SinkTask("app", f"0_{partition}", "archive", (tp,)))
        writer.start()
        for i, (offset, key, value, ts) in enumerate(rows):
            writer.write(SinkRecord(key, value, ts, topic, partition, offset))
            if i + 1 == len(rows) or rows[i + 1][0] != offset:
                writer.commit({tp: offset + 1})
        writer.close()


def raw(offset: int, key, value, ts: int) -> tuple:
    """The RawRecord an archive source returns for an archived row."""
    return (offset, ts, None if key is None else orjson.dumps(key), None if value is None else orjson.dumps(value),
            None)


# -- Files: offsets, seeking, headers ------------------------------------------------------------

@pytest.fixture
def three_jsonl_files(tmp_path: Path) -> Tuple[str, List[Tuple[str, int, bytes]]]:
    """Files whose creation order differs from their sorted order, with blank lines.
    Returns the glob and, in offset order, (file, row in file, value bytes)."""
    d = tmp_path / "in"
    write_lines(d / "b.jsonl", [{"f": "b", "i": 0}, "", "   ", {"f": "b", "i": 1}, {"f": "b", "i": 2}])
    write_lines(d / "a.jsonl", ["", {"f": "a", "i": 0}, {"f": "a", "i": 1}, "\t"])
    write_lines(d / "c.jsonl", [{"f": "c", "i": 0}, "", {"f": "c", "i": 1}])
    (d / "notes.txt").write_text('{"f": "not matched"}\n')
    expected = []
    for name, count in (("a", 2), ("b", 3), ("c", 2)):
        for i in range(count):
            expected.append((str(d / f"{name}.jsonl"), i, orjson.dumps({"f": name, "i": i})))
    return str(d / "*.jsonl"), expected


def test_files_offsets_follow_sorted_paths_and_skip_blank_lines(three_jsonl_files) -> None:
    pattern, expected = three_jsonl_files
    source = sk.sources.Files(pattern, timestamp=lambda v: v["i"])
    assert source.partitions() == 1 and source.default_name() == "files"
    assert source.paths() == sorted({path for path, _, _ in expected})
    records = read_all(source.open_partition(0))
    assert [r[0] for r in records] == list(range(len(expected)))
    assert [r[3] for r in records] == [value for _, _, value in expected]
    assert [r[4] for r in records] == [(("streamkit.file", path.encode()), ("streamkit.row", str(row).encode()))
                                       for path, row, _ in expected]
    assert [r[1] for r in records] == [row for _, row, _ in expected]  # timestamp = the value's "i"
    assert all(r[2] is None for r in records)  # no key function: no key
    # Opening again gives the very same offsets.
    assert read_all(sk.sources.Files(pattern, timestamp=lambda v: v["i"]).open_partition(0), batch=2) == records


def test_files_reads_in_batches_and_tracks_its_position(three_jsonl_files) -> None:
    pattern, expected = three_jsonl_files
    reader = sk.sources.Files(pattern, timestamp=lambda v: 0).open_partition(0)
    assert reader.position == 0 and reader.has_more()
    assert reader.has_more()  # asking twice consumes nothing
    first = reader.read(3)
    assert [r[0] for r in first] == [0, 1, 2] and reader.position == 3
    assert first[2][3] == expected[2][2]  # the 1st row of b.jsonl, across the file boundary
    rest = reader.read(100)
    assert [r[0] for r in rest] == list(range(3, len(expected))) and reader.position == len(expected)
    assert not reader.has_more() and reader.read(10) == []
    reader.close()


@pytest.mark.parametrize("target", range(0, 10))
def test_files_seek_returns_exactly_the_remaining_records(three_jsonl_files, target: int) -> None:
    pattern, expected = three_jsonl_files  # 7 records: a 0-1, b 2-4, c 5-6; 7..9 are past the end
    source = sk.sources.Files(pattern, timestamp=lambda v: 0, key="f")
    everything = read_all(source.open_partition(0))
    reader = source.open_partition(0)
    reader.read(1)  # seeking works from anywhere, also after reads
    reader.seek(target)
    assert reader.has_more() == (target < len(expected))
    if target < len(expected):
        assert reader.position == target
    assert read_all(reader, batch=2) == everything[target:]


def test_files_seek_into_the_middle_of_the_second_file(three_jsonl_files) -> None:
    pattern, expected = three_jsonl_files
    reader = sk.sources.Files(pattern, timestamp=lambda v: 0).open_partition(0)
    reader.seek(3)  # b.jsonl's 2nd non-blank row (the 4th line of the file)
    record = reader.read(1)[0]
    assert record[0] == 3 and record[3] == orjson.dumps({"f": "b", "i": 1})
    assert dict(record[4]) == {"streamkit.file": expected[3][0].encode(), "streamkit.row": b"1"}


def test_files_glob_recurses_and_ignores_directories(tmp_path: Path) -> None:
    write_lines(tmp_path / "data" / "2024" / "01" / "x.jsonl", [{"n": 1}])
    write_lines(tmp_path / "data" / "2024" / "02" / "x.jsonl", [{"n": 2}, {"n": 3}])
    write_lines(tmp_path / "data" / "top.jsonl", [{"n": 0}])
    (tmp_path / "data" / "dir.jsonl").mkdir()  # matches the glob but is not a file
    source = sk.sources.Files(str(tmp_path / "data" / "**" / "*.jsonl"), timestamp=lambda v: 0)
    assert [os.path.relpath(p, tmp_path / "data") for p in source.paths()] == [
        "2024/01/x.jsonl", "2024/02/x.jsonl", "top.jsonl"]
    assert [r[3] for r in read_all(source.open_partition(0))] == [b'{"n":1}', b'{"n":2}', b'{"n":3}', b'{"n":0}']


def test_files_with_no_match_are_an_empty_stream(tmp_path: Path) -> None:
    reader = sk.sources.Files(str(tmp_path / "none" / "*.jsonl")).open_partition(0)
    reader.seek(5)
    assert not reader.has_more() and reader.read(10) == []


# -- Files: timestamps and keys -------------------------------------------------------------------

def test_files_timestamps_from_iso_8601_and_epoch_ms(tmp_path: Path) -> None:
    rows = [
        {"ts": "2024-01-02T03:04:05Z"},
        {"ts": "2024-01-02T03:04:05.250+02:00"},
        {"ts": "2024-06-30T23:59:59.999-05:30"},
        {"ts": 1_700_000_000_123},
        {"ts": 1_700_000_000_123.9},
        {"ts": 0},
    ]
    write_lines(tmp_path / "t.jsonl", rows)
    records = read_all(sk.sources.Files(str(tmp_path / "*.jsonl"), timestamp="ts").open_partition(0))
    assert [r[1] for r in records] == [
        ms(datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc)),
        ms(datetime(2024, 1, 2, 1, 4, 5, 250_000, tzinfo=timezone.utc)),
        ms(datetime(2024, 7, 1, 5, 29, 59, 999_000, tzinfo=timezone.utc)),
        1_700_000_000_123,
        1_700_000_000_123,
        0,
    ]
    assert [r[3] for r in records] == [orjson.dumps(row) for row in rows]  # the value is the row as is


def test_files_timestamp_function_may_return_an_aware_datetime(tmp_path: Path) -> None:
    write_lines(tmp_path / "t.jsonl", [{"day": 1}, {"day": 2}])
    source = sk.sources.Files(str(tmp_path / "*.jsonl"),
                              timestamp=lambda v: datetime(2024, 3, v["day"], tzinfo=timezone(timedelta(hours=1))))
    assert [r[1] for r in read_all(source.open_partition(0))] == [
        ms(datetime(2024, 2, 29, 23, tzinfo=timezone.utc)), ms(datetime(2024, 3, 1, 23, tzinfo=timezone.utc))]


@pytest.mark.parametrize("bad, says", [
    ("2024-01-02T03:04:05", "has no timezone"),
    ("2024-01-02", "has no timezone"),
    (True, "is not a time"),
    (None, "is not epoch ms, a datetime or an ISO-8601 string"),
    ("yesterday", "Invalid isoformat string"),
])
def test_files_bad_timestamps_fail_naming_file_and_row(tmp_path: Path, bad, says: str) -> None:
    path = write_lines(tmp_path / "a" / "t.jsonl", [{"ts": 5}, "", {"ts": 6}, {"ts": bad}, {"ts": 7}])
    reader = sk.sources.Files(str(tmp_path / "a" / "*.jsonl"), timestamp="ts").open_partition(0)
    assert [r[1] for r in reader.read(2)] == [5, 6]
    with pytest.raises(StreamkitError) as raised:
        reader.read(10)
    message = str(raised.value)
    assert f"{path} row 2 (offset 2)" in message and says in message


def test_files_naive_datetime_from_a_function_fails_naming_file_and_row(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "t.jsonl", [{"n": 1}])
    reader = sk.sources.Files(str(tmp_path / "*.jsonl"), timestamp=lambda v: datetime(2024, 1, 1)).open_partition(0)
    with pytest.raises(StreamkitError, match="has no timezone") as raised:
        reader.read(10)
    assert f"{path} row 0" in str(raised.value)


def test_files_default_timestamp_is_the_file_modification_time(tmp_path: Path) -> None:
    old = write_lines(tmp_path / "1.jsonl", [{"n": 1}, {"n": 2}])
    new = write_lines(tmp_path / "2.jsonl", [{"n": 3}])
    os.utime(old, (1_600_000_000, 1_600_000_000.25))
    os.utime(new, (1_700_000_000, 1_700_000_000.5))
    records = read_all(sk.sources.Files(str(tmp_path / "*.jsonl")).open_partition(0))
    assert [r[1] for r in records] == [1_600_000_000_250, 1_600_000_000_250, 1_700_000_000_500]


def test_files_keys_from_a_field_or_a_function(tmp_path: Path) -> None:
    write_lines(tmp_path / "k.jsonl", [{"user": "u1", "n": 1}, {"user": 7, "n": 2}, {"n": 3},
                                        {"user": {"id": 1}, "n": 4}])
    by_field = read_all(sk.sources.Files(str(tmp_path / "*.jsonl"), key="user", timestamp=lambda v: 0)
                        .open_partition(0))
    assert [r[2] for r in by_field] == [b'"u1"', b"7", None, b'{"id":1}']
    by_function = read_all(sk.sources.Files(str(tmp_path / "*.jsonl"), key=lambda v: [v["n"], "x"],
                                            timestamp=lambda v: 0).open_partition(0))
    assert [r[2] for r in by_function] == [b'[1,"x"]', b'[2,"x"]', b'[3,"x"]', b'[4,"x"]']
    failing = sk.sources.Files(str(tmp_path / "*.jsonl"), key=lambda v: v["user"], timestamp=lambda v: 0)
    reader = failing.open_partition(0)
    assert len(reader.read(2)) == 2
    with pytest.raises(StreamkitError) as raised:  # the 3rd row has no "user"
        reader.read(2)
    assert f"{tmp_path / 'k.jsonl'} row 2 (offset 2)" in str(raised.value) and "KeyError" in str(raised.value)


def test_files_invalid_json_lines_are_passed_on_for_the_deserializer(tmp_path: Path) -> None:
    path = write_lines(tmp_path / "k.jsonl", [{"user": "u1", "ts": 1}, "{not json", {"user": "u3", "ts": 3}])
    records = read_all(sk.sources.Files(str(tmp_path / "*.jsonl"), key="user", timestamp="ts").open_partition(0))
    assert [(r[0], r[1], r[2], r[3]) for r in records] == [
        (0, 1, b'"u1"', b'{"user":"u1","ts":1}'), (1, 0, None, b"{not json"), (2, 3, b'"u3"', b'{"user":"u3","ts":3}')]
    assert dict(records[1][4]) == {"streamkit.file": str(path).encode(), "streamkit.row": b"1"}


@pytest.mark.parametrize("kwargs, says", [
    ({"format": "csv"}, "format must be one of jsonl, parquet"),
    ({"timestamp": 5}, "timestamp must be a field name or a function"),
    ({"key": ["user"]}, "key must be a field name or a function"),
])
def test_files_bad_settings_are_config_errors(kwargs, says: str) -> None:
    with pytest.raises(ConfigError) as raised:
        sk.sources.Files("data/*.jsonl", **kwargs)
    assert says in str(raised.value) and "data/*.jsonl" in str(raised.value)


def test_a_files_stream_reads_a_json_anchor_topic_named_after_the_source(tmp_path: Path) -> None:
    app = sk.App("anchor")

    @app.topology
    def build(b):
        b.stream(sk.sources.Files(str(tmp_path / "*.jsonl"))).to("out")
        b.stream(sk.sources.Files(str(tmp_path / "*.parquet"), format="parquet"), name="clicks").to("out2")

    topics = app.build().topics
    for name in ("anchor-source-files", "anchor-source-clicks"):
        spec = topics[name]
        assert spec.partitions == 1
        assert isinstance(spec.key_serde, sk.serdes.Json) and isinstance(spec.value_serde, sk.serdes.Json)


# -- Files: Parquet ---------------------------------------------------------------------------------

def test_files_parquet_rows_become_json_values(tmp_path: Path) -> None:
    first = pa.table({"user": ["u1", "u2", None], "n": [1, 2, 3],
                      "at": pa.array([ms(datetime(2024, 1, 1, tzinfo=timezone.utc)) + i for i in range(3)],
                                     pa.timestamp("ms", tz="UTC")),
                      "tags": [["a"], [], ["b", "c"]]})
    pq.write_table(first, tmp_path / "p1.parquet", row_group_size=2)  # two row groups
    second = pa.table({"user": ["u4"], "n": [4], "at": pa.array([ms(datetime(2024, 1, 2, tzinfo=timezone.utc))],
                                                                 pa.timestamp("ms", tz="UTC")), "tags": [["d"]]})
    pq.write_table(second, tmp_path / "p2.parquet")
    source = sk.sources.Files(str(tmp_path / "*.parquet"), format="parquet", timestamp="at", key="user")
    records = read_all(source.open_partition(0))
    assert [r[0] for r in records] == [0, 1, 2, 3]
    assert [r[1] for r in records] == [ms(datetime(2024, 1, 1, tzinfo=timezone.utc)) + i for i in range(3)] + [
        ms(datetime(2024, 1, 2, tzinfo=timezone.utc))]
    assert [r[2] for r in records] == [b'"u1"', b'"u2"', None, b'"u4"']
    values = [orjson.loads(r[3]) for r in records]
    assert [(v["user"], v["n"], v["tags"]) for v in values] == [("u1", 1, ["a"]), ("u2", 2, []), (None, 3, ["b", "c"]),
                                                                ("u4", 4, ["d"])]
    assert datetime.fromisoformat(values[3]["at"]) == datetime(2024, 1, 2, tzinfo=timezone.utc)
    assert [dict(r[4])["streamkit.row"] for r in records] == [b"0", b"1", b"2", b"0"]
    assert dict(records[3][4])["streamkit.file"] == str(tmp_path / "p2.parquet").encode()


@pytest.mark.parametrize("target", [0, 1, 2, 3, 4, 5, 6])
def test_files_parquet_seek_counts_rows_of_skipped_files(tmp_path: Path, target: int) -> None:
    for name, ns in (("a", [0, 1, 2]), ("b", [3, 4]), ("c", [5])):
        pq.write_table(pa.table({"n": ns}), tmp_path / f"{name}.parquet", row_group_size=2)
    source = sk.sources.Files(str(tmp_path / "*.parquet"), format="parquet", timestamp="n")
    reader = source.open_partition(0)
    reader.seek(target)
    assert [(r[0], r[1], r[3]) for r in read_all(reader, batch=2)] == [
        (n, n, orjson.dumps({"n": n})) for n in range(target, 6)]


def test_files_parquet_naive_timestamp_column_fails_naming_file_and_row(tmp_path: Path) -> None:
    pq.write_table(pa.table({"at": pa.array([1000, 2000], pa.timestamp("ms"))}), tmp_path / "naive.parquet")
    reader = sk.sources.Files(str(tmp_path / "*.parquet"), format="parquet", timestamp="at").open_partition(0)
    with pytest.raises(StreamkitError, match="has no timezone") as raised:
        reader.read(10)
    assert f"{tmp_path / 'naive.parquet'} row 0 (offset 0)" in str(raised.value)


@pytest.mark.parametrize("column, expected", [
    pytest.param(pa.array([decimal.Decimal("1234.500"), None, decimal.Decimal("-0.001")], pa.decimal128(12, 3)),
                 ["1234.500", None, "-0.001"], id="decimal"),
    pytest.param(pa.array([b"\x00\xff\x10", None, b""], pa.binary()), ["AP8Q", None, ""], id="binary"),
])
def test_files_parquet_decimals_become_exact_text_and_binary_base64(tmp_path: Path, column, expected) -> None:
    pq.write_table(pa.table({"n": [0, 1, 2], "x": column}), tmp_path / "p.parquet")
    records = read_all(sk.sources.Files(str(tmp_path / "*.parquet"), format="parquet", timestamp="n")
                       .open_partition(0))
    assert [(r[0], r[1]) for r in records] == [(0, 0), (1, 1), (2, 2)]
    assert [r[3] for r in records] == [orjson.dumps({"n": n, "x": x}) for n, x in enumerate(expected)]


def test_files_parquet_wide_decimals_keep_every_digit(tmp_path: Path) -> None:
    exact = decimal.Decimal("12345678901234567890.0123456789")  # no float holds this
    pq.write_table(pa.table({"d": pa.array([exact], pa.decimal128(38, 10))}), tmp_path / "p.parquet")
    [record] = read_all(sk.sources.Files(str(tmp_path / "*.parquet"), format="parquet", timestamp=lambda v: 0)
                        .open_partition(0))
    assert record[3] == b'{"d":"12345678901234567890.0123456789"}'
    assert decimal.Decimal(orjson.loads(record[3])["d"]) == exact


def test_files_parquet_map_columns_with_int_keys_are_lists_of_pairs(tmp_path: Path) -> None:
    pq.write_table(pa.table({"m": pa.array([[(1, "a"), (2, "b")], []], pa.map_(pa.int32(), pa.string()))}),
                   tmp_path / "p.parquet")
    records = read_all(sk.sources.Files(str(tmp_path / "*.parquet"), format="parquet", timestamp=lambda v: 0)
                       .open_partition(0))
    assert [r[3] for r in records] == [b'{"m":[[1,"a"],[2,"b"]]}', b'{"m":[]}']


def test_files_parquet_unencodable_values_fail_naming_file_and_row(tmp_path: Path) -> None:
    # A duration column reads as datetime.timedelta, which has no JSON form.
    path = tmp_path / "dur.parquet"
    pq.write_table(pa.table({"n": [0, 1, 2], "d": pa.array([None, 1500, 2], pa.duration("ms"))}), path)
    reader = sk.sources.Files(str(tmp_path / "*.parquet"), format="parquet", timestamp="n").open_partition(0)
    assert [r[3] for r in reader.read(1)] == [b'{"n":0,"d":null}']
    with pytest.raises(StreamkitError) as raised:
        reader.read(10)
    message = str(raised.value)
    assert f"{path} row 1" in message and "cannot be read as JSON" in message and "timedelta" in message


@pytest.mark.parametrize("column, key", [
    pytest.param(pa.array([decimal.Decimal("1.10")], pa.decimal128(10, 2)), b'"1.10"', id="decimal"),
    pytest.param(pa.array([b"\x00\xff"], pa.binary()), b'"AP8="', id="binary"),
])
def test_files_parquet_keys_from_decimal_and_binary_columns_are_encoded_like_values(tmp_path: Path, column,
                                                                                   key: bytes) -> None:
    pq.write_table(pa.table({"k": column}), tmp_path / "p.parquet")
    [record] = read_all(sk.sources.Files(str(tmp_path / "*.parquet"), format="parquet", key="k",
                                         timestamp=lambda v: 0).open_partition(0))
    assert record[2] == key and record[3] == b'{"k":%s}' % key


# -- ParquetArchive source ------------------------------------------------------------------------

@pytest.fixture
def two_partition_archive(tmp_path: Path) -> Tuple[Path, Dict[int, list]]:
    """Topic "events" archived by the real sink over 2 partitions (files of 3 records), with None
    keys and values. Returns the archive directory and, per partition, the records to read back."""
    rows = {
        0: [(i, None if i == 2 else ({"id": i} if i == 5 else f"k{i % 3}"),
             None if i == 4 else ([i, "x"] if i == 5 else {"i": i, "p": 0}), 1_000 + 10 * i) for i in range(7)],
        1: [(i, None if i == 1 else i, None if i == 1 else f"v{i}", 2_000 + i) for i in range(5)],
    }
    path = tmp_path / "archive"
    write_archive(path, {("events", p): partition_rows for p, partition_rows in rows.items()})
    return path, {p: [raw(*row) for row in partition_rows] for p, partition_rows in rows.items()}


def test_archive_source_records_keep_offsets_timestamps_keys_and_values(two_partition_archive) -> None:
    path, expected = two_partition_archive
    assert sorted(os.listdir(path)) == [
        "_staging", "events+0+0-2.parquet", "events+0+3-5.parquet", "events+0+6-6.parquet",
        "events+1+0-2.parquet", "events+1+3-4.parquet"]
    source = sk.sources.ParquetArchive(str(path))
    assert source.partitions() == 2 and source.topic == "events" and source.default_name() == "archive-events"
    for partition in (0, 1):
        reader = source.open_partition(partition)
        assert reader.position == 0 and reader.has_more()
        records = read_all(reader, batch=2)
        assert records == expected[partition]
        assert reader.position == expected[partition][-1][0] + 1 and not reader.has_more()
        reader.close()
    # Spot checks of the encoding: keys and values are JSON text; None stays None.
    assert expected[0][2][2] is None and expected[0][4][3] is None and expected[1][1][2:4] == (None, None)
    assert expected[0][5][2:4] == (b'{"id":5}', b'[5,"x"]') and expected[1][3][2:4] == (b"3", b'"v3"')


@pytest.mark.parametrize("target", range(0, 9))
def test_archive_source_seek_returns_exactly_the_remaining_records(two_partition_archive, target: int) -> None:
    path, expected = two_partition_archive  # partition 0: offsets 0-6 in files 0-2, 3-5, 6-6; 7, 8 past the end
    reader = sk.sources.ParquetArchive(str(path)).open_partition(0)
    reader.read(2)  # seeking works from anywhere, also after reads
    reader.seek(target)
    assert reader.position == target
    assert reader.has_more() == (target < 7)
    assert read_all(reader, batch=2) == expected[0][target:]


def test_archive_source_position_starts_at_the_first_archived_offset(tmp_path: Path) -> None:
    write_archive(tmp_path / "a", {("t", 0): [(100 + i, f"k{i}", {"i": i}, i) for i in range(5)]})
    assert sorted(os.listdir(tmp_path / "a")) == ["_staging", "t+0+100-102.parquet", "t+0+103-104.parquet"]
    reader = sk.sources.ParquetArchive(str(tmp_path / "a")).open_partition(0)
    assert reader.position == 100
    assert [r[0] for r in reader.read(3)] == [100, 101, 102] and reader.position == 103
    assert [r[0] for r in read_all(reader)] == [103, 104] and reader.position == 105


def test_archive_source_partitions_count_the_highest_partition_despite_gaps(tmp_path: Path) -> None:
    write_archive(tmp_path / "a", {("t", 0): [(0, "a", 1, 5)], ("t", 2): [(0, "c", 3, 7), (1, "d", 4, 8)]})
    source = sk.sources.ParquetArchive(str(tmp_path / "a"))
    assert source.partitions() == 3
    assert read_all(source.open_partition(0)) == [raw(0, "a", 1, 5)]
    missing = source.open_partition(1)  # nothing archived: an empty partition
    assert missing.position == 0 and not missing.has_more() and missing.read(10) == []
    assert read_all(source.open_partition(2)) == [raw(0, "c", 3, 7), raw(1, "d", 4, 8)]


def test_archive_source_topic_selection(tmp_path: Path) -> None:
    path = tmp_path / "a"
    write_archive(path, {("clicks", 0): [(0, "c", {"n": 1}, 1)],
                         ("views", 0): [(0, "v", {"n": 2}, 2)], ("views", 1): [(0, "w", {"n": 3}, 3)]})
    with pytest.raises(ConfigError) as raised:
        sk.sources.ParquetArchive(str(path)).partitions()
    assert "clicks" in str(raised.value) and "views" in str(raised.value) and "topic=" in str(raised.value)
    views = sk.sources.ParquetArchive(str(path), topic="views")
    assert views.partitions() == 2 and views.default_name() == "archive-views"
    assert read_all(views.open_partition(1)) == [raw(0, "w", {"n": 3}, 3)]
    assert read_all(sk.sources.ParquetArchive(str(path), topic="clicks").open_partition(0)) == [
        raw(0, "c", {"n": 1}, 1)]
    with pytest.raises(ConfigError) as raised:
        sk.sources.ParquetArchive(str(path), topic="nope").partitions()
    assert "'nope'" in str(raised.value) and "clicks, views" in str(raised.value)


@pytest.mark.parametrize("topic", [None, "t"])
def test_archive_source_of_an_empty_directory_is_a_config_error(tmp_path: Path, topic) -> None:
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "notes.parquet").write_bytes(b"")  # not an archive file name
    source = sk.sources.ParquetArchive(str(tmp_path / "empty"), topic=topic)
    with pytest.raises(ConfigError) as raised:
        source.partitions()
    assert str(tmp_path / "empty") in str(raised.value)


def test_archive_source_reads_only_rolled_files_not_staged_records(tmp_path: Path) -> None:
    path = tmp_path / "a"
    sink = sk.sinks.ParquetArchive(str(path), roll_records=3, roll_interval=None, roll_on_close=False)
    tp = TopicPartition("in", 0)
    writer = sink.open(SinkTask("app", "0_0", "archive", (tp,)))
    writer.start()
    for i in range(5):
        writer.write(SinkRecord(f"k{i}", {"i": i}, i, "in", 0, i))
        writer.commit({tp: i + 1})
    writer.close()  # without rolling: offsets 3 and 4 stay staged
    assert sorted(os.listdir(path)) == ["_staging", "in+0+0-2.parquet"]
    assert os.listdir(path / "_staging") == ["in+0.jsonl"]
    reader = sk.sources.ParquetArchive(str(path)).open_partition(0)
    assert read_all(reader) == [raw(i, f"k{i}", {"i": i}, i) for i in range(3)]
    assert reader.position == 3 and not reader.has_more()


def test_archive_source_reads_schema_columns_back_as_json_values(tmp_path: Path) -> None:
    path = tmp_path / "a"
    write_archive(path, {("t", 0): [(0, "a", {"user": "u1", "n": 1, "score": 0.5}, 10),
                                    (1, None, {"n": 2}, 11),  # missing fields are null
                                    (2, "c", {"score": 2.0, "user": "u3"}, 12)]},
                  schema={"user": "string", "n": "int64", "score": "double"})
    assert pq.read_schema(path / "t+0+0-2.parquet").names == ["key", "user", "n", "score", "timestamp", "partition",
                                                               "offset"]
    records = read_all(sk.sources.ParquetArchive(str(path)).open_partition(0))
    assert [(r[0], r[1], r[2]) for r in records] == [(0, 10, b'"a"'), (1, 11, None), (2, 12, b'"c"')]
    assert [r[3] for r in records] == [  # the schema's columns, in its order
        b'{"user":"u1","n":1,"score":0.5}', b'{"user":null,"n":2,"score":null}',
        b'{"user":"u3","n":null,"score":2.0}']


def test_archive_source_keeps_the_records_of_one_offset_in_one_batch(tmp_path: Path) -> None:
    path = tmp_path / "a"
    rows = [(0, "a", 0, 1), (1, "b", 10, 2), (1, "b", 11, 2), (1, "b", 12, 2), (2, "c", 20, 3), (3, "d", 30, 4),
            (3, "d", 31, 4)]
    write_archive(path, {("t", 0): rows}, roll_records=2)
    # The sink never splits an offset's records over files either.
    assert sorted(os.listdir(path)) == ["_staging", "t+0+0-1.parquet", "t+0+2-3.parquet"]
    reader = sk.sources.ParquetArchive(str(path)).open_partition(0)
    assert [r[3] for r in reader.read(2)] == [b"0", b"10", b"11", b"12"]  # the limit falls inside offset 1
    assert reader.position == 2
    assert [r[3] for r in reader.read(2)] == [b"20", b"30", b"31"]  # ... and inside offset 3
    assert reader.position == 4 and reader.read(2) == []
    reader.seek(1)
    assert [r[3] for r in reader.read(1)] == [b"10", b"11", b"12"]
    assert read_all(sk.sources.ParquetArchive(str(path)).open_partition(0), batch=1) == [raw(*row) for row in rows]


def test_archive_source_reads_sequence_suffixed_files_after_the_unsuffixed_one(tmp_path: Path) -> None:
    path = tmp_path / "a"
    tp = TopicPartition("in", 0)
    write_archive(path, {("in", 0): [(i, f"k{i}", i, i) for i in range(6)]}, roll_records=5)  # 0-4, then 5-5
    for run in (1, 2):  # later runs send records between input records: filed under offset 5 again
        writer = sk.sinks.ParquetArchive(str(path), roll_records=5).open(SinkTask("app", "0_0", "archive", (tp,)))
        writer.start()
        writer.write(SinkRecord(f"p{run}", 100 + run, 50 + run, "in", 0, None))
        writer.commit({tp: 6})
        writer.close()
    assert sorted(os.listdir(path)) == ["_staging", "in+0+0-4.parquet", "in+0+5-5+1.parquet", "in+0+5-5+2.parquet",
                                        "in+0+5-5.parquet"]
    expected = [raw(i, f"k{i}", i, i) for i in range(6)] + [raw(5, "p1", 101, 51), raw(5, "p2", 102, 52)]
    source = sk.sources.ParquetArchive(str(path))
    assert read_all(source.open_partition(0), batch=2) == expected
    reader = source.open_partition(0)
    reader.seek(5)  # all three files of offset 5, in one batch
    assert reader.read(1) == expected[5:] and reader.position == 6


@pytest.mark.parametrize("schema", [
    pytest.param({"value": "string"}, id="dict"),
    pytest.param({"n": "int64", "value": "string"}, id="dict-with-others"),
    pytest.param(pa.schema([pa.field("value", pa.string())]), id="pyarrow"),
])
def test_archive_sink_rejects_a_schema_field_named_value(tmp_path: Path, schema) -> None:
    # 'value' marks an archive without a schema, so the source could not read such a file back.
    with pytest.raises(ConfigError) as raised:
        sk.sinks.ParquetArchive(str(tmp_path / "a"), schema=schema)
    assert "value" in str(raised.value) and "clash" in str(raised.value)


def test_archive_source_read_of_zero_records(two_partition_archive) -> None:
    path, _ = two_partition_archive
    reader = sk.sources.ParquetArchive(str(path)).open_partition(0)
    assert reader.read(0) == []
    assert reader.position == 0


# -- end to end on the real worker ------------------------------------------------------------------

def run_worker(workdir: Path, module: str, broker: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": f"{workdir}{os.pathsep}{REPO}"}
    env.pop("STREAMKIT_CRASH_AT", None)
    return subprocess.run([sys.executable, "-m", "streamkit", "--log-level", "WARNING", "worker", f"{module}:app",
                           "--broker", f"embedded://{broker}", "--until-idle", "1"],
                          cwd=workdir, env=env, capture_output=True, text=True, timeout=120)


def committed(broker_dir: Path, topic: str) -> List[tuple]:
    """(partition, offset, timestamp, key, value, headers) of every committed record of ``topic``."""
    broker = EmbeddedBroker(broker_dir)
    out = []
    try:
        meta = broker.topic(topic)
        for partition in range(meta.partitions if meta else 0):
            reader = broker.reader(topic, partition, read_committed=True)
            while True:
                records = reader.read(10_000)
                if not records:
                    break
                out.extend((partition, *record) for record in records)
    finally:
        broker.close()
    return out


def group_offsets(broker_dir: Path, group: str) -> Dict[TopicPartition, int]:
    broker = EmbeddedBroker(broker_dir)
    try:
        return broker.committed_offsets(group)
    finally:
        broker.close()


def test_worker_counts_files_and_resumes_with_files_added_later(tmp_path: Path) -> None:
    (tmp_path / "filesmod.py").write_text(textwrap.dedent("""
        import streamkit as sk
        app = sk.App("files-e2e")

        @app.topology
        def build(b):
            views = b.stream(sk.sources.Files("input/*.jsonl", timestamp="ts", key="page"))
            views.to("raw")
            views.group_by_key().count(name="c").to_stream().to("counts")
    """))
    broker = tmp_path / "broker"
    write_lines(tmp_path / "input" / "2024-01-01.jsonl", [
        {"page": "home", "ts": "2024-01-01T10:00:00Z"}, "",
        {"page": "cart", "ts": 1_704_103_200_000},
        {"page": "home", "ts": "2024-01-01T12:00:00+01:00"}])
    first = run_worker(tmp_path, "filesmod", broker)
    assert first.returncode == 0, first.stderr
    anchor = TopicPartition("files-e2e-source-files", 0)
    assert group_offsets(broker, "files-e2e")[anchor] == 3

    def final_counts() -> Dict[bytes, bytes]:
        return {key: value for _p, _o, _ts, key, value, _h in committed(broker, "counts")}

    assert final_counts() == {b"home": b"2", b"cart": b"1"}

    # A new file sorting after the first: only its rows are processed by the next run.
    write_lines(tmp_path / "input" / "2024-01-02.jsonl", [
        {"page": "home", "ts": "2024-01-02T09:00:00Z"}, {"page": "shop", "ts": "2024-01-02T09:30:00Z"}])
    second = run_worker(tmp_path, "filesmod", broker)
    assert second.returncode == 0, second.stderr
    assert group_offsets(broker, "files-e2e")[anchor] == 5
    assert final_counts() == {b"home": b"3", b"cart": b"1", b"shop": b"1"}
    # Every row once, in file and row order, with its timestamp and origin headers.
    raw_records = sorted(committed(broker, "raw"), key=lambda r: (dict(r[5])["streamkit.file"],
                                                                int(dict(r[5])["streamkit.row"])))
    assert [(dict(h)["streamkit.file"], dict(h)["streamkit.row"]) for *_rest, h in raw_records] == [
        (b"input/2024-01-01.jsonl", b"0"), (b"input/2024-01-01.jsonl", b"1"), (b"input/2024-01-01.jsonl", b"2"),
        (b"input/2024-01-02.jsonl", b"0"), (b"input/2024-01-02.jsonl", b"1")]
    assert [(key, orjson.loads(value)["page"]) for _p, _o, _ts, key, value, _h in raw_records] == [
        (b"home", "home"), (b"cart", "cart"), (b"home", "home"), (b"home", "home"), (b"shop", "shop")]
    assert [ts for _p, _o, ts, _k, _v, _h in raw_records] == [
        ms(datetime(2024, 1, 1, 10, tzinfo=timezone.utc)), 1_704_103_200_000,
        ms(datetime(2024, 1, 1, 11, tzinfo=timezone.utc)), ms(datetime(2024, 1, 2, 9, tzinfo=timezone.utc)),
        ms(datetime(2024, 1, 2, 9, 30, tzinfo=timezone.utc))]


def test_worker_stops_on_a_bad_timestamp_and_commits_nothing_past_it(tmp_path: Path) -> None:
    (tmp_path / "badts.py").write_text(textwrap.dedent("""
        import streamkit as sk
        app = sk.App("files-bad")

        @app.topology
        def build(b):
            b.stream(sk.sources.Files("input/*.jsonl", timestamp="ts", key="page")).to("out")
    """))
    broker = tmp_path / "broker"
    data = write_lines(tmp_path / "input" / "a.jsonl",
                       [{"page": "a", "ts": 1}, {"page": "b", "ts": "2024-01-02T03:04:05"}])
    failed = run_worker(tmp_path, "badts", broker)
    assert failed.returncode != 0
    assert "input/a.jsonl row 1 (offset 1)" in failed.stderr and "has no timezone" in failed.stderr
    assert group_offsets(broker, "files-bad") == {}
    assert committed(broker, "out") == []
    write_lines(data, [{"page": "a", "ts": 1}, {"page": "b", "ts": "2024-01-02T03:04:05Z"}])  # fixed
    fixed = run_worker(tmp_path, "badts", broker)
    assert fixed.returncode == 0, fixed.stderr
    assert [(key, ts) for _p, _o, ts, key, _v, _h in committed(broker, "out")] == [
        (b"a", 1), (b"b", ms(datetime(2024, 1, 2, 3, 4, 5, tzinfo=timezone.utc)))]


def test_worker_replays_an_archive_as_the_original_records(tmp_path: Path) -> None:
    broker = tmp_path / "broker"
    with EmbeddedBroker(broker) as b:
        b.create_topic("events", 2)
        for p in range(2):
            b.append("events", p, [(None if i == 4 else f"k{i % 3}".encode(), orjson.dumps({"i": i, "p": p}),
                                    1_000 + 10 * i + p, None) for i in range(7 + p)])
    (tmp_path / "archiver.py").write_text(textwrap.dedent("""
        import streamkit as sk
        app = sk.App("archiver")
        events = app.topic("events", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json(), partitions=2)

        @app.topology
        def build(b):
            b.stream(events).sink(sk.sinks.ParquetArchive("archive", roll_records=3), name="archive")
    """))
    (tmp_path / "replayer.py").write_text(textwrap.dedent("""
        import streamkit as sk
        app = sk.App("replayer")

        @app.topology
        def build(b):
            replay = b.stream(sk.sources.ParquetArchive("archive"))
            replay.sink(sk.sinks.ParquetArchive("copy"), name="copy")
            replay.to("replayed")
    """))
    archived = run_worker(tmp_path, "archiver", broker)
    assert archived.returncode == 0, archived.stderr
    assert sorted(os.listdir(tmp_path / "archive")) == [
        "_staging", "events+0+0-2.parquet", "events+0+3-5.parquet", "events+0+6-6.parquet",
        "events+1+0-2.parquet", "events+1+3-5.parquet", "events+1+6-7.parquet"]
    replayed = run_worker(tmp_path, "replayer", broker)
    assert replayed.returncode == 0, replayed.stderr

    def rows(directory: Path, topic: str) -> List[tuple]:
        out = []
        for name in sorted(os.listdir(directory)):
            if name.startswith(topic + "+") and name.endswith(".parquet"):
                out += [(r["partition"], r["offset"], r["timestamp"], r["key"], r["value"])
                        for r in pq.read_table(directory / name).to_pylist()]
        return sorted(out)

    original = rows(tmp_path / "archive", "events")
    expected = sorted((p, i, 1_000 + 10 * i + p, None if i == 4 else f'"k{i % 3}"', f'{{"i":{i},"p":{p}}}')
                      for p in range(2) for i in range(7 + p))
    assert original == expected
    # The replay saw the same partitions, offsets, timestamps, keys and values.
    assert rows(tmp_path / "copy", "replayer-source-archive-events") == original
    anchor = "replayer-source-archive-events"
    assert group_offsets(broker, "replayer") == {TopicPartition(anchor, 0): 7, TopicPartition(anchor, 1): 8}
    out = committed(broker, "replayed")
    assert sorted((ts, key, orjson.loads(value)["i"]) for _p, _o, ts, key, value, _h in out) == sorted(
        (1_000 + 10 * i + p, None if i == 4 else f"k{i % 3}".encode(), i) for p in range(2) for i in range(7 + p))


@pytest.mark.parametrize("make_directory, says", [(False, "does not exist"), (True, "holds no rolled file yet")])
def test_an_empty_or_missing_parquet_archive_says_what_writes_one(tmp_path: Path, make_directory: bool,
                                                                   says: str) -> None:
    path = tmp_path / "archive" / "pageviews"
    if make_directory:
        path.mkdir(parents=True)
    for archive in (sk.sources.ParquetArchive(str(path), topic="pageviews"), sk.sources.ParquetArchive(str(path))):
        with pytest.raises(ConfigError) as raised:
            archive.files()
        message = str(raised.value)
        assert says in message
        assert "sk.sinks.ParquetArchive(" in message and "streamkit worker apps.archive" in message
