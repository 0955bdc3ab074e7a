"""Deterministic event time (issue 17): the input, the apps and the oracle of the tests that
check "the same input gives the same answer, whatever the skew, the workers, the guarantee
or the broker" (tests/e2e/test_deterministic_time.py, tests/kafka/test_deterministic_time_on_kafka.py).

The input: page views keyed by user in 3 partitions, value ``{"user", "page", "ts"}``, the
record timestamp equal to ``ts``. Event time advances 3 ms per event, by index (never the
wall clock), from two days ago (well inside any retention; the topics are also created with
``retention.ms=-1``). Of the events:

- 1% are up to 5 s out of order (``in_grace``): inside the 10 s grace, they must count;
- 0.1% are 120-600 s behind (``late``): their window closed long ago, they must be dropped
  and written to the late-records topic. Each one is generated only where it is behind
  *every* writer's progress by more than window + grace (checked per source partition and
  per repartition partition as the generator goes), so it is late whatever the partitioning,
  the order between partitions or where the tasks run; an in-grace one is at most 5 s behind
  its own partition's previous records, so it is never late in any order that keeps each
  partition's order.

Layouts: ``skewed`` (partition sizes 40/33/27 %, users chosen per partition with Kafka's
partitioner), ``equal`` (1/3 each, same user pools) and ``random`` (5,000 random users).

The apps (module source written into the test's directory):

- ``COUNT_APP``: ``group_by(page)`` (a repartition topic) → 60 s tumbling count, grace 10 s,
  ``late_records_topic`` → ``suppress(until_window_closes())`` → the finals topic;
- ``JOIN_APP``: the views re-keyed by page (a repartition topic) joined with a stream of ads,
  keyed by campaign in 3 partitions and re-keyed by page too (a second repartition topic, so
  the join task reads only internal topics: no wall-clock ``max_task_idle`` exception
  applies), ``JoinWindows.of(5 s, grace=10 s)`` with its own late-records topic; the join
  results (timestamp: the later of the pair) counted per page and minute as above.

The oracle has been checked against the TopologyTestDriver (one partition, the ideal order)
and against today's embedded worker on equal partition sizes, which gets that case right.

The oracle is plain Python over the generated events: :func:`expected_count_finals`,
:func:`expected_join_finals`, :func:`really_late`, and :func:`check_finals` /
:func:`check_late` compare what a run wrote with it, with messages that say how it differs.
"""
from __future__ import annotations

import asyncio
import json
import os
import random
import subprocess
import sys
import textwrap
import time
from collections import Counter, defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterable, List, Mapping, NamedTuple, Optional, Sequence, Tuple

from streamkit.core.partitioner import partition_for_key

REPO = Path(__file__).resolve().parents[1]

PARTITIONS = 3
PAGES = 1000
STEP_MS = 3                      # event time between consecutive events
WINDOW_MS = 60_000
GRACE_MS = 10_000
IN_GRACE_SHARE, IN_GRACE_MAX_MS = 0.01, 5_000
LATE_SHARE, LATE_MIN_MS, LATE_MAX_MS = 0.001, 120_000, 600_000
JOIN_WINDOW_MS, JOIN_GRACE_MS = 5_000, 10_000
AD_PERIOD_MS = 10_000            # each page shows an ad every 10 s of event time
SKEWED = (0.40, 0.33, 0.27)
EQUAL = (1 / 3, 1 / 3, 1 / 3)
USERS_PER_PARTITION = 150
RANDOM_USERS = 5_000
CAMPAIGNS = 37


def recent_start(now_ms: Optional[int] = None) -> int:
    """Two days ago, on a whole hour (so windows are aligned the same way in every run of a test)."""
    now_ms = int(time.time() * 1000) if now_ms is None else now_ms
    return (now_ms - 2 * 86_400_000) // 3_600_000 * 3_600_000


