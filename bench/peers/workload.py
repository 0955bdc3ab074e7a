"""The events, the pages table and, per scenario, the true result and its check.

Every framework reads the same pre-produced events and must write the same output
records (the output contract below), so one check serves them all:

  S0 pass-through    every event, key and value bytes unchanged
  S1 filter + map    events with amount > 10, value {"user", "page", "ts", "cents": amount * 100}
  S2 count by key    one update per event: value = the page's running count (JSON int)
  S3 tumbling count  one update per event: value {"start": window start ms, "count": n},
                     60 s windows on the event's "ts", 10 s grace
  S4 enrich          every event joined with its page's row of a 10,000-row table keyed by
                     page: value = the event plus the row's "title" and "category"
  S5 S2 under exactly_once

Keys are the page (``b"page-17"``) throughout. A framework with caching on (streamkit's
default) writes fewer, coalesced updates for S2, S3 and S5: their final values are checked,
and the number of updates may be smaller.
"""
from __future__ import annotations

import random
from collections import Counter
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

import orjson

PARTITIONS = 3
PAGES = 1_000
USERS = 10_000
TABLE_ROWS = 10_000
WINDOW_MS = 60_000
GRACE_MS = 10_000
START_MS = 1_700_000_000_000
CATEGORIES = ("news", "sport", "shop", "video", "docs")

Event = Tuple[bytes, bytes, int]  # key, value, timestamp (ms)
Output = List[Tuple[int, Optional[bytes], Optional[bytes]]]  # (partition, key, value), offset order per partition


def compact_json(value: Any) -> bytes:
    """orjson.dumps in a right-sized bytes object: orjson's own result sits in a ~4 KiB
    allocation, and the benchmark holds millions of events (2M would pin 8 GiB). Kept
    here rather than imported from streamkit, so that the peers' processes import no
    streamkit code."""
    return orjson.dumps(value).decode().encode()


def make_events(n: int, seed: int = 42, keys: int = PAGES) -> List[Event]:
    """``n`` page views keyed by page (``keys`` distinct): event time advances 1 ms per
    event and 1% of the events are up to 5 s late (inside every framework's grace, so none
    is dropped). The record timestamp is the event's ``ts``."""
    rng = random.Random(seed)
    out = []
    for i in range(n):
        page = f"page-{rng.randrange(keys)}"
        ts = START_MS + i - (rng.randrange(1, 5_000) if rng.random() < 0.01 else 0)
        value = {"user": f"user-{rng.randrange(USERS)}", "page": page, "ts": ts, "amount": rng.randrange(100)}
        out.append((page.encode(), compact_json(value), ts))
    return out


def make_pages_table(seed: int = 7, timestamp_ms: int = START_MS - 3_600_000) -> List[Event]:
    """The 10,000 rows of the pages table (``page-0`` .. ``page-9999``; the events use the
    first 1,000), stamped an hour before the first event."""
    rng = random.Random(seed)
    return [(f"page-{i}".encode(),
             compact_json({"title": f"Page {i}", "category": CATEGORIES[rng.randrange(len(CATEGORIES))]}),
             timestamp_ms) for i in range(TABLE_ROWS)]


