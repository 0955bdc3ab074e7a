"""Endless (or ``--count``-bounded) page views as JSON lines for ``streamkit produce``.

Each line is one value of the ``pageviews`` topic read by ``apps.pageviews``::

    {"user": "user-17", "page": "Pricing", "ts": 1700000000123, "amount": 23}

Usage::

    streamkit topics create pageviews --partitions 3 --if-not-exists
    python -m apps.generate_pageviews --count 10000 --seed 1 \\
        | streamkit produce pageviews --key-field user
    python -m apps.generate_pageviews --rate 200 | streamkit produce pageviews --key-field user

Options: ``--count N`` (default: never stop), ``--rate R`` views per second of
wall time (0, the default, is as fast as possible), ``--seed S``, ``--pages P``,
``--users U``, ``--start-ms MS`` (event time of the first view; default: now).

Event time ``ts`` (ms) starts at ``--start-ms`` or now and advances by random
gaps whose mean is one ``--rate`` interval (10 ms at rate 0), so it never goes
back. Popular pages get more views (Zipf-like); about a third of the page names
are upper-cased, which the app lower-cases before counting. Amounts are 1-50, so
``amount > 10`` keeps about four in five views. With ``--seed`` the output is
the same on every run, apart from the event-time base when ``--start-ms`` is
not given.

The program exits quietly when its reader goes away (``head``, a stopped
producer: status 0) and on Ctrl-C or SIGTERM (status 130 or 143).
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import random
import signal
import sys
import time
from typing import Dict, Iterator, List, Optional, Sequence, TextIO

BASE_PAGES = ["Home", "Pricing", "Docs", "Blog", "About", "Careers", "Login", "Signup"]
IDLE_MEAN_GAP_MS = 10.0  # mean event-time gap at --rate 0
FLUSH_EVERY = 1000  # lines between flushes when not rate-limited


def page_names(count: int) -> List[str]:
    """``count`` distinct page names: the base pages, then ``Page9``, ``Page10`` …"""
    return [BASE_PAGES[i] if i < len(BASE_PAGES) else f"Page{i + 1}" for i in range(count)]


def pageviews(*, seed: Optional[int], pages: int, users: int, start_ms: int,
              mean_gap_ms: float) -> Iterator[Dict[str, object]]:
    """Page views without end, deterministic for a given ``seed`` and ``start_ms``.

    >>> views = pageviews(seed=1, pages=3, users=5, start_ms=1000, mean_gap_ms=10)
    >>> first = next(views)
    >>> sorted(first), first["ts"] >= 1000, first["page"].lower() in {"home", "pricing", "docs"}
    (['amount', 'page', 'ts', 'user'], True, True)
    """
    rng = random.Random(seed)
    names = page_names(pages)
    cum_weights = list(itertools.accumulate(1.0 / (rank + 1) for rank in range(pages)))
    elapsed_ms = 0.0  # kept apart from start_ms: the same seed gives the same gaps from any start
    while True:
        page = rng.choices(names, cum_weights=cum_weights)[0]
        if rng.random() < 1 / 3:
            page = page.upper()
        yield {"user": f"user-{rng.randrange(users)}", "page": page, "ts": start_ms + int(elapsed_ms),
               "amount": rng.randint(1, 50)}
        elapsed_ms += rng.expovariate(1.0 / mean_gap_ms)


def generate(out: TextIO, *, count: Optional[int], rate: float, seed: Optional[int], pages: int,
             users: int, start_ms: int) -> int:
    """Write views to ``out`` as JSON lines, at most ``rate`` a second (0: no limit); return how many."""
    mean_gap_ms = 1000.0 / rate if rate > 0 else IDLE_MEAN_GAP_MS
    views = pageviews(seed=seed, pages=pages, users=users, start_ms=start_ms, mean_gap_ms=mean_gap_ms)
    started = time.monotonic()
    written = 0
    while count is None or written < count:
        out.write(json.dumps(next(views), separators=(",", ":")) + "\n")
        written += 1
        if rate > 0:
            due = started + written / rate  # when the next line may go: no drift over long runs
            wait = due - time.monotonic()
            if wait > 0:
                out.flush()  # the reader sees each line on time, not when a buffer fills
                time.sleep(wait)
        elif written % FLUSH_EVERY == 0:
            out.flush()
    out.flush()
    return written


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative(text: str) -> float:
    value = float(text)
    if not value >= 0:  # also rejects nan
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def parse_args(argv: Optional[Sequence[str]] = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m apps.generate_pageviews",
        description="Print page views as JSON lines for `streamkit produce pageviews --key-field user`.")
    parser.add_argument("--count", type=_positive, default=None, help="views to print (default: no end)")
    parser.add_argument("--rate", type=_non_negative, default=0.0,
                        help="views per second of wall time; 0 = as fast as possible (default)")
    parser.add_argument("--seed", type=int, default=None, help="random seed for repeatable output")
    parser.add_argument("--pages", type=_positive, default=len(BASE_PAGES),
                        help=f"distinct pages (default: {len(BASE_PAGES)})")
    parser.add_argument("--users", type=_positive, default=200, help="distinct users (default: 200)")
    parser.add_argument("--start-ms", type=int, default=None,
                        help="event time of the first view in ms since the epoch (default: now)")
    return parser.parse_args(argv)


def _terminate(signum: int, _frame: object) -> None:
    raise SystemExit(128 + signum)


def main(argv: Optional[Sequence[str]] = None) -> int:
    args = parse_args(argv)
    signal.signal(signal.SIGTERM, _terminate)
    start_ms = args.start_ms if args.start_ms is not None else int(time.time() * 1000)
    try:
        generate(sys.stdout, count=args.count, rate=args.rate, seed=args.seed, pages=args.pages,
                 users=args.users, start_ms=start_ms)
    except BrokenPipeError:
        _silence_stdout()
        return 0
    except KeyboardInterrupt:
        _flush_or_silence()
        return 128 + signal.SIGINT
    except SystemExit:  # SIGTERM
        _flush_or_silence()
        raise
    return 0


def _silence_stdout() -> None:
    """Point stdout at /dev/null: the reader is gone, and the flush at interpreter
    exit must not fail a second time and print a traceback."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())


def _flush_or_silence() -> None:
    try:
        sys.stdout.flush()
    except BrokenPipeError:
        _silence_stdout()


if __name__ == "__main__":
    sys.exit(main())
