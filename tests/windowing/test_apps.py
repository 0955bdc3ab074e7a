"""The windowed example apps, through the test driver."""
from __future__ import annotations

from collections import Counter
from datetime import timedelta

import streamkit as sk
from apps import pageviews, user_sessions
from streamkit.cli.demo import sample_pageviews
from streamkit.testing import TopologyTestDriver

MINUTE = 60_000


def test_pageviews_emits_each_closed_minute_once_with_its_final_count() -> None:
    views = sample_pageviews(3_000)  # 100 ms apart: 5 minutes of event time
    with TopologyTestDriver(pageviews.app) as driver:
        topic = driver.input_topic("pageviews")
        for user, view in views:
            topic.pipe_input(user, view, view["ts"])
        finals = driver.output_topic("page-counts-per-minute").read_key_values()
    expected = Counter((v["page"].lower(), v["ts"] - v["ts"] % MINUTE) for _, v in views if v["amount"] > 10)
    stream_time = max(v["ts"] for _, v in views)
    closed = {k: n for k, n in expected.items() if k[1] + MINUTE + 10_000 <= stream_time}
    assert len(finals) == len({(w.key, w.start) for w, _ in finals}), "a minute was emitted twice"
    assert {(w.key, w.start): n for w, n in finals} == closed
    assert all(w.end == w.start + MINUTE for w, _ in finals)
    assert len(closed) > 20


def _click(driver: TopologyTestDriver, user: str, page: str, at_s: float) -> None:
    driver.input_topic("clicks").pipe_input(user, {"page": page, "ts": int(at_s * 1000)}, int(at_s * 1000))


def test_user_sessions_merge_close_and_close_when_idle() -> None:
    with TopologyTestDriver(user_sessions.app) as driver:
        out = driver.output_topic("user-sessions")
        _click(driver, "ann", "home", 0)
        _click(driver, "ann", "docs", 310)      # more than the 5 min gap later: a second session
        _click(driver, "bob", "home", 100)
        _click(driver, "ann", "blog", 155)      # within the gap of both: one session [0, 310]
        assert out.read_key_values() == []
        _click(driver, "bob", "pricing", 1_000)  # stream time 1000 s: ann [0, 310] and bob [100, 100] closed
        assert sorted(out.read_key_values()) == [
            ("ann", {"clicks": 3, "pages": ["home", "docs", "blog"], "start": 0, "end": 310_000,
                     "duration_s": 310.0}),
            ("bob", {"clicks": 1, "pages": ["home"], "start": 100_000, "end": 100_000, "duration_s": 0.0})]
        driver.advance_wall_clock(timedelta(minutes=10))  # no clicks: bob's last session closes too
        assert out.read_key_values() == [
            ("bob", {"clicks": 1, "pages": ["pricing"], "start": 1_000_000, "end": 1_000_000, "duration_s": 0.0})]
