"""The streamkit CLI: topics, produce, consume, groups, describe, errors, help."""
from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from streamkit.core.partitioner import partition_for_key


def lines_of(result: subprocess.CompletedProcess) -> list:
    return [json.loads(line) for line in result.stdout.splitlines()]


def test_help_lists_every_command(cli):
    result = cli("--help")
    assert result.returncode == 0
    for command in ("worker", "topics", "produce", "consume", "groups", "describe", "demo"):
        assert command in result.stdout
    for command in (("worker",), ("topics", "create"), ("produce",), ("consume",), ("groups", "reset-offsets")):
        sub = cli(*command, "--help")
        assert sub.returncode == 0 and "Usage:" in sub.stdout


def test_console_script_is_installed():
    result = subprocess.run(["streamkit", "--version"], capture_output=True, text=True,
                            env={"PATH": f"{sys.prefix}/bin"})
    assert result.returncode == 0, result.stderr
    assert "version" in result.stdout


def test_topics_create_list_describe_delete(cli):
    assert cli("topics", "create", "orders", "--partitions", "3", "--config", "retention.ms=1000").returncode == 0
    assert cli("topics", "create", "audit").returncode == 0
    assert cli("topics", "list").stdout.split() == ["audit", "orders"]
    again = cli("topics", "create", "orders", "--partitions", "3")
    assert again.returncode == 1 and "already exists" in again.stderr
    assert cli("topics", "create", "orders", "--partitions", "3", "--if-not-exists").returncode == 0

    cli("produce", "orders", "--partition", "1", stdin='{"a": 1}\n{"a": 2}\n')
    described = cli("topics", "describe", "orders")
    assert described.returncode == 0
    assert "Partitions: 3" in described.stdout and "retention.ms=1000" in described.stdout
    rows = [line.split() for line in described.stdout.splitlines()[2:]]
    assert rows == [["0", "0", "0", "0"], ["1", "0", "2", "2"], ["2", "0", "0", "0"]]

    assert cli("topics", "delete", "audit").returncode == 0
    assert cli("topics", "list").stdout.split() == ["orders"]
    missing = cli("topics", "delete", "audit")
    assert missing.returncode == 1 and "unknown topic 'audit'" in missing.stderr


def test_produce_by_key_field_and_consume_from_beginning(cli):
    cli("topics", "create", "views", "--partitions", "3")
    users = ["ann", "bob", "cyd", "dan", "eve", "fay"]
    stdin = "".join(json.dumps({"user": u, "n": i}) + "\n" for i, u in enumerate(users))
    produced = cli("produce", "views", "--key-field", "user", stdin=stdin)
    assert produced.returncode == 0, produced.stderr
    assert "produced 6 record(s)" in produced.stderr

    records = lines_of(cli("consume", "views", "--from-beginning", "--timeout", "0.3"))
    assert sorted(r["value"]["n"] for r in records) == list(range(6))
    for record in records:
        assert record["key"] == record["value"]["user"]
        assert record["partition"] == partition_for_key(record["key"].encode(), 3)
        assert set(record) == {"topic", "partition", "offset", "timestamp", "key", "value"}


def test_consume_without_from_beginning_starts_at_the_end(cli):
    cli("topics", "create", "t")
    cli("produce", "t", stdin="1\n2\n")
    assert lines_of(cli("consume", "t", "--timeout", "0.3")) == []


