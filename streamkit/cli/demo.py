"""``streamkit demo``: sample page views through ``apps.pageviews`` on a fresh embedded broker."""
from __future__ import annotations

import asyncio
import os
import random
import sqlite3
import tempfile
import time
from collections import Counter
from typing import Dict, List, Optional, Tuple

import click
import orjson

from ..serdes import Json
from ..core.records import TopicPartition
from ..transport.factory import open_transport
from ..core.partitioner import partition_for_key
from .loading import load_app

JSON = Json()
PAGES = ["Home", "Pricing", "Docs", "Blog", "About", "Careers", "Login", "Signup"]


def sample_pageviews(count: int, seed: int = 7) -> List[Tuple[str, dict]]:
    """Deterministic (user, view) pairs; page names in mixed case, amounts 1-50."""
    rng = random.Random(seed)
    start = 1_700_000_000_000
    return [(f"user-{rng.randrange(200)}",
             {"user": f"user-{rng.randrange(200)}", "page": rng.choice(PAGES) if i % 3 else rng.choice(PAGES).upper(),
              "ts": start + i * 100, "amount": rng.randint(1, 50)}) for i in range(count)]


@click.command()
@click.option("--events", type=click.IntRange(min=1), default=20_000, show_default=True,
              help="How many sample page views to produce.")
@click.option("--dir", "directory", type=click.Path(file_okay=False), default=None,
              help="Embedded broker directory (default: a fresh temporary one).")
@click.option("--app", "app_spec", default="apps.pageviews", show_default=True, metavar="MODULE[:ATTR]",
              help="The app to run on the page views (an importable module, or module:attribute).")
def demo(events: int, directory: Optional[str], app_spec: str) -> None:
    """Produce sample page views, run the pageviews app until idle, print counts per page."""
    directory = directory or tempfile.mkdtemp(prefix="streamkit-demo-")
    database = os.path.join(os.path.abspath(directory), "pageviews.db")
    # apps.pageviews copies its per-minute counts to this database; it lives beside the
    # broker, because the sink's stored offsets belong to that broker's topics.
    os.environ["PAGEVIEWS_DB"] = f"sqlite:///{database}"
    app = load_app(app_spec)
    url = f"embedded://{directory}"
    data = sample_pageviews(events)
    transport = open_transport(url)
    try:
        partitions = app.topics["pageviews"].partitions or 1
        transport.admin.create_topic("pageviews", partitions, exist_ok=True)
        per_partition: Dict[int, list] = {}
        for user, view in data:
            key = user.encode()
            per_partition.setdefault(partition_for_key(key, partitions), []).append(
                (key, JSON.serialize(view), view["ts"], None))
        producer = transport.producer()
        asyncio.run(producer.send([("pageviews", p, recs) for p, recs in sorted(per_partition.items())]))
    finally:
        transport.close()
    click.echo(f"produced {events} page views to {url}")

    started = time.monotonic()
    totals = app.run(broker=url, until_idle=1.0)
    click.echo(f"worker processed {totals.records_processed} records in {time.monotonic() - started:.1f} s")

    counts = _final_counts(url, "page-counts")
    expected = Counter(v["page"].lower() for _, v in data if v["amount"] > 10)
    click.echo(f"\n{'PAGE':<10} {'VIEWS > 10':>10}")
    for page, count in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        click.echo(f"{page:<10} {count:>10}")
    if counts != dict(expected):
        raise click.ClickException("the counts do not match the input: this is a bug, please report it")
    click.echo(f"\nverified: the counts match a direct count of the {events} input events")
    if "page-counts-per-minute" in app.build().topics:
        finals = _report_minutes(url, data)
        if os.environ["PAGEVIEWS_DB"] == f"sqlite:///{database}" and os.path.exists(database):
            _report_database(database, finals)


def _report_minutes(url: str, data: List[Tuple[str, dict]]) -> Dict[Tuple[str, int], int]:
    """Check the per-minute windowed counts: one final result per closed minute, each equal
    to a direct count of its views minus those dropped as late (written to pageviews-late)."""
    minute = 60_000
    expected = Counter((v["page"].lower(), v["ts"] - v["ts"] % minute) for _, v in data if v["amount"] > 10)
    late = _read(url, "pageviews-late")
    for _key, value in late:
        view = orjson.loads(value)
        expected[(view["page"].lower(), view["ts"] - view["ts"] % minute)] -= 1
    finals = [(orjson.loads(k), orjson.loads(v)) for k, v in _read(url, "page-counts-per-minute")]
    got = Counter((key["key"], key["start"]) for key, _ in finals)
    if any(n > 1 for n in got.values()):
        raise click.ClickException("a minute was emitted twice: this is a bug, please report it")
    wrong = [(key, count) for key, count in finals if expected[(key["key"], key["start"])] != count]
    if wrong:
        raise click.ClickException(f"per-minute counts differ from the input: {wrong[:3]}")
    minutes = len({start for _page, start in got})
    result = {(key["key"], key["start"]): count for key, count in finals}
    click.echo(f"verified: {len(finals)} final per-minute page counts over {minutes} closed minutes, each "
               f"emitted once; {len(late)} view(s) arrived more than the 10 s grace behind their task's "
               "stream time and went to pageviews-late")
    return result


def _report_database(path: str, finals: Dict[Tuple[str, int], int]) -> None:
    """The SQLite copy of the per-minute finals must hold each of them once, unchanged."""
    with sqlite3.connect(path) as connection:
        rows = connection.execute("SELECT key, window_start, value FROM page_counts_per_minute").fetchall()
    got = {(key, start): value for key, start, value in rows}
    if got != finals or len(rows) != len(finals):
        raise click.ClickException(f"the SQLite table page_counts_per_minute ({len(rows)} rows) differs from "
                                   f"the {len(finals)} per-minute results: this is a bug, please report it")
    click.echo(f"verified: {path} holds the same {len(rows)} per-minute counts (table page_counts_per_minute)")


def _final_counts(url: str, topic: str) -> Dict[str, int]:
    return {key.decode(): orjson.loads(value) for key, value in _read(url, topic)}


def _read(url: str, topic: str) -> List[Tuple[bytes, bytes]]:
    """Every (key, value) of ``topic``, partition by partition."""
    transport = open_transport(url)
    try:
        meta = transport.admin.topic(topic)
        consumer = transport.consumer("streamkit-demo-reader")
        tps = [TopicPartition(topic, p) for p in range(meta.partitions)] if meta else []
        consumer.assign(tps, {tp: 0 for tp in tps})
        records: List[Tuple[bytes, bytes]] = []

        async def read_all() -> None:
            while True:
                batches = await consumer.fetch(0.05)
                if not batches:
                    return
                for batch in batches:
                    records.extend((key, value) for _offset, _ts, key, value, _headers in batch.records)
        asyncio.run(read_all())
        consumer.close()
        return records
    finally:
        transport.close()
