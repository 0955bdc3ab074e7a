"""Restore: replay each store's changelog from its checkpoint before the task runs.

A store's persistent layer records the changelog offset it reflects; restore
reads from there to the end (committed records only), applying each key's last
value per fetched run of records. A store may hold what it replays without
making it durable at once (RocksDB writes a restore of at least
:data:`BULK_RESTORE_RECORDS` records without its write-ahead log); every
:data:`SETTLE_EVERY` seconds and at the end it makes it durable and checkpoints
the offset reached, so a crash during restore resumes from the last such
checkpoint, never from one the store does not hold. A store without a
checkpoint (new, deleted or rebuilt after corruption) replays the whole
changelog.

A store whose checkpoint is past its changelog's end (the changelog was deleted
and recreated, or truncated) holds state the changelog lost: it is never wiped
implicitly. The task refuses to start (:class:`ChangelogBehindCheckpoint`) until
the operator picks a :class:`StateRepairs` way out for the store: reseed the
changelog from the intact local store, or reset the store to the changelog.
"""
from __future__ import annotations

import asyncio
import logging
import sys
import time
from dataclasses import dataclass, field
from typing import Callable, Dict, FrozenSet, List, Optional

from ..errors import StorageError, StreamkitError

from ..faults import crash_point
from ..core.records import TopicPartition
from ..transport.base import Admin, Consumer, Producer
from .bytes_store import BytesStore
from .suppression_buffer import SuppressionBuffer
from .task_stores import OpenStore, TaskStores

log = logging.getLogger(__name__)

LOG_EVERY = 5.0  # seconds between progress lines
FETCH_WAIT = 0.1  # s
BULK_RESTORE_RECORDS = 100_000
"""A store's restore of at least this many records writes them as a store finds fastest
(RocksDB: without its write-ahead log, then a flush); a smaller one writes each fetched run
durably with its checkpoint, as processing does (the flush would cost more than it saves)."""
SETTLE_EVERY = 10.0
"""Seconds between durable checkpoints during a bulk restore (a crash redoes at most this
much of it)."""
PAUSE_BETWEEN_CHUNKS = 0.0
"""Seconds a restore yields to the event loop after each applied chunk (0: a bare yield, so
/ready, heartbeats and queries still run). Tests raise it to watch a restore in progress."""
EMPTY_FETCHES_BELOW_END = 20
"""Empty fetches below the reported end (2 s) after which the end is read again from the broker."""
STALLED_RESTORE_TIMEOUT = 300.0
"""Seconds a restore may find nothing to read below its changelog's end (a leader moving, a
broker away) before it fails, naming the store and the offsets; as Kafka Streams'
``task.timeout.ms`` (5 minutes). A task never starts on a store restored only in part."""
RESEED_PENDING = 2 ** 62
"""Checkpoint a store holds while its changelog is being reseeded: far past any end, so an
interrupted reseed is refused again at the next start instead of looking complete."""
RESEED_BATCH = 1000  # records per send while reseeding


@dataclass(frozen=True)
class StateRepairs:
    """What the operator chose for stores whose checkpoint is past their changelog's end
    (by store name; ``streamkit worker --reseed-changelog/--reset-store``).

    ``reseed``: write the local store's contents into the changelog and checkpoint its new
    end (the state survives). ``reset``: discard the local store and rebuild it from the
    changelog as it is (what the changelog lost is lost). Either applies only to a store
    whose checkpoint is past its changelog's end; otherwise the store restores as usual."""

    reseed: FrozenSet[str] = field(default_factory=frozenset)
    reset: FrozenSet[str] = field(default_factory=frozenset)

    def __post_init__(self) -> None:
        both = self.reseed & self.reset
        if both:
            raise StreamkitError(f"store(s) {', '.join(sorted(both))}: choose either reseeding the changelog "
                                 "or resetting the store, not both")


class ChangelogBehindCheckpoint(StreamkitError):
    """A store's checkpoint is past its changelog's end and no repair was chosen for it."""


def _refusal(task_id: str, store: OpenStore, tp: TopicPartition, checkpoint: int, end: int) -> str:
    name = store.spec.name
    if checkpoint == RESEED_PENDING:
        found = (f"store {name} of task {task_id}: reseeding its changelog {tp.topic}[{tp.partition}] was "
                 f"interrupted (the changelog ends at {end}, possibly with part of the store)")
    else:
        found = (f"store {name} of task {task_id}: its checkpoint (changelog offset applied) is {checkpoint} but "
                 f"its changelog {tp.topic}[{tp.partition}] ends at {end}: the changelog was deleted, recreated "
                 "or truncated, and restoring from it would lose the store's state")
    return (f"{found}. The local store is intact and was left untouched. Restart the worker with "
            f"--reseed-changelog {name} to write the local store back into the changelog (keeps the state), "
            f"or with --reset-store {name} to rebuild the store from the changelog as it is (discards what "
            "the changelog lost)")


