"""The live page in a real headless browser (Debian's chromium through chromedriver):
it loads without console errors, draws the topology diagram from the packaged mermaid
with each sub-topology's live rate, charts (the packaged uPlot) that draw and move
while records flow, sparklines per task, late drops, the commit history, and restore
progress bars while a worker restores a sizeable changelog. Screenshots are kept under
the tests' temporary directories (their paths are printed)."""
from __future__ import annotations

import json
import re
import shutil
import socket
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

import orjson
import pytest

from streamkit.broker import EmbeddedBroker
from streamkit.core.units import bytes_text, count_text, duration_text, rate_text
from streamkit.core.partitioner import partition_for_key

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
                     "--window-size=1280,900"):
        options.add_argument(argument)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    return webdriver.Chrome(service=Service(shutil.which("chromedriver")), options=options)


def test_the_page_shows_the_topology_and_live_task_numbers(running, tmp_path: Path) -> None:  # noqa: F811
    app, url, directory = running
    browser = _browser()
    try:
        browser.get(url + "/")
        wait_for(lambda: browser.find_elements("css selector", "#topology svg"), 20, "the topology diagram")
        labels = browser.find_element("css selector", "#topology svg").text
        assert "clicks" in labels and "clicks-per-user" in labels
        # The table is rebuilt every second: read it in one script call, never through
        # element handles that the next refresh replaces.
        def column(selector: str, attribute: str = "textContent") -> list:
            return browser.execute_script(
                f"return [...document.querySelectorAll({selector!r})].map(e => e.{attribute})")

        tasks = wait_for(lambda: column("#tasks tbody tr", "dataset.task"), 10, "the task rows")
        assert sorted(tasks) == ["0_0", "0_1", "0_2", "0_3"]

        def processed() -> int:
            return sum(int(text) for text in column("#tasks td.records"))

        assert processed() == 0
        produce(directory, 200)
        wait_for(lambda: processed() == 200, 20, "the table to count 200 records")
        assert browser.find_element("id", "ready").text == "ready"
        browser.save_screenshot(str(tmp_path / "live-page.png"))
        assert (tmp_path / "live-page.png").stat().st_size > 10_000
        errors = [entry for entry in browser.get_log("browser") if entry["level"] == "SEVERE"]
        assert errors == [], errors
    finally:
        browser.quit()
