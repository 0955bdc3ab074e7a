"""A windowed, suppressed app on a Kafka-protocol broker with a worker killed by SIGKILL
halfway: under at_least_once no final window result is missing afterwards; under
exactly_once (a broker with transactions, e.g. ``STREAMKIT_TEST_KAFKA``) each closed
window's final result appears exactly once with its true count."""
from __future__ import annotations

import json
import signal
import textwrap
import time
from collections import Counter, defaultdict

from .workers import KafkaApp, stop

WINDOWED_APP = textwrap.dedent("""
    import time
    from datetime import timedelta
    import streamkit as sk

    app = sk.App({app_id!r}, commit_interval=timedelta(milliseconds=200))
    events = app.topic({source!r}, partitions=3)

    def slow(key, value):
        time.sleep(0.001)  # 6 s for the input: the kill lands mid-way

    @app.topology
    def build(b):
        (b.stream(events, timestamp=lambda k, v: v["ts"])
          .peek(slow)
          .group_by(lambda k, v: v["page"])
          .windowed_by(sk.TumblingWindows(size=timedelta(seconds=10), grace=timedelta(seconds=60)))
          .count(name="per-10s")
          .suppress(sk.Suppressed.until_window_closes())
          .to_stream().to({finals!r}))
""")

EVENTS = 6_000
BASE = 1_700_000_000_000
STEP = 50  # ms of event time per event: 5 minutes in all


def _run_with_a_kill(broker, tmp_path, name: str, *guarantee: str):
    """Produce the events, run a worker, kill it mid-way, run another to the end; return the
    true count of every window that closed and every final result emitted per window."""
    app = KafkaApp(broker, tmp_path, name)
    finals = f"{app.app_id}-finals"
    (tmp_path / f"{app.module}.py").write_text(WINDOWED_APP.format(app_id=app.app_id, source=app.source,
                                                                   finals=finals))
    # Outputs are stamped with the events' 2023 times: every topic keeps its records.
    app.create_topics()
    lines, expected = [], Counter()
    for n in range(EVENTS):
        ts = BASE + n * STEP
        page = f"p{n % 7}"
        lines.append(json.dumps({"user": f"u{n % 37}", "page": page, "ts": ts}))
        expected[(page, ts - ts % 10_000)] += 1
    done = app.cli("produce", app.source, "--key-field", "user", stdin="\n".join(lines) + "\n")
    assert done.returncode == 0, done.stderr

    log = tmp_path / "first.log"
    worker = app.worker(*guarantee, "--until-idle", "20", state="s", log=log)
    try:
        deadline = time.monotonic() + 60
        while "assigned this worker" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(2.5)  # processing, with commits behind it
        assert worker.poll() is None, "the worker finished before the kill"
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
    finally:
        stop([worker])
    app.run_until_idle("s", *guarantee)

    last = BASE + (EVENTS - 1) * STEP
    closed = {window: n for window, n in expected.items() if window[1] + 10_000 + 60_000 <= last}
    out = app.cli("consume", finals, "--from-beginning", "--timeout", "2")
    assert out.returncode == 0, out.stderr
    emitted = defaultdict(list)
    for line in out.stdout.splitlines():
        record = json.loads(line)  # the key is the window: {"key": page, "start": ms, "end": ms}
        emitted[(record["key"]["key"], record["key"]["start"])].append(record["value"])
    assert set(emitted) <= set(expected)
    return closed, emitted


def test_windowed_app_loses_no_final_result_across_a_kill(kafka, tmp_path, unique_name) -> None:
    closed, emitted = _run_with_a_kill(kafka, tmp_path, unique_name("windows"))
    missing = set(closed) - set(emitted)
    assert not missing, f"{len(missing)} closed window(s) have no final result: {sorted(missing)[:5]}"
    # at_least_once: input replayed after the kill can only add to a window, never lose from it
    short = {w: (max(emitted[w]), n) for w, n in closed.items() if max(emitted[w]) < n}
    assert not short, f"final results below the true counts: {list(short.items())[:5]}"
    print(f"\n{len(closed)} closed windows, every final result present after a kill -9")


def test_windowed_app_exactly_once_across_a_kill(transactional_kafka, tmp_path, unique_name) -> None:
    closed, emitted = _run_with_a_kill(transactional_kafka, tmp_path, unique_name("windows-eos"),
                                       "--guarantee", "exactly_once")
    assert {w: counts for w, counts in emitted.items() if w in closed} == {w: [n] for w, n in closed.items()}
