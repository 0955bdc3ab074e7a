"""The live page in a real headless browser (Debian's chromium through chromedriver):
it loads without console errors, draws the topology diagram from the packaged mermaid
with each sub-topology's live rate, charts (the packaged uPlot) that draw and move
while records flow, sparklines per task, late drops, the commit history, and restore
progress bars while a worker restarted without its state restores a sizeable changelog
(1M records) under an open page. Screenshots are kept under
the tests' temporary directories (their paths are printed)."""
from __future__ import annotations

import json
import re
import shutil
import socket
import threading
from pathlib import Path
from typing import Any, Dict, List

import orjson
import pytest

from streamkit.broker import EmbeddedBroker
from streamkit.core.partitioner import partition_for_key
from streamkit.core.units import bytes_text, count_text, duration_text, rate_text

from . import http_app
from .test_http_endpoints import USERS, get, produce, running  # noqa: F401 (fixture)
from .workers_over_http import wait_for

DURATION = re.compile(r"^(\d+(\.\d+)?(ms|s)|\d+[dhm]( \d+(\.\d+)?[hms])?)$")
RESTORE_USERS = 500_000
"""Users in the restore test: one changelog record each in two stores (1M records), a
restore that takes seconds, long enough for a page refreshed every second to show it."""


def _browser():
    if shutil.which("chromium") is None or shutil.which("chromedriver") is None:
        pytest.skip("chromium and chromedriver are not installed (scripts/ensure-chromium installs them "
                    "with apt-get; it could not here)")
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium")
    for argument in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1400,1800"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


def _js(browser: Any, script: str) -> Any:
    return browser.execute_script(script)


def _chart(browser: Any, chart_id: str) -> Dict[str, Any]:
    """What chart ``chart_id`` plots now: its points, the last and largest value of each
    series, and its canvas's pixels (as a data URL)."""
    return _js(browser, f"""
        const target = document.getElementById({chart_id!r});
        const canvas = target.querySelector("canvas");
        return {{points: Number(target.dataset.points || 0), last: JSON.parse(target.dataset.last || "[]"),
                 max: JSON.parse(target.dataset.max || "[]"),
                 canvas: canvas ? {{width: canvas.width, height: canvas.height, pixels: canvas.toDataURL()}} : null}};
    """)


def _screenshot(browser: Any, path: Path) -> None:
    browser.save_screenshot(str(path))
    assert path.stat().st_size > 10_000
    print(f"screenshot of the live page: {path}")


def _no_console_errors(browser: Any) -> None:
    errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
    assert errors == [], errors


class Feeder:
    """Appends a few records for every user every 0.2 s, until stopped: records that
    keep flowing while the page is watched."""

    def __init__(self, directory: Path, start: int) -> None:
        self.directory, self.next = directory, start
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            produce(self.directory, 48, self.next)
            self.next += 48
            self._stop.wait(0.2)

    def __enter__(self) -> "Feeder":
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join(30)


def _produce_late(directory: Path) -> None:
    """One record per user stamped at 1 s: its 10 s window closed long ago (grace 0)."""
    with EmbeddedBroker(directory) as broker:
        for user in USERS:
            key = user.encode()
            broker.append("clicks", partition_for_key(key, http_app.PARTITIONS),
                          [(key, orjson.dumps({"late": True}), 1_000, None)])


