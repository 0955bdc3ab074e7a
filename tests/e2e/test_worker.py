"""Worker processes on the embedded broker: input from the CLI, output checked, crashes."""
from __future__ import annotations

import json
import signal
import textwrap
import time
from collections import Counter
from pathlib import Path

from tests.cli_processes import final_table

PAGES = ["Home", "home", "DOCS", "pricing", "Blog"]


def views(n: int, start: int = 0) -> list:
    return [{"user": f"u{i % 7}", "page": PAGES[i % len(PAGES)], "ts": 1_000 + i, "amount": (i * 7) % 30}
            for i in range(start, start + n)]


def as_lines(records: list) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def expected_counts(records: list) -> dict:
    return dict(Counter(r["page"].lower() for r in records if r["amount"] > 10))


def lag_rows(cli, group: str) -> list:
    lines = cli("groups", "describe", group).stdout.splitlines()[1:]
    return [line.split() for line in lines]


def test_pageviews_worker_end_to_end(cli):
    cli("topics", "create", "pageviews", "--partitions", "3")
    data = views(300)
    assert cli("produce", "pageviews", "--key-field", "user", stdin=as_lines(data)).returncode == 0
    run = cli("worker", "apps.pageviews", "--until-idle", "1")
    assert run.returncode == 0, run.stderr
    assert final_table(cli, "page-counts") == expected_counts(data)
    rows = [r for r in lag_rows(cli, "pageviews") if r[0] == "pageviews"]
    assert len(rows) == 3 and all(r[4] == "0" for r in rows)
    assert sum(int(r[2]) for r in rows) == 300


def test_wordcount_worker_creates_its_topics(cli):
    # The worker creates "lines" itself (declared with partitions=3) and the sink topic.
    run = cli("worker", "apps.wordcount", "--until-idle", "0.5")
    assert run.returncode == 0, run.stderr
    assert cli("produce", "lines", "--format", "text", stdin="the cat\nthe dog\nThe end\n").returncode == 0
    assert cli("worker", "apps.wordcount", "--until-idle", "1").returncode == 0
    assert final_table(cli, "word-counts") == {"the": 3, "cat": 1, "dog": 1, "end": 1}


def test_worker_tails_records_produced_while_it_runs(cli, spawn):
    cli("topics", "create", "pageviews", "--partitions", "3")
    worker = spawn("worker", "apps.pageviews", "--until-idle", "3")
    first, second = views(50), views(50, start=50)
    cli("produce", "pageviews", "--key-field", "user", stdin=as_lines(first))
    time.sleep(0.5)
    cli("produce", "pageviews", "--key-field", "user", stdin=as_lines(second))
    _, err = worker.communicate(timeout=60)
    assert worker.returncode == 0, err
    assert final_table(cli, "page-counts") == expected_counts(first + second)


def test_bad_record_stops_the_worker_and_nothing_is_committed_past_it(cli):
    cli("topics", "create", "pageviews", "--partitions", "3")
    good = views(5)
    cli("produce", "pageviews", "--partition", "0", stdin=as_lines(good))
    cli("produce", "pageviews", "--partition", "0", "--format", "text", stdin="this is not json\n")
    cli("produce", "pageviews", "--partition", "0", stdin=as_lines(views(5, start=5)))
    run = cli("worker", "apps.pageviews", "--until-idle", "1")
    assert run.returncode == 1
    assert "topic 'pageviews', partition 0, offset 5" in run.stderr
    assert "deserialization failed" in run.stderr and "Traceback" not in run.stderr
    committed = {(r[0], r[1]): int(r[2]) for r in lag_rows(cli, "pageviews")}
    assert committed.get(("pageviews", "0"), 0) <= 5


def _write_app(directory: Path, handler: str) -> None:
    (directory / "dlq_app.py").write_text(textwrap.dedent(f"""
        import streamkit as sk
        app = sk.App("dlq-app", deserialization_error_handler="{handler}",
                     processing_error_handler="{handler}")
        src = app.topic("numbers", partitions=2)

        @app.topology
        def build(b):
            b.stream(src).map_values(lambda v: 100 // v["n"]).to("results")
    """))


