"""User sessions from click events: a session ends after 5 minutes without a click.
Each closed session is written once, with its click count, pages and duration.

    streamkit worker apps.user_sessions --until-idle 2
    streamkit consume user-sessions --from-beginning --timeout 1

A session closes when stream time passes its end plus the gap plus grace (as in
Kafka Streams: until then a click could still extend it), so a written session is
final; with ``close_idle_windows_after`` set, the last sessions also close when
clicks stop.
"""
from datetime import timedelta
from typing import Any, Dict

import streamkit as sk

app = sk.App("user-sessions", close_idle_windows_after=timedelta(minutes=1))

clicks = app.topic("clicks", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json(), partitions=3)

# Grace: how late (behind stream time) a click may arrive and still count.
SESSIONS = sk.SessionWindows(inactivity_gap=timedelta(minutes=5), grace=timedelta(seconds=30))


def new_session() -> Dict[str, Any]:
    return {"clicks": 0, "pages": []}


def add_click(user: str, click: Dict[str, Any], session: Dict[str, Any]) -> Dict[str, Any]:
    pages = session["pages"] if click["page"] in session["pages"] else [*session["pages"], click["page"]]
    return {"clicks": session["clicks"] + 1, "pages": pages}


def merge_sessions(user: str, first: Dict[str, Any], second: Dict[str, Any]) -> Dict[str, Any]:
    return {"clicks": first["clicks"] + second["clicks"],
            "pages": first["pages"] + [p for p in second["pages"] if p not in first["pages"]]}


@app.topology
def build(b: sk.StreamsBuilder) -> None:
    (b.stream(clicks, timestamp=lambda user, click: click["ts"])
       .group_by_key()
       .windowed_by(SESSIONS)
       .aggregate(new_session, add_click, merge_sessions, name="sessions")
       .suppress(sk.Suppressed.until_window_closes(), name="closed-sessions")
       .to_stream()
       .filter(lambda session, summary: summary is not None)
       .map(lambda session, summary: (session.key, {
           **summary, "start": session.start, "end": session.end,
           "duration_s": (session.end - session.start) / 1000}))
       .to("user-sessions", key_serde=sk.serdes.String()))