class View(NamedTuple):
    user: str
    page: str
    ts: int
    kind: str          # "on_time", "in_grace" or "late"
    partition: int     # source partition (Kafka's partitioner on the user)
    base: int          # its place in event time: start + index * step (ts, unless out of order)


def page_partition(page: str) -> int:
    """The repartition (and ads) partition of a page: Kafka's partitioner on the String key."""
    return partition_for_key(page.encode(), PARTITIONS)


def _user_pools(rng: random.Random) -> List[List[str]]:
    pools: List[List[str]] = [[] for _ in range(PARTITIONS)]
    n = 0
    while min(len(pool) for pool in pools) < USERS_PER_PARTITION:
        user = f"user-{n}"
        pool = pools[partition_for_key(user.encode(), PARTITIONS)]
        if len(pool) < USERS_PER_PARTITION:
            pool.append(user)
        n += 1
    return pools


def generate_views(count: int, layout: str = "skewed", *, seed: int = 17, start_ms: Optional[int] = None,
                   pages: int = PAGES, step_ms: int = STEP_MS) -> List[View]:
    """``count`` page views in production order (each partition's records in this order)."""
    if layout not in ("skewed", "equal", "random"):
        raise ValueError(f"layout {layout!r}: skewed, equal or random")
    start_ms = recent_start() if start_ms is None else start_ms
    rng = random.Random(f"{seed}-{layout}")
    pools = _user_pools(rng)
    weights = SKEWED if layout == "skewed" else EQUAL
    cumulative = [sum(weights[:i + 1]) for i in range(PARTITIONS)]
    page_names = [f"page-{j}" for j in range(pages)]
    page_parts = [page_partition(name) for name in page_names]
    # Highest timestamp written so far by each source partition to each repartition partition:
    # a really late record must be far behind every one of them.
    progress = [[None] * PARTITIONS for _ in range(PARTITIONS)]
    views: List[View] = []
    for i in range(count):
        if layout == "random":
            user = f"user-{rng.randrange(RANDOM_USERS)}"
            partition = partition_for_key(user.encode(), PARTITIONS)
        else:
            roll = rng.random()
            partition = next(p for p in range(PARTITIONS) if roll < cumulative[p] or p == PARTITIONS - 1)
            user = rng.choice(pools[partition])
        j = rng.randrange(pages)
        page, target = page_names[j], page_parts[j]
        base = start_ms + i * step_ms
        ts, kind = base, "on_time"
        roll = rng.random()
        if roll < IN_GRACE_SHARE:
            ts, kind = base - rng.randint(1, IN_GRACE_MAX_MS), "in_grace"
        elif roll < IN_GRACE_SHARE + LATE_SHARE:
            candidate = base - rng.randint(LATE_MIN_MS, LATE_MAX_MS)
            reached = [p for row in progress for p in row]
            if None not in reached and min(reached) - candidate > WINDOW_MS + GRACE_MS + 1_000:
                ts, kind = candidate, "late"
        views.append(View(user, page, ts, kind, partition, base))
        previous = progress[partition][target]
        if previous is None or ts > previous:
            progress[partition][target] = ts
    return views


class Ad(NamedTuple):
    page: str
    ad: str
    ts: int

    @property
    def campaign(self) -> str:
        """The ads topic's key: the ad's campaign (so the ads too are re-keyed by page)."""
        return f"campaign-{int(self.page.rsplit('-', 1)[1]) % CAMPAIGNS}"

    @property
    def partition(self) -> int:
        return partition_for_key(self.campaign.encode(), PARTITIONS)


def generate_ads(views: Sequence[View], *, pages: int = PAGES) -> List[Ad]:
    """Every page shows an ad every ``AD_PERIOD_MS`` over the views' time span (phase by page),
    in timestamp order, none out of order."""
    start_ms = views[0].base
    last = max(view.ts for view in views)
    ads = []
    for j in range(pages):
        ts, k = start_ms + (j * 7919) % AD_PERIOD_MS, 0
        while ts <= last:
            ads.append(Ad(f"page-{j}", f"ad-{j}-{k}", ts))
            ts, k = ts + AD_PERIOD_MS, k + 1
    ads.sort(key=lambda ad: (ad.ts, ad.page))
    return ads


