"""File sinks (``sk.sinks.ParquetArchive`` and ``sk.sinks.JsonLines``): naming, staging,
rolling, schemas, errors, and exactly-once recovery after crashes.

Everything runs on real files and real pyarrow. Topology-level tests use the
TopologyTestDriver (a commit after every piped record; ``close()`` closes the sinks
cleanly). Crash tests drive the writers directly: a "crash" abandons a writer without
closing it, and a new writer is opened on the same directory; staging files are
corrupted by hand where a test needs a torn write.
"""
from __future__ import annotations

import dataclasses
import os
import random
import shutil
import subprocess
import time
from datetime import timedelta
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

import orjson
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import streamkit as sk
from streamkit.errors import ConfigError, RecordError, SerializationError, SinkError
from streamkit.sinks import SinkRecord, SinkTask
from streamkit.testing import TopologyTestDriver
from streamkit.transport.base import TopicPartition

TP = TopicPartition("in", 0)


# -- helpers ---------------------------------------------------------------------------------

def open_writer(sink: sk.sinks.Sink, inputs: Sequence[TopicPartition] = (TP,)):
    writer = sink.open(SinkTask("app", "0_0", "node", tuple(inputs)))
    writer.start()
    return writer


def rec(offset: Optional[int], key=None, value=None, ts: int = 0, topic: str = "in", partition: int = 0) -> SinkRecord:
    return SinkRecord(key, value, ts, topic, partition, offset)


def rolled_names(path: Path, ext: str) -> List[str]:
    """Names of the rolled files, by topic, partition and first offset (numerically)."""
    def order(name: str):
        topic, partition, span = name.rsplit(".", 1)[0].split("+")
        return topic, int(partition), int(span.split("-")[0])
    return sorted((name for name in os.listdir(path) if name.endswith("." + ext) and not name.startswith(".")),
                  key=order)


def read_rolled(path: Path, ext: str) -> Dict[str, List[dict]]:
    """Rows of every rolled file, by file name (keys and values decoded from JSON)."""
    out = {}
    for name in rolled_names(path, ext):
        full = path / name
        if ext == "parquet":
            rows = pq.read_table(full).to_pylist()
            for row in rows:
                row["key"] = None if row["key"] is None else orjson.loads(row["key"])
                if "value" in row:
                    row["value"] = None if row["value"] is None else orjson.loads(row["value"])
        else:
            rows = [orjson.loads(line) for line in full.read_bytes().splitlines()]
        out[name] = rows
    return out


def parse_staging(file: Path) -> Tuple[List[list], List[int], bytes]:
    """(committed rows, marker values, bytes after the last marker) of a staging file,
    parsed independently of the library: rows count only once a marker follows them."""
    data = file.read_bytes() if file.exists() else b""
    rows: List[list] = []
    markers: List[int] = []
    block: List[list] = []
    good = 0
    position = 0
    for line in data.splitlines(keepends=True):
        position += len(line)
        if not line.endswith(b"\n"):
            break
        try:
            item = orjson.loads(line)
        except orjson.JSONDecodeError:
            break
        if isinstance(item, dict):
            rows.extend(block)
            block = []
            markers.append(item["next"])
            good = position
        else:
            block.append(item)
    return rows, markers, data[good:]


def staging_file(path: Path, topic: str = "in", partition: int = 0) -> Path:
    return path / "_staging" / f"{topic}+{partition}.jsonl"


def all_delivered(path: Path, ext: str, topic: str = "in", partition: int = 0) -> List[Tuple[int, object, object]]:
    """(offset, key, value) of every record delivered: in rolled files, then committed in staging."""
    out = []
    prefix = f"{topic}+{partition}+"
    for name, rows in read_rolled(path, ext).items():
        if name.startswith(prefix):
            out.extend((row["offset"], row["key"], row["value"]) for row in rows)
    staged, _, _ = parse_staging(staging_file(path, topic, partition))
    out.extend((offset, key, value) for offset, _ts, key, value in staged)
    return out


def assert_file_names_match_rows(path: Path, ext: str) -> None:
    """Every rolled file is named after the first and last origin offsets it holds, and no
    offset is in two files."""
    seen: Dict[int, str] = {}
    for name, rows in read_rolled(path, ext).items():
        topic_partition, _, span = name.rpartition("+")
        first, last = (int(x) for x in span.split(".")[0].split("-"))
        offsets = [row["offset"] for row in rows]
        assert rows, name
        assert offsets == sorted(offsets), name
        assert (offsets[0], offsets[-1]) == (first, last), name
        for offset in set(offsets):
            assert offset not in seen, f"offset {offset} is in {seen.get(offset)} and {name}"
            seen[offset] = name


def sink_app(*sinks: sk.sinks.Sink, app_id: str = "t1", **app_kwargs) -> sk.App:
    app = sk.App(app_id, **app_kwargs)

    @app.topology
    def build(b):
        stream = b.stream("in")
        for i, sink in enumerate(sinks):
            stream.sink(sink, name=f"sink{i}")
    return app


def make_sink(ext: str, path, **kwargs):
    return (sk.sinks.ParquetArchive if ext == "parquet" else sk.sinks.JsonLines)(str(path), **kwargs)


# -- naming, columns, staging format ---------------------------------------------------------

