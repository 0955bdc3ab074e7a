"""How ``streamkit groups reset-offsets`` picks new offsets, with kafka-consumer-groups'
option formats: ``--to-datetime``, ``--by-duration``, ``--from-file`` and ``--topic T:0,2``."""
from __future__ import annotations

import csv
import io
import re
from datetime import datetime, timedelta
from typing import Dict, List, NamedTuple, Optional, Tuple

import click

from ..core.records import TopicPartition


def parse_topic_spec(spec: str) -> Tuple[str, Optional[List[int]]]:
    """``T`` → (T, None: every partition); ``T:0,2`` → (T, [0, 2])."""
    topic, sep, partitions = spec.partition(":")
    if not topic:
        raise click.BadParameter(f"expected TOPIC or TOPIC:P1,P2, got {spec!r}", param_hint="--topic")
    if not sep:
        return topic, None
    try:
        chosen = sorted({int(p) for p in partitions.split(",") if p.strip()})
    except ValueError:
        chosen = []
    if not chosen or any(p < 0 for p in chosen):
        raise click.BadParameter(f"expected TOPIC:P1,P2 with partition numbers >= 0, got {spec!r}",
                                 param_hint="--topic")
    return topic, chosen


def parse_datetime_ms(text: str) -> int:
    """kafka-consumer-groups' ``YYYY-MM-DDTHH:mm:SS.sss`` (seconds and milliseconds
    optional), with ``Z`` or ``+hh:mm`` for a zone, else in local time as Kafka's tool
    reads it; milliseconds since the epoch."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        raise click.BadParameter(f"{text!r} is not a date-time: use YYYY-MM-DDTHH:mm:SS.sss, optionally "
                                 f"with Z or +hh:mm (e.g. 2026-11-28T09:30:00.000Z)",
                                 param_hint="--to-datetime") from None
    return int(moment.astimezone().timestamp() * 1000) if moment.tzinfo is None \
        else int(moment.timestamp() * 1000)


_DURATION = re.compile(r"P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?", re.IGNORECASE)


def parse_duration(text: str) -> timedelta:
    """ISO-8601 durations as kafka-consumer-groups' ``--by-duration`` takes them:
    ``PnDTnHnMn.nS`` (e.g. ``PT30M``, ``P1DT2H``)."""
    match = _DURATION.fullmatch(text.strip())
    if not match or not any(match.groups()) or text.strip().upper().endswith("T"):
        raise click.BadParameter(f"{text!r} is not a duration: use PnDTnHnMnS (e.g. PT30M for 30 minutes, "
                                 f"P1DT2H for a day and two hours)", param_hint="--by-duration")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return timedelta(days=days, hours=hours, minutes=minutes, seconds=seconds)


def read_offsets_file(path: str, group: str) -> Dict[TopicPartition, int]:
    """The CSV kafka-consumer-groups ``--export`` writes: ``topic,partition,offset`` lines
    (or ``group,topic,partition,offset``, where lines of other groups are skipped)."""
    with open(path, encoding="utf-8", newline="") as f:
        text = f.read()
    offsets: Dict[TopicPartition, int] = {}
    for number, row in enumerate(csv.reader(io.StringIO(text)), 1):
        cells = [cell.strip() for cell in row]
        if not any(cells):
            continue
        if len(cells) == 4:
            if cells[0] != group:
                continue
            cells = cells[1:]
        try:
            if len(cells) != 3:
                raise ValueError
            topic, partition, offset = cells[0], int(cells[1]), int(cells[2])
            if not topic or partition < 0:
                raise ValueError
        except ValueError:
            raise click.BadParameter(f"{path} line {number}: expected topic,partition,offset (or "
                                     f"group,topic,partition,offset), got {','.join(row)!r}",
                                     param_hint="--from-file") from None
        offsets[TopicPartition(topic, partition)] = offset
    if not offsets:
        raise click.BadParameter(f"{path} has no offsets for group '{group}'", param_hint="--from-file")
    return offsets


class Target(NamedTuple):
    """A partition's new offset, and why it differs from what was asked, if it does."""

    offset: int
    note: Optional[str] = None


def clamped(tp: TopicPartition, wanted: int, start: int, end: int) -> Target:
    """``wanted`` moved into ``[start, end]`` as kafka-consumer-groups does, saying so."""
    if wanted < start:
        return Target(start, f"{tp.topic}[{tp.partition}]: offset {wanted} is below the log start {start}: "
                             f"set to {start}")
    if wanted > end:
        return Target(end, f"{tp.topic}[{tp.partition}]: offset {wanted} is past the log end {end}: set to {end}")
    return Target(wanted)
