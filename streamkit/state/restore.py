"""Restore: replay each store's changelog from its checkpoint before the task runs.

A store's persistent layer records the changelog offset it reflects; restore
reads from there to the end (committed records only), applying batches that
each carry the offset they reach, so a crash during restore resumes where it
stopped. A store without a checkpoint (new, deleted or rebuilt after
corruption) replays the whole changelog.
"""
from __future__ import annotations

import asyncio
import logging
import sys
import time
from typing import Callable, Dict, List, Optional

from ..faults import crash_point
from ..core.records import TopicPartition
from ..transport.base import Admin, Consumer
from .task_stores import OpenStore, TaskStores

log = logging.getLogger(__name__)

LOG_EVERY = 5.0  # seconds between progress lines
FETCH_WAIT = 0.1  # s
EMPTY_FETCHES_BELOW_END = 20


async def restore_task_stores(task_id: str, stores: TaskStores, consumer: Consumer, admin: Admin,
                              *, show_progress: Optional[bool] = None,
                              progress: Optional[Callable[[int, int], None]] = None) -> Dict[str, int]:
    """Bring every changelogged store of a task up to the end of its changelog; return the
    records replayed per store. ``progress(restored, total)`` is called after each batch
    (``total``: the records between the checkpoints and the changelogs' ends)."""
    report: Dict[str, int] = {}
    todo: List[tuple] = []
    for store in stores.open_stores:
        if store.changelog is None:
            continue
        tp = store.changelog
        offsets = admin.partition_offsets(tp.topic, tp.partition)
        checkpoint = store.buffer.persistent.changelog_offset()
        if checkpoint is not None and checkpoint > offsets.end:
            log.warning("store %s of task %s: its checkpoint %d is past the end of %s[%d] (%d): "
                        "the changelog was recreated; rebuilding the store from it",
                        store.spec.name, task_id, checkpoint, tp.topic, tp.partition, offsets.end)
            _wipe(store)
            checkpoint = None
        start = offsets.start if checkpoint is None or checkpoint < offsets.start else checkpoint
        if start < offsets.end:
            todo.append((store, tp, start, offsets.end))
        report[store.spec.name] = 0
    if not todo:
        return report
    total = sum(end - start for _, _, start, end in todo)
    bar = _progress_bar(task_id, total, show_progress)
    started = time.monotonic()
    done = 0

    def advanced(records: int) -> None:
        nonlocal done
        done += records
        if bar is not None:
            bar.update(records)
        if progress is not None:
            progress(done, total)

    if progress is not None:
        progress(0, total)
    for store, tp, start, end in todo:
        report[store.spec.name] = await _replay(store, tp, start, end, consumer, advanced,
                                                show_log=bar is None, task_id=task_id)
    if bar is not None:
        bar.close()
    elapsed = max(time.monotonic() - started, 1e-9)
    restored = sum(report.values())
    log.info("task %s restored %d changelog record(s) of %d store(s) in %.2f s (%.0f records/s)",
             task_id, restored, len(todo), elapsed, restored / elapsed)
    return report


async def _replay(store: OpenStore, tp: TopicPartition, start: int, end: int, consumer: Consumer,
                  advanced: Callable[[int], None], *, show_log: bool, task_id: str) -> int:
    consumer.assign([tp], {tp: start})
    store.buffer.forget_cached()  # restore writes below the buffer
    persistent = store.buffer.persistent
    replayed = 0
    last_log = time.monotonic()
    empty_fetches = 0
    try:
        while empty_fetches < EMPTY_FETCHES_BELOW_END:
            batches = await consumer.fetch(FETCH_WAIT)
            if not batches:
                if consumer.position(tp) >= end:
                    break  # one empty fetch at the end confirms it (some brokers under-report ends)
                # Below ``end`` yet nothing came: a network client still connecting, or only
                # transaction markers and aborted records remain. Give it a bounded while.
                empty_fetches += 1
                continue
            empty_fetches = 0
            for batch in batches:
                entries = {key: value for _offset, _ts, key, value, _headers in batch.records}
                persistent.apply(entries, batch.records[-1][0] + 1)
                crash_point("restore.batch")
                replayed += len(batch.records)
                advanced(len(batch.records))
            await asyncio.sleep(0)  # a long restore must not starve the loop (HTTP /ready, heartbeats)
            now = time.monotonic()
            if show_log and now - last_log >= LOG_EVERY:
                log.info("task %s restoring %s: %d of ~%d record(s)", task_id, store.spec.name, replayed,
                         end - start)
                last_log = now
        # The reader's position is past trailing transaction markers: checkpoint it.
        position = consumer.position(tp)
        if position < end:
            log.warning("task %s: restoring store %s stopped at %s[%d] offset %d, below the end %d reported "
                        "by the broker: nothing more could be read there for %.0f s (aborted or open "
                        "transactions?)", task_id, store.spec.name, tp.topic, tp.partition, position, end,
                        EMPTY_FETCHES_BELOW_END * FETCH_WAIT)
        if position > (persistent.changelog_offset() or 0):
            persistent.apply({}, position)
    finally:
        consumer.unassign([tp])
    return replayed


def _wipe(store: OpenStore) -> None:
    store.buffer.forget_cached()
    store.buffer.persistent.reset()


def _progress_bar(task_id: str, total: int, show: Optional[bool]):
    if show is None:
        show = sys.stderr.isatty()
    if not show:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=f"restoring task {task_id}", unit="rec", unit_scale=True, file=sys.stderr)