def test_parquet_files_are_named_by_input_offsets_and_hold_typed_columns(tmp_path: Path) -> None:
    archive = tmp_path / "arch"
    app = sink_app(sk.sinks.ParquetArchive(str(archive), roll_records=3))
    with TopologyTestDriver(app, deliver_external_sinks=True) as driver:
        topic = driver.input_topic("in")
        for i in range(7):
            topic.pipe_input(f"k{i}", {"n": i, "tags": ["x", i]}, timestamp=1000 + i)
        # 6 records reached the roll size twice; the 7th waits in staging.
        assert rolled_names(archive, "parquet") == ["in+0+0-2.parquet", "in+0+3-5.parquet"]
        staged, markers, tail = parse_staging(staging_file(archive))
        assert staged == [[6, 1006, "k6", {"n": 6, "tags": ["x", 6]}]] and markers[-1] == 7 and tail == b""
    # A clean close rolls what is staged.
    assert rolled_names(archive, "parquet") == ["in+0+0-2.parquet", "in+0+3-5.parquet", "in+0+6-6.parquet"]
    assert parse_staging(staging_file(archive))[0] == []

    table = pq.read_table(archive / "in+0+3-5.parquet")
    assert table.schema.names == ["key", "value", "timestamp", "partition", "offset"]
    assert [table.schema.field(n).type for n in table.schema.names] == [
        pa.string(), pa.string(), pa.int64(), pa.int32(), pa.int64()]
    assert table.to_pylist() == [
        {"key": '"k3"', "value": '{"n":3,"tags":["x",3]}', "timestamp": 1003, "partition": 0, "offset": 3},
        {"key": '"k4"', "value": '{"n":4,"tags":["x",4]}', "timestamp": 1004, "partition": 0, "offset": 4},
        {"key": '"k5"', "value": '{"n":5,"tags":["x",5]}', "timestamp": 1005, "partition": 0, "offset": 5},
    ]
    assert all_delivered(archive, "parquet") == [(i, f"k{i}", {"n": i, "tags": ["x", i]}) for i in range(7)]
    assert not [n for n in os.listdir(archive) if n.endswith(".tmp")]


def test_json_lines_files_hold_one_object_per_record(tmp_path: Path) -> None:
    jl = tmp_path / "jl"
    app = sink_app(sk.sinks.JsonLines(str(jl), roll_records=2))
    with TopologyTestDriver(app, deliver_external_sinks=True) as driver:
        topic = driver.input_topic("in")
        topic.pipe_input("a", {"n": 1}, timestamp=5)
        topic.pipe_input(None, {"n": 2}, timestamp=6)  # no key
        topic.pipe_input("c", None, timestamp=7)  # a tombstone
        assert rolled_names(jl, "jsonl") == ["in+0+0-1.jsonl"]
    assert rolled_names(jl, "jsonl") == ["in+0+0-1.jsonl", "in+0+2-2.jsonl"]
    lines = (jl / "in+0+0-1.jsonl").read_bytes().splitlines()
    assert [orjson.loads(line) for line in lines] == [
        {"key": "a", "value": {"n": 1}, "timestamp": 5, "partition": 0, "offset": 0},
        {"key": None, "value": {"n": 2}, "timestamp": 6, "partition": 0, "offset": 1},
    ]
    assert [orjson.loads(line) for line in (jl / "in+0+2-2.jsonl").read_bytes().splitlines()] == [
        {"key": "c", "value": None, "timestamp": 7, "partition": 0, "offset": 2}]


def test_both_sinks_of_one_stream_archive_the_same_records(tmp_path: Path) -> None:
    app = sink_app(sk.sinks.ParquetArchive(str(tmp_path / "arch"), roll_records=3),
                   sk.sinks.JsonLines(str(tmp_path / "jl"), roll_records=2))
    with TopologyTestDriver(app, deliver_external_sinks=True) as driver:
        for i in range(5):
            driver.input_topic("in").pipe_input(f"k{i}", {"n": i}, timestamp=i)
    assert rolled_names(tmp_path / "arch", "parquet") == ["in+0+0-2.parquet", "in+0+3-4.parquet"]
    assert rolled_names(tmp_path / "jl", "jsonl") == ["in+0+0-1.jsonl", "in+0+2-3.jsonl", "in+0+4-4.jsonl"]
    expected = [(i, f"k{i}", {"n": i}) for i in range(5)]
    assert all_delivered(tmp_path / "arch", "parquet") == expected
    assert all_delivered(tmp_path / "jl", "jsonl") == expected


def test_each_commit_appends_one_marked_block_to_staging(tmp_path: Path) -> None:
    archive = tmp_path / "arch"
    sink = sk.sinks.ParquetArchive(str(archive), roll_records=100)
    writer = open_writer(sink)
    writer.write(rec(0, "a", {"v": 0}, ts=10))
    writer.write(rec(0, "a", {"v": "0b"}, ts=10))  # two records of one input offset
    writer.write(rec(1, None, None, ts=11))
    writer.commit({TP: 2})
    writer.write(rec(4, {"k": 1}, [1, 2], ts=14))
    writer.commit({TP: 7})  # offsets 2..6 wrote nothing here: the marker holds the task's position
    writer.commit({TP: 9})  # nothing pending: nothing appended
    lines = [orjson.loads(line) for line in staging_file(archive).read_bytes().splitlines()]
    assert lines == [[0, 10, "a", {"v": 0}], [0, 10, "a", {"v": "0b"}], [1, 11, None, None], {"next": 2},
                     [4, 14, {"k": 1}, [1, 2]], {"next": 7}]
    assert rolled_names(archive, "parquet") == []
    writer.close()
    assert rolled_names(archive, "parquet") == ["in+0+0-4.parquet"]
    # The roll rewrote the staging file without the rows, its marker naming the rolled file.
    assert [orjson.loads(l) for l in staging_file(archive).read_bytes().splitlines()] == [
        {"next": 7, "rolling": ["in+0+0-4.parquet"]}]
    assert open_writer(sink).delivered_until == {("in", 0): 7}


def test_records_of_one_input_offset_never_split_across_files(tmp_path: Path) -> None:
    archive = tmp_path / "arch"
    writer = open_writer(sk.sinks.ParquetArchive(str(archive), roll_records=2))
    for offset in [0, 1, 1, 1, 2, 3, 3]:
        writer.write(rec(offset, "k", {"o": offset}))
    writer.commit({TP: 4})  # one commit: the roll cuts chunks of 2, extended to whole offsets
    assert rolled_names(archive, "parquet") == ["in+0+0-1.parquet", "in+0+2-3.parquet"]
    rows = read_rolled(archive, "parquet")
    assert [r["offset"] for r in rows["in+0+0-1.parquet"]] == [0, 1, 1, 1]
    assert [r["offset"] for r in rows["in+0+2-3.parquet"]] == [2, 3, 3]