# -- the transformations every framework implements ----------------------------------------
def filter_map_value(event: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """S1 on one decoded event: the output value, or None when filtered out."""
    if event["amount"] > 10:
        return {"user": event["user"], "page": event["page"], "ts": event["ts"], "cents": event["amount"] * 100}
    return None


def window_start(ts: int) -> int:
    return ts - ts % WINDOW_MS


def enrich_value(event: Dict[str, Any], row: Dict[str, Any]) -> Dict[str, Any]:
    """S4 on one decoded event and its page's row."""
    return {**event, "title": row["title"], "category": row["category"]}


# -- true results -------------------------------------------------------------------------
def canonical(value: Any) -> bytes:
    """Sorted-key JSON, right-sized as :func:`compact_json` (the true result and the output
    read back hold one per record: 2,000,000 of orjson's own would pin about 8 GiB each)."""
    return orjson.dumps(value, option=orjson.OPT_SORT_KEYS).decode().encode()


def expect_passthrough(events: Sequence[Event], table: Sequence[Event]) -> Counter:
    return Counter((k, v) for k, v, _ in events)


def expect_filter_map(events: Sequence[Event], table: Sequence[Event]) -> Counter:
    out: Counter = Counter()
    for key, value, _ in events:
        mapped = filter_map_value(orjson.loads(value))
        if mapped is not None:
            out[key, canonical(mapped)] += 1
    return out


def expect_counts(events: Sequence[Event], table: Sequence[Event]) -> Counter:
    return Counter(k for k, _, _ in events)


def expect_window_counts(events: Sequence[Event], table: Sequence[Event]) -> Counter:
    return Counter((k, window_start(orjson.loads(v)["ts"])) for k, v, _ in events)


def expect_enriched(events: Sequence[Event], table: Sequence[Event]) -> Counter:
    rows = {k: orjson.loads(v) for k, v, _ in table}
    return Counter((k, canonical(enrich_value(orjson.loads(v), rows[k]))) for k, v, _ in events)


# -- checks: raise AssertionError with what differs ------------------------------------------
def _first_differences(got: Counter, expected: Counter, limit: int = 3) -> str:
    missing = list((expected - got).items())[:limit]
    extra = list((got - expected).items())[:limit]
    return f"missing {missing}, unexpected {extra}"


def check_multiset(name: str) -> Callable[[Output, Counter, bool], None]:
    def check(output: Output, expected: Counter, coalesced: bool) -> None:
        total = sum(expected.values())
        assert len(output) == total, f"{name}: wrote {len(output):,} records, expected {total:,}"
        if name == "S0":
            got = Counter((k, v) for _, k, v in output)
        else:
            got = Counter((k, canonical(orjson.loads(v))) for _, k, v in output)
        assert got == expected, f"{name}: output differs from the true result: {_first_differences(got, expected)}"
    return check


def _check_update_count(output: Output, total: int, coalesced: bool) -> None:
    """One update per event, or at most that many when the framework coalesces updates."""
    if coalesced:
        assert len(output) <= total, f"wrote {len(output):,} updates for {total:,} events"
    else:
        assert len(output) == total, f"wrote {len(output):,} updates, expected one per event ({total:,})"


def check_counts(output: Output, expected: Counter, coalesced: bool) -> None:
    """One update per event (or fewer when coalesced); each page's last update is its count."""
    _check_update_count(output, sum(expected.values()), coalesced)
    final = {k: orjson.loads(v) for _, k, v in output}  # a page lives in one partition: its last update wins
    assert Counter(final) == expected, \
        f"final counts differ from the true result: {_first_differences(Counter(final), expected)}"


def check_window_counts(output: Output, expected: Counter, coalesced: bool) -> None:
    """One update per event (or fewer when coalesced); each (page, window)'s last is its count."""
    _check_update_count(output, sum(expected.values()), coalesced)
    final: Dict[Tuple[bytes, int], int] = {}
    for _, key, value in output:
        update = orjson.loads(value)
        final[key, update["start"]] = update["count"]
    assert Counter(final) == expected, \
        f"final window counts differ from the true result: {_first_differences(Counter(final), expected)}"


class Scenario(NamedTuple):
    name: str
    title: str
    expect: Callable[[Sequence[Event], Sequence[Event]], Counter]
    check: Callable[[Output, Counter, bool], None]
    stateful: bool = False
    exactly_once: bool = False
    table: bool = False


SCENARIOS: Dict[str, Scenario] = {s.name: s for s in (
    Scenario("S0", "pass-through", expect_passthrough, check_multiset("S0")),
    Scenario("S1", "filter + map", expect_filter_map, check_multiset("S1")),
    Scenario("S2", "count by key (RocksDB)", expect_counts, check_counts, stateful=True),
    Scenario("S3", "60 s tumbling count per page (RocksDB)", expect_window_counts, check_window_counts,
             stateful=True),
    Scenario("S4", "stream-table join (10,000-row table)", expect_enriched, check_multiset("S4"), table=True),
    Scenario("S5", "S2 under exactly_once", expect_counts, check_counts, stateful=True, exactly_once=True),
)}
