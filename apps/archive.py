"""Archive the pageviews topic to Parquet, exactly once, for replays and analytics.

    streamkit worker apps.archive --until-idle 2
    python -c "import pyarrow.parquet as pq; print(pq.read_table('archive/pageviews').num_rows)"

Files land in ``$PAGEVIEWS_ARCHIVE`` (default ``archive/pageviews``) as
``pageviews+<partition>+<first-offset>-<last-offset>.parquet`` with columns key,
value (JSON text), timestamp, partition and offset. A file is rolled every 50,000
records or 5 minutes, and when the worker stops; a crash never loses or repeats a
record. Replay the archive with ``b.stream(sk.sources.ParquetArchive(path))``.
"""
import os
from datetime import timedelta

import streamkit as sk

app = sk.App("pageviews-archive")

views = app.topic("pageviews", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json(), partitions=3)

ARCHIVE = os.environ.get("PAGEVIEWS_ARCHIVE", "archive/pageviews")


@app.topology
def build(b: sk.StreamsBuilder) -> None:
    b.stream(views).sink(sk.sinks.ParquetArchive(ARCHIVE, roll_records=50_000, roll_interval=timedelta(minutes=5)),
                         name="archive")