def test_flat_map_output_of_one_offset_stays_in_one_file(tmp_path: Path) -> None:
    app = sk.App("fm")

    @app.topology
    def build(b):
        (b.stream("in").flat_map(lambda k, v: [(f"{k}-{j}", {"n": v["n"], "j": j}) for j in range(v["n"] % 4)])
         .sink(sk.sinks.JsonLines(str(tmp_path / "jl"), roll_records=3)))

    with TopologyTestDriver(app, deliver_external_sinks=True) as driver:
        for n in range(12):
            driver.input_topic("in").pipe_input(f"k{n}", {"n": n}, timestamp=n)
    assert_file_names_match_rows(tmp_path / "jl", "jsonl")
    delivered = all_delivered(tmp_path / "jl", "jsonl")
    assert delivered == [(n, f"k{n}-{j}", {"n": n, "j": j}) for n in range(12) for j in range(n % 4)]
    assert parse_staging(staging_file(tmp_path / "jl"))[0] == []  # all rolled at close
    for name, rows in read_rolled(tmp_path / "jl", "jsonl").items():
        offsets = [r["offset"] for r in rows]
        # A file holds whole offsets: every offset it holds has all of its n % 4 records there.
        assert all(offsets.count(o) == o % 4 for o in set(offsets)), name


def test_multiple_input_topics_get_separate_file_series(tmp_path: Path) -> None:
    app = sk.App("merge")

    @app.topology
    def build(b):
        b.stream("a").merge(b.stream("b")).sink(sk.sinks.ParquetArchive(str(tmp_path / "arch"), roll_records=2))

    with TopologyTestDriver(app, deliver_external_sinks=True) as driver:
        for i in range(3):
            driver.input_topic("a").pipe_input(f"a{i}", {"i": i}, timestamp=i)
        for i in range(5):
            driver.input_topic("b").pipe_input(f"b{i}", {"i": i}, timestamp=i)
        assert sorted(os.listdir(tmp_path / "arch" / "_staging")) == ["a+0.jsonl", "b+0.jsonl"]
    assert rolled_names(tmp_path / "arch", "parquet") == [
        "a+0+0-1.parquet", "a+0+2-2.parquet", "b+0+0-1.parquet", "b+0+2-3.parquet", "b+0+4-4.parquet"]
    assert all_delivered(tmp_path / "arch", "parquet", "a") == [(i, f"a{i}", {"i": i}) for i in range(3)]
    assert all_delivered(tmp_path / "arch", "parquet", "b") == [(i, f"b{i}", {"i": i}) for i in range(5)]


def test_json_keys_are_stored_as_json_text_and_none_keys_as_null(tmp_path: Path) -> None:
    archive = tmp_path / "arch"
    app = sink_app(sk.sinks.ParquetArchive(str(archive)), app_id="jk", default_key_serde=sk.serdes.Json())
    with TopologyTestDriver(app, deliver_external_sinks=True) as driver:
        topic = driver.input_topic("in")
        topic.pipe_input({"user": 1, "region": "eu"}, {"n": 1}, timestamp=1)
        topic.pipe_input([1, "x"], {"n": 2}, timestamp=2)
        topic.pipe_value({"n": 3}, timestamp=3)
    table = pq.read_table(archive / "in+0+0-2.parquet")
    assert table.column("key").to_pylist() == ['{"user":1,"region":"eu"}', '[1,"x"]', None]
    assert table.column("key").null_count == 1


def test_compression_is_zstd_by_default_and_configurable(tmp_path: Path) -> None:
    for name, kwargs, expected in [("default", {}, "ZSTD"), ("snappy", {"compression": "snappy"}, "SNAPPY")]:
        path = tmp_path / name
        writer = open_writer(sk.sinks.ParquetArchive(str(path), **kwargs))
        writer.write(rec(0, "k", {"n": 1}))
        writer.commit({TP: 1})
        writer.close()
        meta = pq.ParquetFile(path / "in+0+0-0.parquet").metadata
        assert {meta.row_group(0).column(i).compression for i in range(meta.num_columns)} == {expected}


# -- rolling by age and on close ---------------------------------------------------------------

def test_roll_interval_rolls_aged_staging_at_the_next_commit(tmp_path: Path) -> None:
    aged, never = tmp_path / "aged", tmp_path / "never"
    app = sink_app(sk.sinks.JsonLines(str(aged), roll_interval=timedelta(milliseconds=400)),
                   sk.sinks.JsonLines(str(never), roll_interval=None))
    with TopologyTestDriver(app, deliver_external_sinks=True) as driver:
        topic = driver.input_topic("in")
        topic.pipe_input("a", {"n": 0}, timestamp=0)
        assert rolled_names(aged, "jsonl") == []  # younger than the interval
        time.sleep(0.5)  # the staging is now older than the interval (a lower bound, not a timing check)
        topic.pipe_input("b", {"n": 1}, timestamp=1)
        assert rolled_names(aged, "jsonl") == ["in+0+0-1.jsonl"]
        assert rolled_names(never, "jsonl") == []  # no age limit: still staged
        assert len(parse_staging(staging_file(never))[0]) == 2
    assert rolled_names(never, "jsonl") == ["in+0+0-1.jsonl"]


def test_roll_interval_applies_at_a_commit_without_new_sink_records(tmp_path: Path) -> None:
    archive = tmp_path / "jl"
    app = sk.App("ri")
    app.topology(lambda b: b.stream("in").filter(lambda k, v: v["keep"])
                 .sink(sk.sinks.JsonLines(str(archive), roll_interval=0.05)))
    with TopologyTestDriver(app, deliver_external_sinks=True) as driver:
        topic = driver.input_topic("in")
        topic.pipe_input("a", {"keep": True}, timestamp=0)
        time.sleep(0.12)
        topic.pipe_input("b", {"keep": False}, timestamp=1)  # processed and committed; nothing for the sink
        assert rolled_names(archive, "jsonl") == ["in+0+0-0.jsonl"]


