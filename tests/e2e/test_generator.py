"""``python -m apps.generate_pageviews``: its output, and the pipeline into ``apps.pageviews``."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import List

import pytest

from tests.cli_processes import REPO, final_table

GENERATOR = [sys.executable, "-m", "apps.generate_pageviews"]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}


def generate(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*GENERATOR, *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env=ENV, check=True)


def views_of(out: str) -> List[dict]:
    return [json.loads(line) for line in out.splitlines()]


@pytest.fixture(scope="module")
def seed1() -> str:
    return generate("--count", "500", "--seed", "1", "--start-ms", "1700000000000").stdout


def test_prints_count_valid_json_lines(seed1):
    lines = seed1.splitlines()
    assert len(lines) == 500 and seed1.endswith("\n")
    views = views_of(seed1)
    assert all(isinstance(v, dict) for v in views)


def test_fields_and_types(seed1):
    views = views_of(seed1)
    for view in views:
        assert set(view) == {"user", "page", "ts", "amount"}
        assert isinstance(view["user"], str) and view["user"].startswith("user-")
        assert isinstance(view["page"], str) and view["page"]
        assert type(view["ts"]) is int and type(view["amount"]) is int
    stamps = [v["ts"] for v in views]
    assert stamps[0] == 1700000000000
    assert stamps == sorted(stamps) and stamps[-1] > stamps[0]  # event time advances, never back
    assert len({v["page"].lower() for v in views}) == 8  # the default --pages
    assert any(v["page"] != v["page"].lower() and v["page"] == v["page"].upper() for v in views)


def test_amounts_fall_on_both_sides_of_the_apps_filter(seed1):
    amounts = [v["amount"] for v in views_of(seed1)]
    kept = sum(a > 10 for a in amounts)
    assert 0 < kept < len(amounts)
    assert kept > len(amounts) / 2  # most views survive the filter


def test_same_seed_same_output(seed1):
    assert generate("--count", "500", "--seed", "1", "--start-ms", "1700000000000").stdout == seed1


def test_same_seed_without_start_ms_differs_only_in_the_time_base(seed1):
    fixed, now_based = views_of(seed1), views_of(generate("--count", "500", "--seed", "1").stdout)
    assert now_based[0]["ts"] > 1700000000000  # starts at the current time
    shift = now_based[0]["ts"] - fixed[0]["ts"]
    assert [{**v, "ts": v["ts"] - shift} for v in now_based] == fixed


def test_other_seed_other_output(seed1):
    other = generate("--count", "500", "--seed", "2", "--start-ms", "1700000000000").stdout
    assert other != seed1 and len(other.splitlines()) == 500


def test_pages_and_users_options():
    views = views_of(generate("--count", "300", "--seed", "3", "--pages", "3", "--users", "4").stdout)
    assert {v["page"].lower() for v in views} == {"home", "pricing", "docs"}
    assert {v["user"] for v in views} <= {f"user-{i}" for i in range(4)}


def test_rate_zero_is_unthrottled_and_a_rate_still_finishes():
    assert len(generate("--count", "20000", "--rate", "0", timeout=60).stdout.splitlines()) == 20000
    assert len(generate("--count", "3", "--rate", "1000", timeout=60).stdout.splitlines()) == 3


def test_rate_spaces_event_time_by_the_rate():
    # Event time follows --rate (mean gap 1000/rate ms) whatever the wall clock does.
    views = views_of(generate("--count", "2000", "--rate", "100000", "--seed", "4", "--start-ms", "0").stdout)
    mean_gap = (views[-1]["ts"] - views[0]["ts"]) / (len(views) - 1)
    assert 0.005 < mean_gap < 0.02  # 1000 / 100000 = 0.01 ms


def test_bad_options_are_usage_errors():
    for args in (["--count", "0"], ["--rate", "-1"], ["--pages", "x"]):
        proc = subprocess.run([*GENERATOR, *args], capture_output=True, text=True, timeout=60, cwd=REPO, env=ENV)
        assert proc.returncode == 2 and "error:" in proc.stderr and proc.stdout == ""


def test_endless_until_the_reader_leaves_then_exits_quietly():
    proc = subprocess.Popen(GENERATOR, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=REPO, env=ENV)
    try:
        head = [proc.stdout.readline() for _ in range(5000)]  # more than any one buffer
        assert all(line.endswith(b"\n") for line in head)
        proc.stdout.close()  # like `| head`: the next write fails with EPIPE
        assert proc.wait(timeout=30) == 0
        assert proc.stderr.read() == b""
    finally:
        _reap(proc)


@pytest.mark.parametrize("sig, status", [(signal.SIGINT, 130), (signal.SIGTERM, 143)])
def test_stops_cleanly_on_ctrl_c_and_sigterm(tmp_path, sig, status):
    out = tmp_path / "out.jsonl"
    with out.open("wb") as sink:
        # SIGINT as in a terminal, even if this test runs where SIGINT is ignored (a background job).
        proc = subprocess.Popen([*GENERATOR, "--rate", "200"], stdout=sink, stderr=subprocess.PIPE,
                                cwd=REPO, env=ENV, preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        try:
            _wait_for_lines(out, 3)
            proc.send_signal(sig)
            assert proc.wait(timeout=30) == status
            assert proc.stderr.read() == b""  # no traceback
        finally:
            _reap(proc)
    lines = out.read_text().splitlines()
    assert lines and all(json.loads(line)["user"] for line in lines)  # only whole lines


def test_pipeline_into_the_pageviews_app(cli, broker_dir: Path, seed1):
    """generator | streamkit produce; streamkit worker apps.pageviews; the counts match the input."""
    assert cli("topics", "create", "pageviews", "--partitions", "3").returncode == 0
    env = {**ENV, "STREAMKIT_BROKER": f"embedded://{broker_dir}"}
    # The same arguments as ``seed1``: the pipe carries exactly those lines.
    generator = subprocess.Popen([*GENERATOR, "--count", "500", "--seed", "1", "--start-ms", "1700000000000"],
                                 stdout=subprocess.PIPE, cwd=REPO, env=env)
    try:
        produce = subprocess.run([sys.executable, "-m", "streamkit", "produce", "pageviews", "--key-field", "user"],
                                 stdin=generator.stdout, capture_output=True, text=True, timeout=120,
                                 cwd=REPO, env=env)
    finally:
        generator.stdout.close()
        _reap(generator)
    assert generator.returncode == 0
    assert produce.returncode == 0, produce.stderr
    assert "produced 500 record(s)" in produce.stderr

    generated = views_of(seed1)
    records = [json.loads(line) for line in
               cli("consume", "pageviews", "--from-beginning", "--timeout", "0.5").stdout.splitlines()]
    assert sorted(r["value"]["ts"] for r in records) == [v["ts"] for v in generated]
    assert all(r["key"] == r["value"]["user"] for r in records)  # --key-field user
    assert {r["partition"] for r in records} == {0, 1, 2}

    worker = cli("worker", "apps.pageviews", "--until-idle", "1", timeout=120)
    assert worker.returncode == 0, worker.stderr
    expected = Counter(v["page"].lower() for v in generated if v["amount"] > 10)
    assert final_table(cli, "page-counts") == dict(expected)
    assert 0 < sum(expected.values()) < len(generated)  # the filter kept some views and dropped some


def _wait_for_lines(path: Path, count: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.read_bytes().count(b"\n") >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} lines in {path} after {timeout} s")


def _reap(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait(timeout=10)
    for stream in (proc.stdout, proc.stderr):
        if stream is not None:
            stream.close()
