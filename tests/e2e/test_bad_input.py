"""Bad input on a worker (embedded broker): records with an out-of-range timestamp or a
null grouping key go through the app's error handler, never lost silently."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path


def _write_app(directory: Path, module: str, handler: str, build: str) -> None:
    (directory / f"{module}.py").write_text(textwrap.dedent(f"""
        import streamkit as sk
        app = sk.App("bad-input", deserialization_error_handler="{handler}",
                     processing_error_handler="{handler}")
        src = app.topic("events", partitions=1)

        @app.topology
        def build(b):
    """) + textwrap.indent(textwrap.dedent(build), "    "))


def _consume(cli, topic: str) -> list:
    out = cli("consume", topic, "--from-beginning", "--timeout", "0.5")
    return [json.loads(line) for line in out.stdout.splitlines()]


def _committed(cli, group: str, topic: str) -> dict:
    rows = [line.split() for line in cli("groups", "describe", group).stdout.splitlines()[1:]]
    return {int(r[1]): int(r[2]) for r in rows if r[0] == topic}


def test_timestamp_above_int64_is_dead_lettered_once_and_committed_past(cli, tmp_path):
    _write_app(tmp_path, "ts_app", "dead_letter", """
        b.stream(src, timestamp=lambda k, v: v["ts"]).to("out")
    """)
    cli("topics", "create", "events", "--partitions", "1")
    lines = [{"ts": 5}, {"ts": 2 ** 63}, {"ts": 7}]
    cli("produce", "events", stdin="".join(json.dumps(v) + "\n" for v in lines))
    for _ in range(2):  # a restart must not dead-letter the record again
        run = cli("worker", "ts_app", "--until-idle", "1", cwd=tmp_path)
        assert run.returncode == 0, run.stderr
    assert [r["value"]["ts"] for r in _consume(cli, "out")] == [5, 7]
    dlq = _consume(cli, "bad-input-dlq")
    assert len(dlq) == 1, dlq
    headers = dlq[0]["headers"]
    assert (headers["streamkit.error.topic"], headers["streamkit.error.partition"],
            headers["streamkit.error.offset"]) == ("events", 0, 1)
    assert str(2 ** 63) in headers["streamkit.error.message"]
    assert _committed(cli, "bad-input", "events") == {0: 3}


def test_timestamp_above_int64_fails_the_worker_naming_the_record(cli, tmp_path):
    _write_app(tmp_path, "ts_app", "fail", """
        b.stream(src, timestamp=lambda k, v: v["ts"]).to("out")
    """)
    cli("topics", "create", "events", "--partitions", "1")
    cli("produce", "events", stdin='{"ts": 5}\n{"ts": 9223372036854775808}\n')
    run = cli("worker", "ts_app", "--until-idle", "1", cwd=tmp_path)
    assert run.returncode == 1
    assert "topic 'events', partition 0, offset 1" in run.stderr
    assert "9223372036854775808" in run.stderr and "struct.error" not in run.stderr
    assert _committed(cli, "bad-input", "events").get(0, 0) <= 1


def test_group_by_returning_none_is_dead_lettered_logged_and_committed_past(cli, tmp_path):
    _write_app(tmp_path, "null_key_app", "dead_letter", """
        b.stream(src).group_by(lambda k, v: v.get("user")).count(name="counts").to_stream().to("counts")
    """)
    cli("topics", "create", "events", "--partitions", "1")
    cli("produce", "events", stdin='{"user": "u1"}\n{"page": "home"}\n{"user": "u1"}\n')
    run = cli("worker", "null_key_app", "--until-idle", "1", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert "processing failed at topic 'events', partition 0, offset 1 in node 'counts'" in run.stderr
    assert [(r["key"], r["value"]) for r in _consume(cli, "counts")][-1] == ("u1", 2)
    [dead] = _consume(cli, "bad-input-dlq")
    assert dead["value"] == {"page": "home"}
    assert (dead["headers"]["streamkit.error.topic"], dead["headers"]["streamkit.error.offset"]) == ("events", 1)
    assert _committed(cli, "bad-input", "events") == {0: 3}