def test_roll_on_close_false_leaves_records_staged_for_the_next_writer(tmp_path: Path) -> None:
    archive = tmp_path / "arch"
    sink = sk.sinks.ParquetArchive(str(archive), roll_on_close=False)
    writer = open_writer(sink)
    for i in range(3):
        writer.write(rec(i, "k", {"i": i}))
    writer.commit({TP: 3})
    writer.close()
    assert rolled_names(archive, "parquet") == []
    assert [r[0] for r in parse_staging(staging_file(archive))[0]] == [0, 1, 2]
    rolling = open_writer(sk.sinks.ParquetArchive(str(archive)))
    assert rolling.delivered_until == {("in", 0): 3}
    rolling.write(rec(3, "k", {"i": 3}))
    rolling.commit({TP: 4})
    rolling.close()
    assert rolled_names(archive, "parquet") == ["in+0+0-3.parquet"]
    assert all_delivered(archive, "parquet") == [(i, "k", {"i": i}) for i in range(4)]


def test_discarded_and_uncommitted_records_are_never_delivered(tmp_path: Path) -> None:
    archive = tmp_path / "arch"
    sink = sk.sinks.JsonLines(str(archive))
    writer = open_writer(sink)
    writer.write(rec(0, "k", {"i": 0}))
    writer.commit({TP: 1})
    writer.write(rec(1, "k", {"i": 1}))
    assert writer.discard() == 1  # the task's uncommitted work is abandoned
    writer.close()  # no roll after a discard
    assert rolled_names(archive, "jsonl") == []
    assert all_delivered(archive, "jsonl") == [(0, "k", {"i": 0})]

    pending = open_writer(sink)
    pending.write(rec(1, "k", {"i": 1}))
    pending.close()  # closed with records never committed: nothing rolled, nothing staged
    assert rolled_names(archive, "jsonl") == []
    assert all_delivered(archive, "jsonl") == [(0, "k", {"i": 0})]

    final = open_writer(sink)
    assert final.delivered_until == {("in", 0): 1}
    final.write(rec(1, "k", {"i": 1}))
    final.commit({TP: 2})
    final.close()
    assert rolled_names(archive, "jsonl") == ["in+0+0-1.jsonl"]
    assert all_delivered(archive, "jsonl") == [(0, "k", {"i": 0}), (1, "k", {"i": 1})]


# -- schemas -------------------------------------------------------------------------------------

@dataclasses.dataclass
class Reading:
    sensor: str
    value_c: float
    ok: bool


def test_dict_schema_gives_one_typed_column_per_field(tmp_path: Path) -> None:
    archive = tmp_path / "arch"
    sink = sk.sinks.ParquetArchive(str(archive), schema={"user": "string", "n": "int64", "score": "double",
                                                         "ok": "bool"})
    app = sink_app(sink)
    with TopologyTestDriver(app, deliver_external_sinks=True) as driver:
        topic = driver.input_topic("in")
        topic.pipe_input("a", {"user": "u1", "n": 3, "score": 1.5, "ok": True}, timestamp=7)
        topic.pipe_input("b", {"n": 4}, timestamp=8)  # missing fields are null
        topic.pipe_input("c", None, timestamp=9)  # a None value: every field null
    table = pq.read_table(archive / "in+0+0-2.parquet")
    assert table.schema.names == ["key", "user", "n", "score", "ok", "timestamp", "partition", "offset"]
    assert [table.schema.field(n).type for n in ("user", "n", "score", "ok")] == [
        pa.string(), pa.int64(), pa.float64(), pa.bool_()]
    assert table.to_pylist() == [
        {"key": '"a"', "user": "u1", "n": 3, "score": 1.5, "ok": True, "timestamp": 7, "partition": 0, "offset": 0},
        {"key": '"b"', "user": None, "n": 4, "score": None, "ok": None, "timestamp": 8, "partition": 0, "offset": 1},
        {"key": '"c"', "user": None, "n": None, "score": None, "ok": None, "timestamp": 9, "partition": 0,
         "offset": 2},
    ]


def test_pyarrow_schema_and_dataclass_values(tmp_path: Path) -> None:
    archive = tmp_path / "arch"
    schema = pa.schema([pa.field("sensor", pa.string()), pa.field("value_c", pa.float32()),
                        pa.field("ok", pa.bool_())])
    app = sk.App("dc")
    app.topology(lambda b: b.stream("in").map_values(lambda v: Reading(**v))
                 .sink(sk.sinks.ParquetArchive(str(archive), schema=schema)))
    with TopologyTestDriver(app, deliver_external_sinks=True) as driver:
        driver.input_topic("in").pipe_input("s", {"sensor": "s1", "value_c": 21.5, "ok": True}, timestamp=1)
        driver.input_topic("in").pipe_input("s", {"sensor": "s2", "value_c": -3.0, "ok": False}, timestamp=2)
    table = pq.read_table(archive / "in+0+0-1.parquet")
    assert table.schema.field("value_c").type == pa.float32()
    assert table.select(["sensor", "value_c", "ok", "offset"]).to_pylist() == [
        {"sensor": "s1", "value_c": 21.5, "ok": True, "offset": 0},
        {"sensor": "s2", "value_c": -3.0, "ok": False, "offset": 1}]


