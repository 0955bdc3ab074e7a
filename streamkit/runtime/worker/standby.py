"""Standby tasks: warm copies of stores of tasks other workers run, kept by tailing their
changelogs, so taking a task over restores only the changelog's tail."""
from __future__ import annotations

import logging
import time
from typing import Dict, FrozenSet, Optional, Set

from ...state.task_stores import OpenStore, TaskStores, open_task_stores
from ...topology import Topology
from ...core.records import TopicPartition
from ...transport.base import Admin, Consumer
from ..task.factory import TaskSettings
from ...core.names import parse_task_id

log = logging.getLogger(__name__)

TAIL_INTERVAL = 0.2  # s between reads of the standbys' changelogs


class StandbyTasks:
    """The standby tasks of one worker and the reader tailing their changelogs."""

    def __init__(self, topology: Topology, settings: TaskSettings, reader: Consumer,
                 admin: Optional[Admin] = None) -> None:
        self._topology = topology
        self._admin = admin
        self._settings = settings
        self.reader = reader
        self._tasks: Dict[str, TaskStores] = {}
        self._by_changelog: Dict[TopicPartition, OpenStore] = {}
        self._next_tail = 0.0

    @property
    def task_ids(self) -> Set[str]:
        return set(self._tasks)

    def stores(self, task_id: str) -> Optional[TaskStores]:
        """The stores of standby ``task_id`` (None when this worker keeps no copy of it)."""
        return self._tasks.get(task_id)

    def keep(self, task_ids: FrozenSet[str]) -> None:
        """Close every standby not in ``task_ids`` (dropped, or promoted to active)."""
        for tid in sorted(set(self._tasks) - set(task_ids)):
            stores = self._tasks.pop(tid)
            tps = [s.changelog for s in stores.open_stores if s.changelog is not None]
            for tp in tps:
                self._by_changelog.pop(tp, None)
            self.reader.unassign(tps)
            stores.close()
            log.info("standby task %s closed", tid)

    async def open(self, task_ids: FrozenSet[str]) -> None:
        """Open stores for new standbys and start tailing their changelogs at their checkpoints."""
        for tid in sorted(set(task_ids) - set(self._tasks)):
            sub_id, partition = parse_task_id(tid)
            sub = self._topology.sub_topologies[sub_id]
            specs = [self._topology.stores[name] for name in sub.store_names]
            stores = open_task_stores(specs, app_id=self._topology.app_id, task_id=tid, partition=partition,
                                      backend=self._settings.store_backend, state_dir=self._settings.state_dir)
            self._tasks[tid] = stores
            for store in stores.open_stores:
                if store.changelog is None:
                    continue
                checkpoint = store.buffer.persistent.changelog_offset()
                if checkpoint is not None and self._admin is not None:
                    tp = store.changelog
                    end = self._admin.partition_offsets(tp.topic, tp.partition).end
                    if checkpoint > end:
                        # Maybe the only intact copy left: keep it as it is, untailed; whoever
                        # runs the task active decides (see state.restore.StateRepairs).
                        log.error("standby task %s: store %s has checkpoint %d past the end %d of its changelog "
                                  "%s[%d] (deleted, recreated or truncated): not keeping it warm and leaving "
                                  "its files untouched; a worker taking the task over with this copy refuses "
                                  "to start it until --reseed-changelog or --reset-store is chosen", tid,
                                  store.spec.name, checkpoint, end, tp.topic, tp.partition)
                        continue
                self._by_changelog[store.changelog] = store
                self.reader.assign([store.changelog], {} if checkpoint is None else {store.changelog: checkpoint})
            log.info("standby task %s opened (stores %s)", tid, ", ".join(sub.store_names) or "none")

    async def tail(self) -> int:
        """Apply whatever the changelogs gained since the last call; return how many records."""
        if not self._by_changelog:
            return 0
        now = time.monotonic()
        if now < self._next_tail:
            return 0
        self._next_tail = now + TAIL_INTERVAL
        applied = 0
        for batch in await self.reader.fetch(0):
            store = self._by_changelog.get(TopicPartition(batch.topic, batch.partition))
            if store is None:
                continue
            entries = {key: value for _offset, _ts, key, value, _headers in batch.records}
            store.buffer.persistent.apply(entries, batch.records[-1][0] + 1)
            store.buffer.forget_cached()  # written below the buffer: a query must not read a stale copy
            applied += len(batch.records)
        return applied

    def close(self) -> None:
        self.keep(frozenset())