def test_the_page_draws_charts_that_move_while_records_flow(running, tmp_path: Path) -> None:  # noqa: F811
    app, url, directory = running
    browser = _browser()
    try:
        browser.get(url + "/")
        wait_for(lambda: browser.find_elements("css selector", "#topology svg"), 20, "the topology diagram")
        labels = browser.find_element("css selector", "#topology svg").text
        assert "clicks" in labels and "clicks-per-user" in labels
        assert "TumblingWindows(size=10s, grace=0s)" in labels  # human units, from describe()

        def column(selector: str, attribute: str = "textContent") -> list:
            # The table's cells change every second: read them in one script call.
            return _js(browser, f"return [...document.querySelectorAll({selector!r})].map(e => e.{attribute})")

        tasks = wait_for(lambda: column("#tasks tbody tr", "dataset.task"), 10, "the task rows")
        assert sorted(tasks) == ["0_0", "0_1", "0_2", "0_3"]

        def processed() -> int:
            return sum(int(value or 0) for value in column("#tasks td.records", "dataset.value"))

        assert processed() == 0
        with Feeder(directory, 0) as feeder:
            # The charts draw: a canvas, points, a positive rate.
            drawn = wait_for(lambda: (lambda c: c["canvas"] and c["points"] >= 3 and max(c["max"] or [0]) > 0
                                      and c)(_chart(browser, "chart-rate")), 30, "the records/s chart to draw")
            assert drawn["canvas"]["width"] > 100 and drawn["canvas"]["height"] > 50
            # ... and move: more points, other pixels, a few seconds later.
            moved = wait_for(lambda: (lambda c: c["points"] >= drawn["points"] + 3 and c)(
                _chart(browser, "chart-rate")), 30, "the records/s chart to move")
            assert moved["canvas"]["pixels"] != drawn["canvas"]["pixels"]
            assert _chart(browser, "chart-lag")["points"] >= 3
            # The diagram's sub-topology carries its live rate.
            rate = wait_for(lambda: [t for t in column("#topology text.live-rate") if t not in ("…", "0/s")],
                            20, "a live rate on the diagram")
            assert re.match(r"^\d+(\.\d+)?k?/s$", rate[0]), rate
            # A sparkline per task, with points.
            points = wait_for(lambda: (lambda p: len(p) == 4 and min(p) >= 3 and p)(
                [int(v or 0) for v in column("#tasks td.rate-spark", "dataset.points")]), 20, "the sparklines")
            assert len(column("#tasks td.rate-spark canvas", "width")) == 4, points
            # Late drops appear on their chart and in the tile.
            _produce_late(directory)
            wait_for(lambda: _chart(browser, "chart-drops")["max"][0] > 0, 20, "late drops on the chart")
            wait_for(lambda: browser.find_element("id", "total-late").text not in ("–", "0"), 10,
                     "the late drops tile")
            # The commit history lists commits: when, how long, how many records.
            commits = wait_for(lambda: (lambda rows: rows and sum(int(r[2]) for r in rows) > 0 and rows)(_js(
                browser, "return [...document.querySelectorAll('#commits tbody tr')].map("
                         "r => [r.dataset.ended, r.children[1].textContent, r.children[2].dataset.value])")),
                20, "commits with records")
            assert all(DURATION.match(took) for _, took, _ in commits), commits
            assert _chart(browser, "chart-commits")["points"] >= len(commits)
            sent = feeder.next
        wait_for(lambda: processed() == sent + len(USERS), 30, f"the table to count {sent + len(USERS)} records")
        assert browser.find_element("id", "ready").text == "ready"
        _screenshot(browser, tmp_path / "live-page.png")
        _no_console_errors(browser)
        _page_units_follow_the_python_rules(browser)
    finally:
        browser.quit()


def _page_units_follow_the_python_rules(browser: Any) -> None:
    """page.js's formatters write what streamkit.core.units writes, over a range of values."""
    values = sorted({m * 10 ** e for m in (1, 1.5, 3.1536, 5.99, 9.999) for e in range(-4, 10)}
                    | {0, 59.96, 60, 90, 7205, 7505, 3650 * 86400})
    page = _js(browser, f"const v = {json.dumps(values)};"
                        "return v.map(x => [formatDuration(x), formatRate(x), formatCount(x), formatBytes(x)])")
    python = [[duration_text(v), rate_text(v), count_text(v), bytes_text(v)] for v in values]
    assert page == python


