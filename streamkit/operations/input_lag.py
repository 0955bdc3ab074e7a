"""Records behind the end of each input partition of a worker's running tasks, read for
/metrics, /status and /history from the HTTP thread (end offsets come from the
transport's admin client, in a thread pool)."""
from __future__ import annotations

import asyncio
import logging
import time
from typing import Dict, Optional, TYPE_CHECKING

from ..core.records import TopicPartition
from .worker_access import read_racing

if TYPE_CHECKING:  # the runtime loads only when a worker runs
    from ..runtime.worker.view import WorkerView

log = logging.getLogger(__name__)

LAG_REFRESH_S = 1.0
"""End offsets are read at most this often (they cost a broker round trip)."""
LAG_READ_TIMEOUT_S = 3.0
"""How long /metrics waits for end offsets before serving the last known lag."""
LAG_HISTORY_REFRESH_S = 5.0
"""When no /status or /metrics reader refreshes the lag, the history re-reads it this often."""


class InputLag:
    """The lag of ``worker``'s input partitions in :attr:`by_partition` (updated in place,
    so readers may hold the dict). Use from the HTTP thread only."""

    def __init__(self, worker: WorkerView) -> None:
        self.worker = worker
        self.by_partition: Dict[TopicPartition, int] = {}
        """Per input partition of the running tasks: records behind the end."""
        self.reading: Optional[asyncio.Future] = None
        """The read of end offsets in flight, if any (cancelled when the HTTP thread stops)."""
        self._read_at = 0.0

    async def refresh(self) -> Dict[TopicPartition, int]:
        """Records behind the end per input partition of the running tasks (re-read from
        the broker at most every LAG_REFRESH_S, unless the tasks' partitions changed since
        the last read; the last known lag when the broker does not answer within
        LAG_READ_TIMEOUT_S). A read in flight is awaited, not repeated."""
        reading = self.reading
        if reading is None or reading.done():
            if time.monotonic() - self._read_at < LAG_REFRESH_S and \
                    set(read_racing(self.worker.input_positions)) == set(self.by_partition):
                return self.by_partition
            self._read_at = time.monotonic()
            reading = self.reading = asyncio.ensure_future(self._read())
        await asyncio.shield(reading)
        return self.by_partition

    def refresh_in_background(self) -> None:
        """Start a read when none ran for LAG_HISTORY_REFRESH_S and none is in flight,
        without waiting for it (the history samples whatever lag is known)."""
        if time.monotonic() - self._read_at >= LAG_HISTORY_REFRESH_S and (
                self.reading is None or self.reading.done()):
            self._read_at = time.monotonic()
            self.reading = asyncio.ensure_future(self._read())

    async def _read(self) -> None:
        positions = read_racing(self.worker.input_positions)
        admin = self.worker.transport.admin
        loop = asyncio.get_running_loop()

        def behind() -> Dict[TopicPartition, int]:
            out = {}
            for tp, position in positions.items():
                offsets = admin.partition_offsets(tp.topic, tp.partition)
                out[tp] = max(offsets.end - (offsets.start if position is None else max(position, offsets.start)), 0)
            return out

        try:
            lag = await asyncio.wait_for(loop.run_in_executor(None, behind), LAG_READ_TIMEOUT_S)
        except Exception as exc:  # noqa: BLE001 - reported as missing lag, logged
            log.warning("could not read end offsets for the lag metrics: %s", exc or type(exc).__name__)
            return
        self.by_partition.clear()
        self.by_partition.update(lag)