def test_dead_letter_handler_routes_bad_records_with_their_origin(cli, tmp_path):
    _write_app(tmp_path, "dead_letter")
    cli("topics", "create", "numbers", "--partitions", "2")
    cli("produce", "numbers", "--partition", "1", stdin='{"n": 5}\n{"n": 0}\n{"n": 20}\n')
    cli("produce", "numbers", "--partition", "1", "--format", "text", stdin="garbage\n")
    run = cli("worker", "dlq_app", "--until-idle", "1", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    results = cli("consume", "results", "--from-beginning", "--timeout", "0.5")
    assert sorted(json.loads(line)["value"] for line in results.stdout.splitlines()) == [5, 20]
    dlq = [json.loads(line) for line in cli("consume", "dlq-app-dlq", "--from-beginning",
                                            "--timeout", "0.5").stdout.splitlines()]
    assert len(dlq) == 2
    by_stage = {d["headers"]["streamkit.error.stage"]: d for d in dlq}
    processing = by_stage["processing"]
    assert processing["value"] == {"n": 0}
    assert processing["headers"]["streamkit.error.topic"] == "numbers"
    assert processing["headers"]["streamkit.error.partition"] == 1
    assert processing["headers"]["streamkit.error.offset"] == 1
    assert processing["headers"]["streamkit.error.class"] == "ZeroDivisionError"
    assert processing["headers"]["streamkit.error.node"] == "numbers.map_values"
    deserialization = by_stage["deserialization"]
    assert deserialization["value"] == "garbage" and deserialization["headers"]["streamkit.error.offset"] == 3


def test_log_and_skip_handler_keeps_going(cli, tmp_path):
    _write_app(tmp_path, "log_and_skip")
    cli("topics", "create", "numbers", "--partitions", "2")
    cli("produce", "numbers", "--partition", "0", stdin='{"n": 0}\n{"n": 50}\n')
    run = cli("worker", "dlq_app", "--until-idle", "1", cwd=tmp_path)
    assert run.returncode == 0
    assert "skipped record" in run.stderr and "ZeroDivisionError" in run.stderr
    values = [json.loads(line)["value"] for line in
              cli("consume", "results", "--from-beginning", "--timeout", "0.5").stdout.splitlines()]
    assert values == [2]


def test_restart_resumes_from_committed_offsets(cli, tmp_path):
    (tmp_path / "copy_app.py").write_text(textwrap.dedent("""
        import streamkit as sk
        app = sk.App("copier")

        @app.topology
        def build(b):
            b.stream(app.topic("src", partitions=2)).map_values(lambda v: v * 10).to("dst")
    """))
    assert cli("worker", "copy_app", "--until-idle", "0.3", cwd=tmp_path).returncode == 0
    cli("produce", "src", stdin="1\n2\n3\n")
    assert cli("worker", "copy_app", "--until-idle", "0.5", cwd=tmp_path).returncode == 0
    cli("produce", "src", stdin="4\n")
    assert cli("worker", "copy_app", "--until-idle", "0.5", cwd=tmp_path).returncode == 0
    values = [json.loads(line)["value"] for line in
              cli("consume", "dst", "--from-beginning", "--timeout", "0.5").stdout.splitlines()]
    assert sorted(values) == [10, 20, 30, 40]


def test_second_worker_waits_then_takes_over_after_kill_9(cli, spawn):
    cli("topics", "create", "pageviews", "--partitions", "3")
    first = spawn("worker", "apps.pageviews")
    time.sleep(2.0)  # let it own every task
    second = spawn("worker", "apps.pageviews", "--until-idle", "3")
    time.sleep(1.5)
    assert second.poll() is None
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=10)
    data = views(120)
    cli("produce", "pageviews", "--key-field", "user", stdin=as_lines(data))
    _, err = second.communicate(timeout=60)
    assert second.returncode == 0, err
    assert "owned by other workers" in err and "task 1_2 started" in err
    assert final_table(cli, "page-counts") == expected_counts(data)


def test_workers_on_one_directory_share_the_tasks_fairly(cli, spawn):
    """A worker runs at most ceil(tasks / live workers): the first gives back what is beyond
    its share once a second joins (committed first), and the two count every view once."""
    cli("topics", "create", "pageviews", "--partitions", "3")
    first = spawn("worker", "apps.pageviews", "--until-idle", "4")
    time.sleep(2.0)  # it owns every task before the second starts
    second = spawn("worker", "apps.pageviews", "--until-idle", "4")
    time.sleep(1.5)
    data = views(300)
    cli("produce", "pageviews", "--key-field", "user", stdin=as_lines(data))
    _, first_err = first.communicate(timeout=60)
    _, second_err = second.communicate(timeout=60)
    assert first.returncode == 0 and second.returncode == 0, first_err + second_err
    first_stopped = next(line[:23] for line in first_err.splitlines() if "stopping (--until-idle)" in line)
    tasks = {line.split("task ")[1].split()[0] for line in first_err.splitlines() if " started at " in line}
    # tasks the second started while the first still ran (it takes the rest once the first stops)
    shared = {line.split("task ")[1].split()[0] for line in second_err.splitlines()
              if " started at " in line and line[:23] < first_stopped}
    assert 1 <= len(shared) <= -(-len(tasks) // 2), (shared, tasks)
    assert "group rebalancing: committed" in first_err  # gave tasks back after committing them
    assert final_table(cli, "page-counts") == expected_counts(data)


def test_sigterm_commits_and_exits_cleanly(cli, spawn):
    cli("topics", "create", "pageviews", "--partitions", "3")
    cli("produce", "pageviews", "--key-field", "user", stdin=as_lines(views(60)))
    worker = spawn("worker", "apps.pageviews")
    deadline = time.time() + 30
    while time.time() < deadline:
        rows = [r for r in lag_rows(cli, "pageviews") if r[0] == "pageviews"] if \
            cli("groups", "list").stdout.strip() else []
        if len(rows) == 3 and all(r[4] == "0" for r in rows):
            break
        time.sleep(0.3)
    worker.send_signal(signal.SIGTERM)
    worker.communicate(timeout=30)
    assert worker.returncode == 0
    assert all(r[4] == "0" for r in lag_rows(cli, "pageviews") if r[0] == "pageviews")