def _produce_users(directory: Path, users: int) -> None:
    with EmbeddedBroker(directory) as broker:
        broker.create_topic("clicks", http_app.PARTITIONS, exist_ok=True)
        batches: Dict[int, List[tuple]] = {}
        for n in range(users):
            key = f"u{n}".encode()
            batches.setdefault(partition_for_key(key, http_app.PARTITIONS), []).append((key, b"{}", 1_000, None))
        for partition, records in batches.items():
            broker.append("clicks", partition, records)


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class WorkerThread:
    """http_app's worker in a thread, with HTTP on ``address``."""

    def __init__(self, directory: Path, state_dir: Path, address: str) -> None:
        self.errors: List[BaseException] = []
        self.worker: Any = None
        self._thread = threading.Thread(target=self._run, args=(directory, state_dir, address), daemon=True)
        self._thread.start()
        self.worker = wait_for(lambda: http_app.app._running and http_app.app._running[0].endpoint
                               and http_app.app._running[0], 60, "the worker")

    def _run(self, directory: Path, state_dir: Path, address: str) -> None:
        try:
            http_app.app.run(broker=f"embedded://{directory}", state_dir=str(state_dir), http=address)
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(exc)

    def stop(self) -> None:
        running = http_app.app._running
        if running and running[0] is self.worker:
            running[1].call_soon_threadsafe(self.worker.stop)
        self._thread.join(60)
        assert not self.errors, self.errors


def test_the_page_shows_restore_progress_bars(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An operator watches a worker's page; the worker restarts without its local state
    (on the same address) and restores its changelogs: the open page shows the bars.
    A restore of this changelog takes under a second here, shorter than the page's
    refresh on a loaded machine: each restored chunk is followed by a 20 ms pause, so the
    restore lasts a few seconds (it is otherwise the real restore, on the real broker)."""
    import streamkit.state.restore as restore_module

    monkeypatch.setattr(restore_module, "PAUSE_BETWEEN_CHUNKS", 0.02)
    directory = tmp_path / "broker"
    _produce_users(directory, RESTORE_USERS)
    address = f"127.0.0.1:{_free_port()}"
    browser = _browser()
    try:
        first = WorkerThread(directory, tmp_path / "first", address)
        url = first.worker.endpoint
        wait_for(lambda: sum(t["records_processed"] for t in json.loads(get(url + "/status")[1]).get("tasks", ()))
                 == RESTORE_USERS, 120, "the first worker to process every record (writing the changelogs)")
        browser.get(url + "/")
        wait_for(lambda: browser.find_elements("css selector", "#tasks tbody tr"), 20, "the page")
        first.stop()
        second = WorkerThread(directory, tmp_path / "fresh", address)  # no local state: restores

        def bars() -> List[Dict[str, Any]]:
            return _js(browser, "return [...document.querySelectorAll('#restores .restore')].map(b => ({"
                                "task: b.dataset.task, restored: Number(b.dataset.restored), "
                                "total: Number(b.dataset.total), text: b.textContent, "
                                "width: b.querySelector('.done').style.width}))")

        try:
            shown = wait_for(lambda: [b for b in bars() if 0 < b["total"] and b["restored"] < b["total"]], 60,
                             "a restore progress bar")
            bar = shown[0]
            assert bar["task"] in {f"0_{p}" for p in range(http_app.PARTITIONS)}
            assert re.search(r"task 0_\d: [\d.]+k? / [\d.]+k? records \(\d+%\)", bar["text"]), bar
            assert bar["width"].endswith("%")
            _screenshot(browser, tmp_path / "live-page-restoring.png")
            # Once restored: no bar, the finished restores listed, the worker ready.
            wait_for(lambda: get(url + "/ready")[0] == 200, 120, "readiness after the restore")
            wait_for(lambda: not bars(), 20, "the bars to go")
            finished = wait_for(lambda: browser.find_element("id", "finished-restores").text, 20,
                                "the finished restores")
            assert re.search(r"task 0_\d: [\d.]+k records in \d", finished), finished
            # The page came through the restart: only the expected failed fetches while
            # the worker was down, nothing of its own.
            errors = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"
                      and "Failed to load resource" not in e["message"] and "Failed to fetch" not in e["message"]]
            assert errors == [], errors
        finally:
            second.stop()
    finally:
        browser.quit()