def test_consume_max_and_group_commits(cli):
    cli("topics", "create", "t")
    cli("produce", "t", stdin="".join(f"{i}\n" for i in range(5)))
    first = lines_of(cli("consume", "t", "--group", "g", "--from-beginning", "--max", "2", "--timeout", "2"))
    assert [r["value"] for r in first] == [0, 1]
    rest = lines_of(cli("consume", "t", "--group", "g", "--timeout", "0.3"))
    assert [r["value"] for r in rest] == [2, 3, 4]

    described = cli("groups", "describe", "g").stdout.splitlines()
    assert described[0].split() == ["TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    assert described[1].split() == ["t", "0", "5", "5", "0"]
    assert cli("groups", "list").stdout.split() == ["g"]


def test_groups_reset_offsets(cli):
    cli("topics", "create", "t")
    cli("produce", "t", stdin="".join(f"{i}\n" for i in range(5)))
    cli("consume", "t", "--group", "g", "--from-beginning", "--timeout", "0.3")

    def lag() -> str:
        return cli("groups", "describe", "g").stdout.splitlines()[1].split()[4]

    assert lag() == "0"
    assert cli("groups", "reset-offsets", "g", "--topic", "t", "--shift-by", "-2", "--execute").returncode == 0
    assert lag() == "2"
    assert cli("groups", "reset-offsets", "g", "--topic", "t", "--to-earliest", "--execute").returncode == 0
    assert lag() == "5"
    assert cli("groups", "reset-offsets", "g", "--topic", "t", "--to-latest", "--execute").returncode == 0
    assert lag() == "0"
    both = cli("groups", "reset-offsets", "g", "--topic", "t", "--to-latest", "--to-earliest")
    assert both.returncode == 2 and "exactly one" in both.stderr


def test_text_format_produces_strings(cli):
    cli("topics", "create", "lines")
    assert cli("produce", "lines", "--format", "text", stdin="hello world\nnot {json\n").returncode == 0
    values = [r["value"] for r in lines_of(cli("consume", "lines", "--from-beginning", "--timeout", "0.3"))]
    assert values == ["hello world", "not {json"]


@pytest.mark.parametrize("args, stdin, message", [
    (("produce", "nope"), "{}\n", "unknown topic 'nope'"),
    (("consume", "nope", "--timeout", "0"), None, "unknown topic 'nope'"),
    (("produce", "t"), '{"ok": 1}\n{bad json\n', "line 2: not valid JSON"),
    (("produce", "t", "--key-field", "user"), '{"name": 1}\n', "line 1: no field 'user'"),
    (("produce", "t", "--partition", "5"), "1\n", "--partition 5 does not exist"),
    (("produce", "t", "--timestamp-field", "ts"), '{"ts": 1}\n{"x": 2}\n', "line 2: no field 'ts' for --timestamp-field"),
    (("produce", "t", "--timestamp-field", "ts"), '{"ts": "yesterday"}\n',
     "line 1: field 'ts' for --timestamp-field is 'yesterday', not an integer"),
    (("produce", "t", "--timestamp-field", "ts"), '{"ts": 1.5}\n', "line 1: field 'ts' for --timestamp-field is 1.5"),
    (("produce", "t", "--timestamp-field", "ts", "--format", "text"), "x\n", "--timestamp-field needs --format json"),
    (("worker", "no_such_module"), None, "cannot import app module 'no_such_module'"),
    (("describe", "json"), None, "module 'json' defines no App"),
    (("groups", "describe", "ghost"), None, "unknown group 'ghost'"),
    (("topics", "create", "bad/name"), None, "invalid topic name"),
])
def test_bad_input_is_one_clear_line_without_traceback(cli, args, stdin, message):
    cli("topics", "create", "t")
    result = cli(*args, stdin=stdin)
    assert result.returncode != 0
    assert message in result.stderr
    assert "Traceback" not in result.stderr
    assert len([line for line in result.stderr.splitlines() if line.startswith("Error")]) == 1


def test_produce_timestamps_from_a_field_for_backfills(cli):
    cli("topics", "create", "t")
    stdin = "".join(json.dumps({"ts": ts, "n": i}) + "\n" for i, ts in enumerate([1_000, 5_000, 3_000]))
    produced = cli("produce", "t", "--timestamp-field", "ts", stdin=stdin)
    assert produced.returncode == 0, produced.stderr
    assert "WARNING" not in produced.stderr  # the topic states no retention.ms
    records = lines_of(cli("consume", "t", "--from-beginning", "--timeout", "0.3"))
    assert [(r["timestamp"], r["value"]["n"]) for r in records] == [(1_000, 0), (5_000, 1), (3_000, 2)]
    bad = cli("produce", "t", "--timestamp-field", "ts", stdin='{"ts": 7000}\n{"ts": null}\n')
    assert bad.returncode == 1 and "line 2:" in bad.stderr
    records = lines_of(cli("consume", "t", "--from-beginning", "--timeout", "0.3"))
    assert [r["timestamp"] for r in records][3:] == [7_000]  # the lines before a bad one are kept


def test_produce_warns_once_when_records_are_older_than_the_topics_retention(cli):
    day = 86_400_000
    now = int(time.time() * 1000)
    cli("topics", "create", "short", "--config", f"retention.ms={day}")
    cli("topics", "create", "forever", "--config", "retention.ms=-1")
    stdin = "".join(json.dumps({"ts": ts}) + "\n" for ts in [now - 3 * day, now, now - 2 * day, now - 60_000])
    produced = cli("produce", "short", "--timestamp-field", "ts", stdin=stdin)
    assert produced.returncode == 0, produced.stderr
    warnings = [line for line in produced.stderr.splitlines() if "WARNING" in line]
    assert len(warnings) == 1, produced.stderr
    assert (f"2 record(s) produced to short are older than its retention.ms={day} "
            f"(the oldest has timestamp {now - 3 * day})") in warnings[0]
    assert "produced 4 record(s)" in produced.stderr  # a warning, not a refusal
    quiet = cli("produce", "forever", "--timestamp-field", "ts", stdin=stdin)
    assert quiet.returncode == 0 and "WARNING" not in quiet.stderr
    no_field = cli("produce", "short", stdin='{"ts": 1}\n')  # timestamps of now: nothing to warn about
    assert no_field.returncode == 0 and "WARNING" not in no_field.stderr


def test_lines_before_a_malformed_one_are_kept(cli):
    cli("topics", "create", "t")
    cli("produce", "t", stdin='{"ok": 1}\n{bad\n')
    assert [r["value"] for r in lines_of(cli("consume", "t", "--from-beginning", "--timeout", "0.3"))] == [{"ok": 1}]


def test_describe_app_text_and_mermaid(cli):
    text = cli("describe", "apps.pageviews")
    assert text.returncode == 0
    assert "Sub-topology: 1" in text.stdout and "Sink: page-counts-repartition" in text.stdout
    mermaid = cli("describe", "apps.pageviews:app", "--format", "mermaid")
    assert mermaid.stdout.startswith("flowchart LR") and 'subgraph sub1' in mermaid.stdout


def test_demo_runs_end_to_end_and_verifies(cli, tmp_path):
    result = cli("demo", "--events", "3000", "--dir", str(tmp_path / "demo"))
    assert result.returncode == 0, result.stderr
    assert "verified: the counts match" in result.stdout
    assert "home" in result.stdout
    assert "per-minute counts (table page_counts_per_minute)" in result.stdout  # the SQLite copy


def test_consume_tails_records_appended_by_another_process(cli, spawn):
    cli("topics", "create", "t", "--partitions", "2")
    tail = spawn("consume", "t", "--group", "tailer", "--timeout", "3")
    time.sleep(1.0)  # the consumer starts at the end, before these appends
    cli("produce", "t", stdin="1\n2\n")
    time.sleep(0.3)
    cli("produce", "t", stdin="3\n")
    out, err = tail.communicate(timeout=30)
    assert tail.returncode == 0, err
    assert sorted(json.loads(line)["value"] for line in out.splitlines()) == [1, 2, 3]
    lag = [line.split() for line in cli("groups", "describe", "tailer").stdout.splitlines()[1:]]
    assert sum(int(row[2]) for row in lag) == 3 and all(row[4] == "0" for row in lag)