async def restore_task_stores(task_id: str, stores: TaskStores, consumer: Consumer, admin: Admin,
                              *, show_progress: Optional[bool] = None,
                              progress: Optional[Callable[[int, int], None]] = None,
                              repairs: StateRepairs = StateRepairs(),
                              open_producer: Optional[Callable[[], Producer]] = None) -> Dict[str, int]:
    """Bring every changelogged store of a task up to the end of its changelog; return the
    records replayed per store. ``progress(restored, total)`` is called after each batch
    (``total``: the records between the checkpoints and the changelogs' ends).

    Raises :class:`ChangelogBehindCheckpoint`, before touching any store, when a store's
    checkpoint is past its changelog's end and ``repairs`` names no way out for it (a
    reseed writes through a producer from ``open_producer``)."""
    report: Dict[str, int] = {}
    todo: List[tuple] = []
    ahead = []
    for store in stores.open_stores:
        if store.changelog is None:
            continue
        tp = store.changelog
        end = admin.partition_offsets(tp.topic, tp.partition).end
        checkpoint = store.buffer.persistent.changelog_offset()
        if checkpoint is not None and checkpoint > end:
            ahead.append((store, tp, checkpoint, end))
    refused = [_refusal(task_id, store, tp, checkpoint, end) for store, tp, checkpoint, end in ahead
               if store.spec.name not in repairs.reseed | repairs.reset]
    if refused:
        raise ChangelogBehindCheckpoint("; ".join(refused))
    for store, tp, checkpoint, end in ahead:
        if store.spec.name in repairs.reseed:
            if open_producer is None:
                raise StreamkitError(f"store {store.spec.name} of task {task_id}: no producer to reseed "
                                     f"{tp.topic}[{tp.partition}] with")
            await _reseed(task_id, store, tp, checkpoint, admin, open_producer)
        else:
            _reset(task_id, store, tp, checkpoint, end)
    for store in stores.open_stores:
        if store.changelog is None:
            continue
        tp = store.changelog
        offsets = admin.partition_offsets(tp.topic, tp.partition)
        checkpoint = store.buffer.persistent.changelog_offset()
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
                                                show_log=bar is None, task_id=task_id, admin=admin)
    if bar is not None:
        bar.close()
    elapsed = max(time.monotonic() - started, 1e-9)
    restored = sum(report.values())
    log.info("task %s restored %d changelog record(s) of %d store(s) in %.2f s (%.0f records/s)",
             task_id, restored, len(todo), elapsed, restored / elapsed)
    return report


END_READ_TIMEOUT = 5.0
"""Seconds to wait for the broker to report a changelog's end again during a stalled restore."""


async def reread_end(admin: Admin, tp: TopicPartition, end: int) -> int:
    """The changelog partition's end as the broker reports it now (``end`` if it cannot say
    within END_READ_TIMEOUT); read in a thread, so an unreachable broker never blocks the loop."""
    loop = asyncio.get_running_loop()
    try:
        offsets = await asyncio.wait_for(
            loop.run_in_executor(None, admin.partition_offsets, tp.topic, tp.partition), END_READ_TIMEOUT)
        return offsets.end
    except Exception as exc:  # noqa: BLE001 - a broker away is what the caller is waiting out
        log.debug("could not read the end of %s[%d] again: %s", tp.topic, tp.partition, exc or type(exc).__name__)
        return end


def _stalled(task_id: str, store: OpenStore, tp: TopicPartition, position: int, end: int, waited: float) -> None:
    """Log a restore that finds nothing below its end; raise once it waited too long."""
    where = (f"task {task_id}: restoring store {store.spec.name} from {tp.topic}[{tp.partition}]: nothing could "
             f"be read at offset {position}, below the end {end} the broker reports")
    if waited >= STALLED_RESTORE_TIMEOUT:
        raise StreamkitError(f"{where}, for {waited:.0f} s: the task does not start on a store restored in part "
                             f"(its checkpoint stays at the last settled offset; a restart resumes from there)")
    log.warning("%s, for %.0f s: waiting (gives up after %.0f s)", where, waited, STALLED_RESTORE_TIMEOUT)