@pytest.mark.parametrize("value, words", [
    (5, ["dicts or dataclasses", "int"]),
    (["n", 1], ["dicts or dataclasses", "list"]),
    ({"n": 1, "extra": 2, "more": 3}, ["'extra'", "'more'", "schema"]),
])
def test_values_not_fitting_the_schema_fail_while_processed(tmp_path: Path, value, words) -> None:
    archive = tmp_path / "arch"
    app = sk.App("bad")
    app.topology(lambda b: b.stream("in").map_values(lambda v: v["out"])
                 .sink(sk.sinks.ParquetArchive(str(archive), schema={"n": "int64"})))
    with TopologyTestDriver(app, deliver_external_sinks=True) as driver:
        topic = driver.input_topic("in")
        topic.pipe_input("a", {"out": {"n": 1}}, timestamp=1)
        with pytest.raises(RecordError) as raised:
            topic.pipe_input("b", {"out": value}, timestamp=2)
        error = raised.value
        assert (error.stage, error.topic, error.partition, error.offset) == ("processing", "in", 0, 1)
        assert "topic 'in', partition 0, offset 1" in str(error)
        assert all(word in str(error) for word in words), str(error)
        assert isinstance(error.cause, SerializationError)
    # The failed record was never buffered: only the good one is archived.
    assert [(r["offset"], r["n"]) for r in read_rolled(archive, "parquet")["in+0+0-0.parquet"]] == [(0, 1)]


def test_error_handlers_apply_to_records_a_sink_cannot_take(tmp_path: Path) -> None:
    archive = tmp_path / "arch"
    app = sk.App("skip", processing_error_handler="log_and_skip")
    app.topology(lambda b: b.stream("in").map_values(lambda v: v["out"])
                 .sink(sk.sinks.ParquetArchive(str(archive), schema={"n": "int64"})))
    with TopologyTestDriver(app, deliver_external_sinks=True) as driver:
        topic = driver.input_topic("in")
        for i, out in enumerate([{"n": 0}, "not a dict", {"n": 2}, {"zz": 1}, {"n": 4}]):
            topic.pipe_input(f"k{i}", {"out": out}, timestamp=i)
        assert driver.metrics()["records_skipped"] == 2
    assert [(r["offset"], r["n"]) for rows in read_rolled(archive, "parquet").values() for r in rows] == [
        (0, 0), (2, 2), (4, 4)]


def test_dead_letter_handler_takes_unserializable_values(tmp_path: Path) -> None:
    archive = tmp_path / "jl"
    app = sk.App("dlq", processing_error_handler="dead_letter")
    app.topology(lambda b: b.stream("in").map_values(lambda v: {"s": {1, 2}} if v["bad"] else v)
                 .sink(sk.sinks.JsonLines(str(archive))))
    with TopologyTestDriver(app, deliver_external_sinks=True) as driver:
        topic = driver.input_topic("in")
        topic.pipe_input("a", {"bad": False}, timestamp=1)
        topic.pipe_input("b", {"bad": True}, timestamp=2)
        topic.pipe_input("c", {"bad": False}, timestamp=3)
        dead = driver.output_topic("dlq-dlq").read_records()
    assert len(dead) == 1
    headers = dict(dead[0].headers)
    assert headers["streamkit.error.offset"] == b"1" and headers["streamkit.error.class"] == b"SerializationError"
    assert b"cannot be written as JSON" in headers["streamkit.error.message"]
    assert [(o, k) for o, k, _ in all_delivered(archive, "jsonl")] == [(0, "a"), (2, "c")]


@pytest.mark.parametrize("mapper, what", [
    (lambda k, v: (k, {"when": object()}), "value"),
    (lambda k, v: ({1, 2}, v), "key"),
    (lambda k, v: (k, {"big": 2 ** 70}), "value"),
])
def test_json_unserializable_records_fail_while_processed(tmp_path: Path, mapper, what) -> None:
    archive = tmp_path / "arch"
    app = sk.App("unser", default_key_serde=sk.serdes.Json())
    app.topology(lambda b: b.stream("in").map(lambda k, v: mapper(k, v) if v["bad"] else (k, v))
                 .sink(sk.sinks.ParquetArchive(str(archive))))
    with TopologyTestDriver(app, deliver_external_sinks=True) as driver:
        topic = driver.input_topic("in")
        topic.pipe_input("a", {"bad": False}, timestamp=1)
        with pytest.raises(RecordError) as raised:
            topic.pipe_input("b", {"bad": True}, timestamp=2)
        assert raised.value.offset == 1 and raised.value.topic == "in"
        assert "cannot be written as JSON" in str(raised.value), what
        topic.pipe_input("c", {"bad": False}, timestamp=3)
    assert [(o, k) for o, k, _ in all_delivered(archive, "parquet")] == [(0, "a"), (2, "c")]


def test_a_value_of_the_wrong_field_type_fails_while_processed_not_at_roll(tmp_path: Path) -> None:
    archive = tmp_path / "arch"
    app = sink_app(sk.sinks.ParquetArchive(str(archive), roll_records=2, schema={"n": "int64"}))
    with TopologyTestDriver(app, deliver_external_sinks=True) as driver:
        topic = driver.input_topic("in")
        with pytest.raises(RecordError) as raised:
            topic.pipe_input("a", {"n": "not a number"}, timestamp=1)
        assert raised.value.offset == 0
        topic.pipe_input("b", {"n": 1}, timestamp=2)
        topic.pipe_input("c", {"n": 2}, timestamp=3)
    assert [(r["offset"], r["n"]) for rows in read_rolled(archive, "parquet").values() for r in rows] == [
        (1, 1), (2, 2)]


# -- configuration and directory errors -------------------------------------------------------

@pytest.mark.parametrize("kwargs, words", [
    ({"roll_records": 0}, ["roll_records", "positive"]),
    ({"roll_records": -3}, ["roll_records", "positive"]),
    ({"roll_records": "10"}, ["roll_records", "positive"]),
    ({"roll_interval": 0}, ["roll_interval", "positive"]),
    ({"roll_interval": timedelta(seconds=-1)}, ["roll_interval", "positive"]),
    ({"schema": {"n": "no-such-type"}}, ["'n'", "no-such-type"]),
    ({"schema": {"offset": "int64", "n": "int64"}}, ["offset", "clash"]),
    ({"schema": [("n", "int64")]}, ["schema", "pyarrow.Schema"]),
])
def test_bad_settings_are_config_errors(tmp_path: Path, kwargs, words) -> None:
    with pytest.raises(ConfigError) as raised:
        sk.sinks.ParquetArchive(str(tmp_path / "a"), **kwargs)
    assert all(word in str(raised.value) for word in words), str(raised.value)


