"""Operators' mistakes must not lose data silently: resetting a live group's offsets,
and reading past records deleted before they were read."""
from __future__ import annotations

import json
import textwrap
import time
from pathlib import Path

from streamkit.broker import EmbeddedBroker
from streamkit.core.records import TopicPartition

COPY_APP = textwrap.dedent("""
    import streamkit as sk
    app = sk.App("copier")
    src = app.topic("events", partitions=2)

    @app.topology
    def build(b):
        b.stream(src).to("copied")
""")


def _committed(cli, group: str, topic: str) -> dict:
    rows = [line.split() for line in cli("groups", "describe", group).stdout.splitlines()[1:]]
    return {int(r[1]): int(r[2]) for r in rows if r[0] == topic}


def _wait_for(condition, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.2)


def test_reset_offsets_is_refused_while_the_group_has_live_members(cli, spawn, tmp_path):
    (tmp_path / "copy_app.py").write_text(COPY_APP)
    cli("topics", "create", "events", "--partitions", "2")
    cli("produce", "events", "--partition", "0", stdin="".join(f"{i}\n" for i in range(10)))
    worker = spawn("worker", "copy_app", cwd=tmp_path)  # runs until killed
    _wait_for(lambda: _committed(cli, "copier", "events").get(0) == 10, "the worker to commit its input")

    refused = cli("groups", "reset-offsets", "copier", "--topic", "events", "--to-earliest", "--execute")
    assert refused.returncode == 1
    assert "group 'copier' has 1 live member(s)" in refused.stderr
    assert "offsets can only be reset while the group is inactive" in refused.stderr

    planned = cli("groups", "reset-offsets", "copier", "--topic", "events", "--to-earliest")
    assert planned.returncode == 0, planned.stderr
    assert planned.stdout.splitlines() == ["TOPIC  PARTITION  NEW-OFFSET", "events  0  0", "events  1  0"]
    assert "dry run" in planned.stderr
    assert _committed(cli, "copier", "events")[0] == 10  # the plan changed nothing

    worker.kill()
    worker.communicate(timeout=30)
    done = cli("groups", "reset-offsets", "copier", "--topic", "events", "--to-earliest", "--execute")
    assert done.returncode == 0, done.stderr
    assert _committed(cli, "copier", "events")[0] == 0


def test_reset_offsets_dry_run_and_execute_are_exclusive(cli):
    cli("topics", "create", "t")
    both = cli("groups", "reset-offsets", "g", "--topic", "t", "--to-latest", "--dry-run", "--execute")
    assert both.returncode == 2 and "at most one of --dry-run, --execute" in both.stderr


def test_consume_with_a_group_says_which_deleted_records_it_skipped(cli, broker_dir: Path):
    cli("topics", "create", "t")
    cli("produce", "t", stdin="".join(f"{i}\n" for i in range(600)))
    first = cli("consume", "t", "--group", "g", "--from-beginning", "--max", "1")
    assert first.returncode == 0 and _committed(cli, "g", "t") == {0: 1}
    broker = EmbeddedBroker(str(broker_dir))
    try:
        broker.delete_records({TopicPartition("t", 0): 500})
    finally:
        broker.close()

    rest = cli("consume", "t", "--group", "g", "--timeout", "0.5")
    assert rest.returncode == 0, rest.stderr
    assert [json.loads(line)["offset"] for line in rest.stdout.splitlines()] == list(range(500, 600))
    assert "t[0]: 499 record(s) at offsets 1 to 499 were deleted" in rest.stderr
    assert "consumed 100 record(s), 499 record(s) deleted before they were read" in rest.stderr


POISONED_APP = textwrap.dedent("""
    import streamkit as sk
    app = sk.App("poisoned", deserialization_error_handler="fail")
    src = app.topic("json-events", partitions=1, value_serde=sk.serdes.Json())

    @app.topology
    def build(b):
        b.stream(src).to("json-copied")
""")


def test_a_group_that_never_committed_is_described_without_a_traceback(cli, tmp_path):
    """A worker stopped on a poison record at offset 0 leaves its group with no committed
    offset: `groups describe` and `lag` say so instead of crashing."""
    (tmp_path / "poisoned_app.py").write_text(POISONED_APP)
    cli("topics", "create", "json-events", "--partitions", "1")
    cli("produce", "json-events", "--format", "text", stdin="not json\n")
    stopped = cli("worker", "poisoned_app", "--until-idle", "2", cwd=tmp_path)
    assert stopped.returncode != 0 and "offset 0" in stopped.stderr
    for command in (("groups", "describe", "poisoned"), ("lag", "poisoned")):
        shown = cli(*command)
        assert "Traceback" not in shown.stderr, shown.stderr
        assert shown.returncode in (0, 1), shown.stderr
        assert "poisoned" in shown.stdout + shown.stderr
