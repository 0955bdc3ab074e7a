"""Page views per page: filter big views, normalise the page, count per page, and
count per page and minute of event time (one final result per minute, when the
minute closes).

    streamkit worker apps.pageviews --until-idle 2
    streamkit consume page-counts --from-beginning --timeout 1
    streamkit consume page-counts-per-minute --from-beginning --timeout 1

The per-minute results are keyed by ``{"key": page, "start": ms, "end": ms}``. They
are also upserted into the SQLite table ``page_counts_per_minute`` (columns ``key``,
``window_start``, ``window_end``, ``value``), exactly once, in the database named by
``$PAGEVIEWS_DB`` (default ``sqlite:///.streamkit/pageviews.db``)::

    sqlite3 .streamkit/pageviews.db 'select * from page_counts_per_minute limit 5'
"""
import os
from datetime import timedelta

import streamkit as sk

app = sk.App("pageviews")

views = app.topic("pageviews", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json(), partitions=3)

DATABASE = os.environ.get("PAGEVIEWS_DB", "sqlite:///.streamkit/pageviews.db")

MINUTE = sk.TumblingWindows(size=timedelta(minutes=1), grace=timedelta(seconds=10))


@app.topology
def build(b: sk.StreamsBuilder) -> None:
    pages = (b.stream(views, timestamp=lambda key, value: value["ts"])
              .filter(lambda key, value: value["amount"] > 10)
              .map_values(lambda value: {**value, "page": value["page"].lower()})
              .group_by(lambda key, value: value["page"]))
    pages.count(name="page-counts").to_stream().to("page-counts")
    finals = (pages.windowed_by(MINUTE)
                   .count(name="page-counts-per-minute", late_records_topic="pageviews-late")
                   .suppress(sk.Suppressed.until_window_closes(), name="minute-finals")
                   .to_stream())
    finals.to("page-counts-per-minute")
    finals.sink(sk.sinks.Database(DATABASE, "page_counts_per_minute", key_columns=["key", "window_start"]),
                name="minutes-to-sqlite")