def test_empty_path_is_a_config_error() -> None:
    for cls in (sk.sinks.ParquetArchive, sk.sinks.JsonLines):
        with pytest.raises(ConfigError, match="path must be a directory path"):
            cls("")


@pytest.mark.parametrize("ext", ["parquet", "jsonl"])
def test_a_directory_under_a_regular_file_fails_when_the_task_starts(tmp_path: Path, ext: str) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("a regular file")
    target = blocker / "archive"
    with pytest.raises(SinkError) as raised:
        TopologyTestDriver(sink_app(make_sink(ext, target)), deliver_external_sinks=True)
    message = str(raised.value)
    assert str(target) in message and "opening" in message and "Not a directory" in message
    assert blocker.read_text() == "a regular file"


def _immutable(path: Path) -> bool:
    if shutil.which("chattr") is None:
        return False
    return subprocess.run(["chattr", "+i", str(path)], capture_output=True).returncode == 0


def test_a_read_only_directory_fails_when_the_task_starts(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    (locked / "_staging").mkdir(parents=True)
    if os.geteuid() != 0:
        locked.chmod(0o555)
    elif not _immutable(locked):
        print("skipping the read-only variant: running as root and chattr +i is not available here")
        pytest.skip("root ignores permissions and chattr +i does not work on this file system")
    try:
        # The archive directory itself is not writable, and a new directory inside it cannot be made.
        with pytest.raises(SinkError, match="is not writable"):
            TopologyTestDriver(sink_app(sk.sinks.ParquetArchive(str(locked))), deliver_external_sinks=True)
        with pytest.raises(SinkError, match="opening failed") as raised:
            TopologyTestDriver(sink_app(sk.sinks.JsonLines(str(locked / "sub"))), deliver_external_sinks=True)
        assert str(locked / "sub") in str(raised.value)
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(locked)], check=True)
        else:
            locked.chmod(0o755)


# -- crash recovery at the writer level ---------------------------------------------------------

@pytest.mark.parametrize("ext", ["parquet", "jsonl"])
def test_restart_skips_records_an_earlier_run_committed(tmp_path: Path, ext: str) -> None:
    path = tmp_path / "arch"
    first = open_writer(make_sink(ext, path, roll_records=3))
    for i in range(5):
        first.write(rec(i, f"k{i}", {"i": i}, ts=i))
        first.commit({TP: i + 1})
    # Crash after the sink committed offsets 0..4 but before the task committed its input offsets:
    # the task reprocesses from offset 2.
    assert rolled_names(path, ext) == [f"in+0+0-2.{ext}"]
    second = open_writer(make_sink(ext, path, roll_records=3))
    assert second.delivered_until == {("in", 0): 5}
    for i in range(2, 8):
        second.write(rec(i, f"k{i}", {"i": i}, ts=i))
    assert second.skipped == 3
    second.commit({TP: 8})
    second.close()
    assert rolled_names(path, ext) == [f"in+0+0-2.{ext}", f"in+0+3-5.{ext}", f"in+0+6-7.{ext}"]
    assert all_delivered(path, ext) == [(i, f"k{i}", {"i": i}) for i in range(8)]


def test_restart_with_the_driver_delivers_each_record_once(tmp_path: Path) -> None:
    path = tmp_path / "arch"

    def app():
        return sink_app(sk.sinks.ParquetArchive(str(path), roll_records=3))

    crashed = TopologyTestDriver(app(), deliver_external_sinks=True)
    for i in range(5):
        crashed.input_topic("in").pipe_input(f"k{i}", {"i": i}, timestamp=i)
    del crashed  # never closed: nothing rolled on close
    assert rolled_names(path, "parquet") == ["in+0+0-2.parquet"]
    with TopologyTestDriver(app(), deliver_external_sinks=True) as driver:  # the input is replayed from its start
        for i in range(7):
            driver.input_topic("in").pipe_input(f"k{i}", {"i": i}, timestamp=i)
        assert driver.metrics()["records_processed"] == 7
    assert all_delivered(path, "parquet") == [(i, f"k{i}", {"i": i}) for i in range(7)]
    assert_file_names_match_rows(path, "parquet")


@pytest.mark.parametrize("tail", [
    b'[3,3,"k3",{"i":3}]\n[4,4,"k4",{"i"',  # torn in the middle of a line
    b'[3,3,"k3",{"i":3}]\n[4,4,"k4",{"i":4}]\n',  # complete lines, but the marker never made it
    b'[3,3,"k3",{"i":3}]\n{"ne',  # torn inside the marker
    b'\x00\x00\x00\n',  # garbage (a block the file system zero-filled)
])
def test_an_unmarked_or_torn_staging_tail_is_truncated(tmp_path: Path, tail: bytes) -> None:
    path = tmp_path / "arch"
    sink = sk.sinks.JsonLines(str(path))
    writer = open_writer(sink)
    for i in range(3):
        writer.write(rec(i, f"k{i}", {"i": i}, ts=i))
    writer.commit({TP: 3})
    good = staging_file(path).read_bytes()
    with staging_file(path).open("ab") as f:
        f.write(tail)
    # Restart: the unmarked records were never committed by the sink, so they are delivered again.
    restarted = open_writer(sink)
    assert restarted.delivered_until == {("in", 0): 3}
    assert staging_file(path).read_bytes() == good
    for i in range(3, 6):
        restarted.write(rec(i, f"k{i}", {"i": i}, ts=i))
    assert restarted.skipped == 0
    restarted.commit({TP: 6})
    restarted.close()
    assert rolled_names(path, "jsonl") == ["in+0+0-5.jsonl"]
    assert all_delivered(path, "jsonl") == [(i, f"k{i}", {"i": i}) for i in range(6)]