def layout_summary(views: Sequence[View]) -> str:
    sizes = Counter(view.partition for view in views)
    kinds = Counter(view.kind for view in views)
    shares = "/".join(f"{100 * sizes[p] / len(views):.1f}" for p in range(PARTITIONS))
    return (f"{len(views)} views, partition sizes {shares} %, {kinds['in_grace']} in grace, "
            f"{kinds['late']} really late")


# -- the apps ---------------------------------------------------------------------------------

COUNT_APP = textwrap.dedent("""
    from datetime import timedelta
    import streamkit as sk

    app = sk.App({app_id!r}, commit_interval=timedelta(milliseconds={commit_ms}))
    views = app.topic({views!r}, key_serde=sk.serdes.String(), value_serde=sk.serdes.Json(), partitions=3)

    @app.topology
    def build(b):
        (b.stream(views, timestamp=lambda key, value: value["ts"])
          .group_by(lambda key, value: value["page"], key_serde=sk.serdes.String())
          .windowed_by(sk.TumblingWindows(size=timedelta(seconds=60), grace=timedelta(seconds=10)))
          .count(name="per-minute", late_records_topic={late!r})
          .suppress(sk.Suppressed.until_window_closes(), name="minute-finals")
          .to_stream()
          .to({finals!r}))
""")

JOIN_APP = textwrap.dedent("""
    from datetime import timedelta
    import streamkit as sk

    app = sk.App({app_id!r}, commit_interval=timedelta(milliseconds={commit_ms}))
    views = app.topic({views!r}, key_serde=sk.serdes.String(), value_serde=sk.serdes.Json(), partitions=3)
    ads = app.topic({ads!r}, key_serde=sk.serdes.String(), value_serde=sk.serdes.Json(), partitions=3)

    @app.topology
    def build(b):
        shown = b.stream(ads, timestamp=lambda key, value: value["ts"]).select_key(lambda key, value: value["page"])
        (b.stream(views, timestamp=lambda key, value: value["ts"])
          .select_key(lambda key, value: value["page"])
          .join(shown, lambda view, ad: {{"user": view["user"], "ts": view["ts"], "ad": ad["ad"]}},
                sk.JoinWindows.of(timedelta(seconds=5), grace=timedelta(seconds=10)),
                key_serde=sk.serdes.String(), late_records_topic={join_late!r})
          .group_by_key()
          .windowed_by(sk.TumblingWindows(size=timedelta(seconds=60), grace=timedelta(seconds=10)))
          .count(name="joined-per-minute", late_records_topic={late!r})
          .suppress(sk.Suppressed.until_window_closes(), name="joined-finals")
          .to_stream()
          .to({finals!r}))
""")


@dataclass
class DetApp:
    """One app module written into ``directory`` and the names of its topics."""

    directory: Path
    module: str
    app_id: str
    kind: str                       # "count" or "join"
    views: str
    finals: str
    late: str
    ads: Optional[str] = None
    join_late: Optional[str] = None

    @property
    def inputs(self) -> List[str]:
        return [self.views] + ([self.ads] if self.ads else [])


def write_app(directory: Path, kind: str = "count", *, prefix: str = "det", commit_ms: int = 100) -> DetApp:
    """Write the ``kind`` app ("count" or "join") as ``<prefix>_app.py`` in ``directory``; every
    topic and the app id start with ``prefix`` (unique names on a shared Kafka broker)."""
    module = prefix.replace("-", "_") + "_app"
    names = dict(app_id=prefix, views=f"{prefix}-views", finals=f"{prefix}-finals", late=f"{prefix}-late",
                 commit_ms=commit_ms)
    if kind == "join":
        names.update(ads=f"{prefix}-ads", join_late=f"{prefix}-join-late")
        source = JOIN_APP.format(**names)
    elif kind == "count":
        source = COUNT_APP.format(**names)
    else:
        raise ValueError(kind)
    (directory / f"{module}.py").write_text(source)
    names.pop("commit_ms")
    return DetApp(directory=directory, module=module, kind=kind, **names)