async def _replay(store: OpenStore, tp: TopicPartition, start: int, end: int, consumer: Consumer,
                  advanced: Callable[[int], None], *, show_log: bool, task_id: str, admin: Admin) -> int:
    consumer.assign([tp], {tp: start})
    store.buffer.forget_cached()  # restore writes below the buffer
    persistent = store.buffer.persistent
    write = persistent.apply_restored if end - start >= BULK_RESTORE_RECORDS else persistent.apply
    replayed = 0
    last_log = last_settled = time.monotonic()
    empty_fetches = 0
    stalled_since: Optional[float] = None
    try:
        while True:
            at_end = consumer.position(tp) >= end
            # At the end one fetch confirms it (some brokers under-report ends): without waiting.
            chunks = await consumer.fetch_changes(0 if at_end else FETCH_WAIT)
            if not chunks:
                if at_end or consumer.position(tp) >= end:
                    break
                # Below ``end`` yet nothing came: a client still connecting, a leader moving. Read
                # the end again now and then; never stop below it (the task would start on a part
                # of its state), but fail once nothing has come for STALLED_RESTORE_TIMEOUT.
                empty_fetches += 1
                if empty_fetches >= EMPTY_FETCHES_BELOW_END:
                    empty_fetches = 0
                    end = await reread_end(admin, tp, end)
                    now = time.monotonic()
                    stalled_since = now if stalled_since is None else stalled_since
                    position = consumer.position(tp)
                    if position < end:
                        _stalled(task_id, store, tp, position, end, now - stalled_since)
                continue
            empty_fetches = 0
            stalled_since = None
            for chunk in chunks:
                try:
                    write(chunk.latest, chunk.last_offset + 1)
                except StorageError as exc:
                    raise exc.within(
                        f"state store '{store.spec.name}' of task {task_id}, restoring changelog topic "
                        f"'{tp.topic}' partition {tp.partition} offsets {chunk.first_offset} to "
                        f"{chunk.last_offset} (restored up to {chunk.first_offset})", "restore") from exc.cause
                crash_point("restore.batch")
                replayed += chunk.records
                advanced(chunk.records)
            now = time.monotonic()
            if now - last_settled >= SETTLE_EVERY:
                _settle(persistent, store, tp, task_id)
                last_settled = now
            await asyncio.sleep(PAUSE_BETWEEN_CHUNKS)  # a long restore must not starve the loop (/ready, heartbeats)
            if show_log and now - last_log >= LOG_EVERY:
                log.info("task %s restoring %s: %d of ~%d record(s)", task_id, store.spec.name, replayed,
                         end - start)
                last_log = now
        _settle(persistent, store, tp, task_id)
        # The reader's position is past trailing transaction markers: checkpoint it.
        position = consumer.position(tp)
        if position > (persistent.changelog_offset() or 0):
            persistent.apply({}, position)
    finally:
        consumer.unassign([tp])
    return replayed


def _settle(persistent: BytesStore, store: OpenStore, tp: TopicPartition, task_id: str) -> None:
    """Make what restore wrote so far durable, with its checkpoint."""
    try:
        persistent.settle_restored()
    except StorageError as exc:
        raise exc.within(f"state store '{store.spec.name}' of task {task_id}, checkpointing its restore from "
                         f"changelog topic '{tp.topic}' partition {tp.partition}", "restore") from exc.cause


async def _reseed(task_id: str, store: OpenStore, tp: TopicPartition, checkpoint: int, admin: Admin,
                  open_producer: Callable[[], Producer]) -> None:
    """Append every entry of the local store to its changelog, then checkpoint the new end."""
    persistent = store.buffer.persistent
    store.buffer.forget_cached()
    if checkpoint != RESEED_PENDING:
        persistent.apply({}, RESEED_PENDING)  # an interrupted reseed must not look complete
    log.warning("store %s of task %s: reseeding its changelog %s[%d] from the local store (its checkpoint %s "
                "was past the changelog's end)", store.spec.name, task_id, tp.topic, tp.partition,
                "unknown: an earlier reseed was interrupted" if checkpoint == RESEED_PENDING else checkpoint)
    producer = open_producer()
    written = 0
    try:
        timestamp = int(time.time() * 1000)
        batch: List[tuple] = []
        for key, value in persistent.range(None, None):
            batch.append((key, value, timestamp, None))
            if len(batch) >= RESEED_BATCH:
                await producer.send([(tp.topic, tp.partition, batch)])
                written += len(batch)
                batch = []
        if batch:
            await producer.send([(tp.topic, tp.partition, batch)])
            written += len(batch)
        await producer.delivered()
        await producer.flush()
    finally:
        await producer.aclose()
    end = admin.partition_offsets(tp.topic, tp.partition).end
    persistent.apply({}, end)
    log.warning("store %s of task %s: reseeded %s[%d] with %d record(s) from the local store; checkpoint now %d",
                store.spec.name, task_id, tp.topic, tp.partition, written, end)


def _reset(task_id: str, store: OpenStore, tp: TopicPartition, checkpoint: int, end: int) -> None:
    """Discard the local store (the operator chose to rebuild it from the changelog as it is)."""
    discarded = sum(1 for _ in store.buffer.persistent.range(None, None))
    log.warning("store %s of task %s: discarding its local state as asked (--reset-store): %d entr%s at "
                "checkpoint %d, past the end %d of its changelog %s[%d]; rebuilding it from the changelog, "
                "which lacks what it lost", store.spec.name, task_id, discarded,
                "y" if discarded == 1 else "ies", checkpoint, end, tp.topic, tp.partition)
    store.buffer.forget_cached()
    store.buffer.persistent.reset()
    if isinstance(store.store, SuppressionBuffer):
        store.store.reset_index()


def _progress_bar(task_id: str, total: int, show: Optional[bool]):
    if show is None:
        show = sys.stderr.isatty()
    if not show:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=f"restoring task {task_id}", unit="rec", unit_scale=True, file=sys.stderr)