@pytest.mark.parametrize("ext", ["parquet", "jsonl"])
def test_a_crash_after_the_staging_rewrite_before_the_rename_is_finished_on_start(tmp_path: Path, ext: str) -> None:
    # Archive A stages offsets 0..7 without rolling; archive B rolls offsets 0..4 into one file.
    a, b = tmp_path / "a", tmp_path / "b"
    staged = open_writer(make_sink(ext, a, roll_records=100, roll_on_close=False))
    rolled = open_writer(make_sink(ext, b, roll_records=5))
    for i in range(8):
        for writer in (staged, rolled):
            writer.write(rec(i, f"k{i}", {"i": i}, ts=100 + i))
            writer.commit({TP: i + 1})
    staged.close()
    assert rolled_names(b, ext) == [f"in+0+0-4.{ext}"]
    # The state of a roll of 0..4 that died after rewriting the staging file (rows 5..7 left,
    # the marker naming the planned file) and before renaming its temporary file.
    shutil.copy(b / f"in+0+0-4.{ext}", a / f".in+0+0-4.{ext}.tmp")
    rows = b"".join(b'[%d,%d,"k%d",{"i":%d}]\n' % (i, 100 + i, i, i) for i in range(5, 8))
    staging_file(a).write_bytes(rows + b'{"next":8,"rolling":["in+0+0-4.%s"]}\n' % ext.encode())
    restarted = open_writer(make_sink(ext, a, roll_records=100))
    assert restarted.delivered_until == {("in", 0): 8}
    assert rolled_names(a, ext) == [f"in+0+0-4.{ext}"]  # the rename was finished
    assert not (a / f".in+0+0-4.{ext}.tmp").exists()
    staged_rows, markers, tail = parse_staging(staging_file(a))
    assert [row[0] for row in staged_rows] == [5, 6, 7] and markers == [8] and tail == b""
    restarted.close()
    assert rolled_names(a, ext) == [f"in+0+0-4.{ext}", f"in+0+5-7.{ext}"]
    assert all_delivered(a, ext) == [(i, f"k{i}", {"i": i}) for i in range(8)]
    timestamps = [row["timestamp"] for rows in read_rolled(a, ext).values() for row in rows]
    assert timestamps == [100 + i for i in range(8)]


def test_a_crash_before_the_staging_rewrite_leaves_the_rows_staged_and_drops_the_temporary_file(
        tmp_path: Path) -> None:
    path = tmp_path / "arch"
    sink = sk.sinks.ParquetArchive(str(path), roll_records=100, roll_on_close=False)
    writer = open_writer(sink)
    for i in range(3):
        writer.write(rec(i, "k", {"i": i}))
    writer.commit({TP: 3})
    # A roll wrote its temporary file, then died before rewriting the staging file.
    (path / ".in+0+0-2.parquet.tmp").write_bytes(b"half a parquet file")
    restarted = open_writer(sk.sinks.ParquetArchive(str(path), roll_records=100))
    assert restarted.delivered_until == {("in", 0): 3}
    assert not (path / ".in+0+0-2.parquet.tmp").exists()
    assert [row[0] for row in parse_staging(staging_file(path))[0]] == [0, 1, 2]
    restarted.close()
    assert rolled_names(path, "parquet") == ["in+0+0-2.parquet"]
    assert all_delivered(path, "parquet") == [(i, "k", {"i": i}) for i in range(3)]


def test_a_roll_named_in_staging_whose_files_are_gone_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "arch"
    open_writer(sk.sinks.ParquetArchive(str(path))).close()
    staging_file(path).write_bytes(b'{"next":3,"rolling":["in+0+0-2.parquet"]}\n')
    with pytest.raises(SinkError, match=r"in\+0\+0-2\.parquet was being rolled"):
        open_writer(sk.sinks.ParquetArchive(str(path)))


def test_a_lost_staging_file_resumes_after_the_last_archived_offset(tmp_path: Path) -> None:
    path = tmp_path / "arch"
    sink = sk.sinks.JsonLines(str(path), roll_records=3)
    writer = open_writer(sink)
    for i in range(6):
        writer.write(rec(i, "k", {"i": i}))
    writer.commit({TP: 6})
    assert rolled_names(path, "jsonl") == ["in+0+0-2.jsonl", "in+0+3-5.jsonl"]
    staging_file(path).unlink()
    restarted = open_writer(sink)
    assert restarted.delivered_until == {("in", 0): 6}
    for i in range(4, 8):
        restarted.write(rec(i, "k", {"i": i}))
    assert restarted.skipped == 2
    restarted.commit({TP: 8})
    restarted.close()
    assert all_delivered(path, "jsonl") == [(i, "k", {"i": i}) for i in range(8)]


def test_a_partial_block_left_by_a_failed_append_is_cut_before_the_next(tmp_path: Path) -> None:
    path = tmp_path / "arch"
    sink = sk.sinks.JsonLines(str(path))
    writer = open_writer(sink)
    writer.write(rec(0, "k", {"i": 0}))
    writer.commit({TP: 1})
    with staging_file(path).open("ab") as f:  # what an append that failed half-way leaves
        f.write(b'[1,0,"k",{"i":1}]\n[2,0,"k"')
    writer.write(rec(1, "k", {"i": 1}))
    writer.commit({TP: 2})
    rows, markers, tail = parse_staging(staging_file(path))
    assert [r[0] for r in rows] == [0, 1] and markers == [1, 2] and tail == b""
    del writer  # crash: the next writer recovers the staging as is
    restarted = open_writer(sink)
    assert restarted.delivered_until == {("in", 0): 2}
    restarted.close()
    assert all_delivered(path, "jsonl") == [(0, "k", {"i": 0}), (1, "k", {"i": 1})]