# -- producing and reading (any broker URL) -----------------------------------------------------

def produce(url: str, app: DetApp, views: Sequence[View], ads: Sequence[Ad] = ()) -> None:
    """Create the app's input topics (3 partitions, ``retention.ms=-1``) and append the views
    (and ads) with their record timestamp set to ``ts``, each partition in the given order."""
    from streamkit.transport.factory import open_transport

    batches: Dict[str, List[List[tuple]]] = {app.views: [[] for _ in range(PARTITIONS)]}
    for view in views:
        value = json.dumps({"user": view.user, "page": view.page, "ts": view.ts}).encode()
        batches[app.views][view.partition].append((view.user.encode(), value, view.ts, None))
    if app.ads:
        batches[app.ads] = [[] for _ in range(PARTITIONS)]
        for ad in ads:
            value = json.dumps({"page": ad.page, "ad": ad.ad, "ts": ad.ts}).encode()
            batches[app.ads][ad.partition].append((ad.campaign.encode(), value, ad.ts, None))
    transport = open_transport(url)
    try:
        for topic in batches:
            transport.admin.create_topic(topic, PARTITIONS, {"retention.ms": "-1"}, exist_ok=True)

        async def send() -> None:
            producer = transport.producer()
            try:
                for topic, partitions in batches.items():
                    for partition, records in enumerate(partitions):
                        for first in range(0, len(records), 5_000):
                            await producer.send([(topic, partition, records[first:first + 5_000])])
                        await producer.flush()
            finally:
                await producer.aclose()
        asyncio.run(send())
    finally:
        transport.close()


def cli_env(url: str, directory: Path, **more: str) -> Dict[str, str]:
    env = {**os.environ, "PYTHONPATH": f"{directory}{os.pathsep}{REPO}", "STREAMKIT_BROKER": url}
    env.pop("STREAMKIT_CRASH_AT", None)
    env.update(more)
    return env


def read_topic(url: str, topic: str, directory: Path, *, timeout: float = 1.0) -> List[dict]:
    """Every committed record of ``topic`` as ``streamkit consume`` prints it (key, value,
    partition, offset, timestamp); [] if the topic does not exist."""
    done = subprocess.run([sys.executable, "-m", "streamkit", "consume", topic, "--from-beginning",
                           "--timeout", str(timeout)], capture_output=True, text=True, timeout=300,
                          cwd=directory, env=cli_env(url, directory))
    if done.returncode != 0:
        if f"unknown topic '{topic}'" in done.stderr:
            return []
        raise AssertionError(f"streamkit consume {topic} failed ({done.returncode}): {done.stderr[-2000:]}")
    return [json.loads(line) for line in done.stdout.splitlines()]


def start_worker(url: str, app: DetApp, guarantee: str, *, log: Path, until_idle: float = 1.0,
                 crash_at: Optional[str] = None, state_dir: Optional[Path] = None,
                 env: Optional[Mapping[str, str]] = None) -> subprocess.Popen:
    """``streamkit --log-level INFO worker MODULE --guarantee G --until-idle N`` in the
    background, stderr to ``log``; ``crash_at`` arms STREAMKIT_CRASH_AT."""
    more = dict(env or {})
    if crash_at:
        more["STREAMKIT_CRASH_AT"] = crash_at
    args = [sys.executable, "-m", "streamkit", "--log-level", "INFO", "worker", app.module, "--broker", url,
            "--guarantee", guarantee, "--until-idle", str(until_idle)]
    if state_dir is not None:
        args += ["--state-dir", str(state_dir)]
    with open(log, "w") as err:
        return subprocess.Popen(args, cwd=app.directory, env=cli_env(url, app.directory, **more),
                                stdout=subprocess.DEVNULL, stderr=err, text=True)