def test_a_temporary_file_left_by_a_crashed_roll_is_replaced(tmp_path: Path) -> None:
    path = tmp_path / "arch"
    sink = sk.sinks.ParquetArchive(str(path), roll_records=3)
    writer = open_writer(sink)
    writer.write(rec(0, "k", {"i": 0}))
    writer.write(rec(1, "k", {"i": 1}))
    writer.commit({TP: 2})
    (path / ".in+0+0-2.parquet.tmp").write_bytes(b"half a parquet file")  # died while writing it
    del writer
    restarted = open_writer(sink)
    restarted.write(rec(2, "k", {"i": 2}))
    restarted.commit({TP: 3})
    assert sorted(os.listdir(path)) == ["_staging", "in+0+0-2.parquet"]
    assert [r["offset"] for r in pq.read_table(path / "in+0+0-2.parquet").to_pylist()] == [0, 1, 2]


@pytest.mark.parametrize("ext, seed", [("parquet", 2), ("jsonl", 3), ("parquet", 8), ("jsonl", 9)])
def test_random_crashes_never_lose_or_repeat_a_record(tmp_path: Path, ext: str, seed: int) -> None:
    """Many runs that die at random points: after a sink commit with or without the task's
    offset commit, with uncommitted records written, or with a torn staging tail. A final
    clean run replays from the task's last committed offset; every record is then in exactly
    one rolled file, in order."""
    rng = random.Random(seed)
    path = tmp_path / "arch"
    total = 150

    def records_of(offset: int) -> List[SinkRecord]:
        return [rec(offset, f"k{offset % 5}", {"o": offset, "j": j}, ts=1000 + offset) for j in range(offset % 3)]

    task_committed = 0
    skipped = torn = 0
    for _run in range(10):
        writer = open_writer(make_sink(ext, path, roll_records=rng.choice([1, 4, 7])))
        position = task_committed
        while position < total and rng.random() > 0.2:
            end = min(total, position + rng.randint(1, 6))
            for offset in range(position, end):
                for record in records_of(offset):
                    writer.write(record)
            writer.commit({TP: end})
            position = end
            if rng.random() < 0.6:
                task_committed = position  # otherwise: died between the sink's and the task's commit
        if rng.random() < 0.4:
            for offset in range(position, min(total, position + 3)):
                for record in records_of(offset):
                    writer.write(record)  # written, never committed
        if rng.random() < 0.3 and staging_file(path).exists():
            with staging_file(path).open("ab") as f:
                f.write(b'[%d,0,"torn",' % position)
            torn += 1
        skipped += writer.skipped
        del writer
    final = open_writer(make_sink(ext, path, roll_records=7))
    for offset in range(task_committed, total):
        for record in records_of(offset):
            final.write(record)
    final.commit({TP: total})
    skipped += final.skipped
    final.close()
    # The scenario did what it is for: replays that the sink skipped, torn tails, several files.
    assert skipped > 0 and torn > 0 and task_committed < total
    assert len(rolled_names(path, ext)) > 10

    expected = [(r.offset, r.key, r.value) for offset in range(total) for r in records_of(offset)]
    assert all_delivered(path, ext) == expected
    assert parse_staging(staging_file(path))[0] == []
    assert_file_names_match_rows(path, ext)


# -- records not caused by an input record (punctuations) ----------------------------------------

def punctuating_app(path: Path, roll_records: int) -> sk.App:
    """Forwards its input; a wall-clock punctuation every second forwards a tick record."""
    app = sk.App("punct")

    def init(ctx):
        ctx.schedule(timedelta(seconds=1), sk.Punctuation.WALL_CLOCK,
                     lambda ts: ctx.forward("tick", {"tick": ts}))

    @app.processor(init=init)
    def forward(ctx, key, value):
        ctx.forward(key, value)

    app.topology(lambda b: b.stream("in").process(forward)
                 .sink(sk.sinks.ParquetArchive(str(path), roll_records=roll_records)))
    return app


def test_punctuation_records_are_archived_after_the_last_input_record(tmp_path: Path) -> None:
    path = tmp_path / "arch"
    with TopologyTestDriver(punctuating_app(path, roll_records=100), deliver_external_sinks=True) as driver:
        driver.input_topic("in").pipe_input("k0", {"n": 0}, timestamp=1)
        driver.input_topic("in").pipe_input("k1", {"n": 1}, timestamp=2)
        driver.advance_wall_clock(timedelta(seconds=1))
        driver.input_topic("in").pipe_input("k2", {"n": 2}, timestamp=3)
    assert all_delivered(path, "parquet") == [
        (0, "k0", {"n": 0}), (1, "k1", {"n": 1}), (1, "tick", {"tick": 1000}), (2, "k2", {"n": 2})]


def test_a_punctuation_before_any_input_does_not_hide_offset_0_after_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "arch"
    crashed = TopologyTestDriver(punctuating_app(path, roll_records=100), deliver_external_sinks=True)
    crashed.advance_wall_clock(timedelta(seconds=1))  # a tick is delivered; no input was processed
    del crashed  # died before reading any input
    with TopologyTestDriver(punctuating_app(path, roll_records=100), deliver_external_sinks=True) as driver:
        driver.input_topic("in").pipe_input("k0", {"n": 0}, timestamp=1)
        driver.input_topic("in").pipe_input("k1", {"n": 1}, timestamp=2)
    keys = [key for _offset, key, _value in all_delivered(path, "parquet")]
    assert sorted(keys) == ["k0", "k1", "tick"]


def test_a_staged_punctuation_record_survives_a_restart(tmp_path: Path) -> None:
    path = tmp_path / "arch"
    crashed = TopologyTestDriver(punctuating_app(path, roll_records=2), deliver_external_sinks=True)
    crashed.input_topic("in").pipe_input("k0", {"n": 0}, timestamp=1)
    crashed.input_topic("in").pipe_input("k1", {"n": 1}, timestamp=2)  # rolls 0-1
    crashed.advance_wall_clock(timedelta(seconds=1))  # a tick staged (under offset 1)
    assert [row[1:3] for row in parse_staging(staging_file(path))[0]] == [[1000, "tick"]]
    del crashed
    restarted = open_writer(sk.sinks.ParquetArchive(str(path)))
    restarted.close()
    keys = [key for _offset, key, _value in all_delivered(path, "parquet")]
    assert keys == ["k0", "k1", "tick"]