def run_worker(url: str, app: DetApp, guarantee: str, *, log: Path, timeout: float = 240, **options) -> str:
    """Run one worker to the end of its input; assert it exited 0; its log."""
    proc = start_worker(url, app, guarantee, log=log, **options)
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)
        raise AssertionError(f"worker still running after {timeout} s: {log.read_text()[-3000:]}")
    text = log.read_text()
    assert code == 0, f"worker exited with {code}: {text[-3000:]}"
    return text


def load_app(app: DetApp):
    """The ``sk.App`` of a written app module (imported from its file)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location(app.module, app.directory / f"{app.module}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.app


def in_generation_order(views: Sequence[View], ads: Sequence[Ad] = ()) -> List[Tuple[str, object]]:
    """Views and ads as one sequence, each at its place in event time (a view at its index's
    time even when out of order): ("view", view) and ("ad", ad) items."""
    import heapq

    return [item for _, _, item in heapq.merge(((view.base, 0, ("view", view)) for view in views),
                                               ((ad.ts, 1, ("ad", ad)) for ad in ads))]


def driver_outputs(app: DetApp, views: Sequence[View], ads: Sequence[Ad] = ()) -> Dict[str, List[dict]]:
    """Pipe the input in generation order through the TopologyTestDriver (one partition,
    every record processed at once: the order of an ideal run) and return the finals and the
    late topics as ``streamkit consume`` would print them."""
    from streamkit.testing import TopologyTestDriver

    topics = [t for t in (app.finals, app.late, app.join_late) if t]
    out: Dict[str, List[dict]] = {t: [] for t in topics}
    with TopologyTestDriver(load_app(app)) as driver:
        view_topic = driver.input_topic(app.views)
        ad_topic = driver.input_topic(app.ads) if app.ads else None
        for what, item in in_generation_order(views, ads):
            if what == "view":
                view_topic.pipe_input(item.user, {"user": item.user, "page": item.page, "ts": item.ts},
                                      timestamp=item.ts)
            else:
                ad_topic.pipe_input(item.campaign, {"page": item.page, "ad": item.ad, "ts": item.ts},
                                    timestamp=item.ts)
        for topic in topics:
            for record in driver.output_topic(topic).read_records():
                key = record.key
                if hasattr(key, "start"):
                    key = {"key": key.key, "start": key.start, "end": key.end}
                out[topic].append({"key": key, "value": record.value, "timestamp": record.timestamp})
    return out


# -- the oracle --------------------------------------------------------------------------------

Window = Tuple[str, int]  # (page, window start)


def window_of(ts: int) -> int:
    return ts - ts % WINDOW_MS


def really_late(views: Iterable[View]) -> Counter:
    """The multiset of (user, ts) of the really late views: exactly what must be dropped."""
    return Counter((view.user, view.ts) for view in views if view.kind == "late")


def expected_count_finals(views: Iterable[View]) -> Dict[Window, int]:
    """Views per (page, minute) of every view that is not really late."""
    counts: Dict[Window, int] = Counter()
    for view in views:
        if view.kind != "late":
            counts[(view.page, window_of(view.ts))] += 1
    return dict(counts)


def expected_join_finals(views: Iterable[View], ads: Sequence[Ad]) -> Dict[Window, int]:
    """Join results per (page, minute of the result's timestamp, the later of the two): every
    pair of a not-late view and an ad of its page at most ``JOIN_WINDOW_MS`` apart."""
    by_page: Dict[str, List[int]] = defaultdict(list)
    for ad in ads:
        by_page[ad.page].append(ad.ts)
    counts: Dict[Window, int] = Counter()
    for view in views:
        if view.kind == "late":
            continue
        for ad_ts in by_page.get(view.page, ()):
            if abs(ad_ts - view.ts) <= JOIN_WINDOW_MS:
                counts[(view.page, window_of(max(ad_ts, view.ts)))] += 1
    return dict(counts)


@dataclass
class Closing:
    """Which windows must have closed by the end of the input, and which may have."""

    task_end: Dict[int, int]   # per repartition partition: the largest timestamp its task reads
    writers_end: int           # the smallest of the source partitions' largest timestamps
    global_end: int            # the largest timestamp of the whole input

    def required(self, window: Window) -> bool:
        """Closed in every valid run: the window's own task reads a record at or past its
        end + grace, and every writer of the task's input has got there too (with a second
        to spare: a reader may hold the last records until every writer has passed them)."""
        page, start = window
        end = min(self.task_end[page_partition(page)], self.writers_end - 1_000)
        return start + WINDOW_MS + GRACE_MS <= end

    def possible(self, window: Window) -> bool:
        """No task's stream time can pass the input's largest timestamp."""
        return window[1] + WINDOW_MS + GRACE_MS <= self.global_end


def closing(views: Sequence[View], ads: Sequence[Ad] = ()) -> Closing:
    task_end: Dict[int, int] = defaultdict(lambda: -1)
    source_end: Dict[Tuple[str, int], int] = defaultdict(lambda: -1)
    for page, ts, source in [(v.page, v.ts, ("views", v.partition)) for v in views] + \
            [(a.page, a.ts, ("ads", a.partition)) for a in ads]:
        q = page_partition(page)
        task_end[q] = max(task_end[q], ts)
        source_end[source] = max(source_end[source], ts)
    return Closing(dict(task_end), min(source_end.values()), max(task_end.values()))


def parse_finals(records: Iterable[dict]) -> List[Tuple[Window, int]]:
    """The suppressed finals as ((page, window start), count), in the order read. The key of a
    windowed result is ``{"key": page, "start": ms, "end": ms}``."""
    out = []
    for record in records:
        key = record["key"]
        assert isinstance(key, dict) and {"key", "start", "end"} <= set(key), f"unexpected windowed key {key!r}"
        assert key["end"] - key["start"] == WINDOW_MS, f"window of the wrong size: {key!r}"
        out.append(((key["key"], key["start"]), record["value"]))
    return out


def _examples(items: Iterable, n: int = 5) -> str:
    items = list(items)
    return ", ".join(map(str, items[:n])) + (" ..." if len(items) > n else "")


def check_finals(emitted: Sequence[Tuple[Window, int]], expected: Mapping[Window, int], close: Closing,
                 *, exactly_once: bool, what: str = "") -> str:
    """Assert the suppressed finals equal the oracle: every emitted value is the true count of
    its window, every window that must have closed is there, none that cannot have closed is,
    and (exactly_once) each window appears once; at least once with one value otherwise.
    Returns a one-line summary."""
    values: Dict[Window, List[int]] = defaultdict(list)
    for window, count in emitted:
        values[window].append(count)
    wrong = {w: (vs, expected.get(w)) for w, vs in values.items() if any(v != expected.get(w) for v in vs)}
    required = {w for w in expected if close.required(w)}
    missing = sorted(required - set(values))
    impossible = sorted(w for w in values if not close.possible(w))
    repeated = {w: vs for w, vs in values.items() if len(vs) > 1}
    problems = []
    if wrong:
        diffs = _examples(f"{w[0]}@{w[1]}: emitted {vs} expected {e}" for w, (vs, e) in sorted(wrong.items()))
        too_low = sum(1 for vs, e in wrong.values() if e is not None and max(vs) < e)
        problems.append(f"{len(wrong)} of {len(values)} emitted windows have a wrong count ({too_low} too low, "
                        f"{sum(1 for _, e in wrong.values() if e is None)} not in the oracle), e.g. {diffs}")
    if missing:
        problems.append(f"{len(missing)} of {len(required)} windows that must have closed were never emitted, "
                        f"e.g. {_examples(missing)}")
    if impossible:
        problems.append(f"{len(impossible)} windows emitted that cannot have closed yet, e.g. {_examples(impossible)}")
    if repeated and exactly_once:
        problems.append(f"{len(repeated)} windows emitted more than once under exactly_once, "
                        f"e.g. {_examples(sorted(repeated.items()))}")
    summary = (f"{what}{len(emitted)} finals for {len(values)} windows ({len(required)} required, "
               f"{len(repeated)} repeated), {len(wrong)} wrong")
    assert not problems, f"{what}suppressed finals differ from the oracle:\n  - " + "\n  - ".join(problems)
    return summary


def check_late(records: Iterable[dict], expected: Counter, *, what: str = "late records",
               kinds: Optional[Mapping[Tuple[str, int], str]] = None) -> str:
    """Assert the late-records topic holds exactly the really late views ((user, ts) multiset;
    an ad dropped as late shows as (ad id, ts)). ``kinds`` ((user, ts) -> kind of view) lets
    the message say what was dropped wrongly."""
    got = Counter((r["value"].get("user") or r["value"].get("ad"), r["value"].get("ts")) for r in records)
    extra, missing = got - expected, expected - got
    if extra or missing:
        lines = [f"{what}: {sum(got.values())} dropped as late, {sum(expected.values())} really late"]
        if extra:
            sample = sorted(extra)[:5]
            split = ""
            if kinds is not None:
                by_kind = Counter("ad" if str(ident).startswith("ad-") else kinds.get((ident, ts), "unknown")
                                  for (ident, ts), n in extra.items() for _ in range(n))
                split = " (" + ", ".join(f"{n} {kind}" for kind, n in sorted(by_kind.items())) + ")"
            lines.append(f"{sum(extra.values())} dropped that were not really late{split}, e.g. {sample}")
        if missing:
            lines.append(f"{sum(missing.values())} really late ones not on the late topic, e.g. {sorted(missing)[:5]}")
        raise AssertionError("; ".join(lines))
    return f"{what}: {sum(got.values())} == really late"


def verify(url: str, app: DetApp, views: Sequence[View], ads: Sequence[Ad] = (), *, exactly_once: bool,
           what: str = "", read_timeout: float = 1.0) -> str:
    """Read the run's late-records and finals topics and check both against the oracle (one
    assertion naming every difference); returns a one-line summary."""
    problems, summaries = [], []
    expected_late = really_late(views)
    late_topic = app.join_late or app.late
    try:
        summaries.append(check_late(read_topic(url, late_topic, app.directory, timeout=read_timeout), expected_late,
                                    what=f"late records ({late_topic})",
                                    kinds={(view.user, view.ts): view.kind for view in views}))
    except AssertionError as exc:
        problems.append(str(exc))
    if app.join_late:  # the join drops the really late views: nothing is late for the count after it
        late_counts = read_topic(url, app.late, app.directory, timeout=read_timeout)
        if late_counts:
            problems.append(f"{len(late_counts)} join results dropped as late by the count after the join "
                            f"({app.late}), e.g. {late_counts[:3]}")
    expected = expected_join_finals(views, ads) if app.kind == "join" else expected_count_finals(views)
    try:
        summaries.append(check_finals(parse_finals(read_topic(url, app.finals, app.directory, timeout=read_timeout)),
                                      expected,
                                      closing(views, ads), exactly_once=exactly_once))
    except AssertionError as exc:
        problems.append(str(exc))
    header = f"{what}{layout_summary(views)}" + (f", {len(ads)} ads" if ads else "")
    assert not problems, f"{header}:\n" + "\n".join(problems)
    return f"{header}: " + "; ".join(summaries)
