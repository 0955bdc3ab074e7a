"""The timed window, measured inside the framework's own process.

Every framework is timed the same way: from the moment its consumer handed out the
first input records (process start, group join and start-up are not timed) to the
completion of the first commit that *started* after every input record had been
handed out. Each framework commits only after its outputs were acknowledged, so the
window covers consume, process, produce and commit of all N events.

A framework module reports to the probe through three calls: ``fetched(n)`` when its
consumer hands out ``n`` input records, ``commit_started()`` before a commit and
``commit_finished(token)`` after it. A framework sets ``on_all_fetched`` to its graceful
stop (finish the records in hand, commit, leave the group) where it has one, so that the
window ends with that final commit rather than at the next periodic one; ``on_done`` is
called once the covering commit completed.
"""
from __future__ import annotations

import functools
import time
from typing import Any, Callable, List, Optional


class Probe:
    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.fetched_records = 0
        self.first_input: Optional[float] = None
        self.done: Optional[float] = None
        self.cpu: List[float] = []  # process CPU seconds at first_input and at done
        self.on_all_fetched: Callable[[], None] = lambda: None
        self.on_done: Callable[[], None] = lambda: None
        self.external: Optional[dict] = None

    @property
    def all_fetched(self) -> bool:
        return self.fetched_records >= self.expected

    def fetched(self, n: int) -> None:
        if not n:
            return
        if self.first_input is None:
            self.first_input = time.perf_counter()
            self.cpu.append(time.process_time())
        was_all = self.all_fetched
        self.fetched_records += n
        if self.all_fetched and not was_all:
            self.on_all_fetched()

    def commit_started(self) -> bool:
        """The token to pass to :meth:`commit_finished`: whether this commit covers every input record."""
        return self.all_fetched

    def commit_finished(self, covers_all: bool) -> None:
        if covers_all and self.done is None:
            self.done = time.perf_counter()
            self.cpu.append(time.process_time())
            self.on_done()

    def measured_elsewhere(self, figures: dict) -> None:
        """Figures a framework measured in a process of its own (Kafka Streams' JVM), the same
        window the same way; :meth:`figures` returns them as they are."""
        self.external = dict(figures)

    def figures(self, process_started: float) -> dict:
        if self.external is not None:
            return self.external
        if self.first_input is None or self.done is None:
            raise RuntimeError(f"handed out {self.fetched_records:,} of {self.expected:,} input records "
                               "and no commit covered them all: no complete window")
        return {"seconds": self.done - self.first_input, "startup_seconds": self.first_input - process_started,
                "cpu_seconds": self.cpu[1] - self.cpu[0], "records": self.fetched_records,
                "peak_rss_mib": peak_rss_mib()}

    # -- wrapping helpers for the framework modules ------------------------------------------
    def wrap_async_commit(self, cls: type, name: str) -> None:
        """Time the coroutine method ``cls.name`` as a commit."""
        original = getattr(cls, name)
        probe = self

        @functools.wraps(original)
        async def timed(*args: Any, **kwargs: Any) -> Any:
            token = probe.commit_started()
            result = await original(*args, **kwargs)
            probe.commit_finished(token)
            return result

        setattr(cls, name, timed)

    def wrap_sync_commit(self, cls: type, name: str) -> None:
        """Time the plain method ``cls.name`` as a commit."""
        original = getattr(cls, name)
        probe = self

        @functools.wraps(original)
        def timed(*args: Any, **kwargs: Any) -> Any:
            token = probe.commit_started()
            result = original(*args, **kwargs)
            probe.commit_finished(token)
            return result

        setattr(cls, name, timed)

    def count_aiokafka_fetches(self, topic: str) -> None:
        """Count the records of ``topic`` that aiokafka's ``getmany`` and ``getone`` hand out
        (streamkit, faust and the raw loop all consume through aiokafka)."""
        from aiokafka import AIOKafkaConsumer

        probe, getmany, getone = self, AIOKafkaConsumer.getmany, AIOKafkaConsumer.getone

        @functools.wraps(getmany)
        async def timed_getmany(consumer: Any, *partitions: Any, **kwargs: Any) -> dict:
            data = await getmany(consumer, *partitions, **kwargs)
            probe.fetched(sum(len(records) for tp, records in data.items() if tp.topic == topic))
            return data

        @functools.wraps(getone)
        async def timed_getone(consumer: Any, *partitions: Any) -> Any:
            record = await getone(consumer, *partitions)
            if record.topic == topic:
                probe.fetched(1)
            return record

        AIOKafkaConsumer.getmany = timed_getmany  # type: ignore[method-assign]
        AIOKafkaConsumer.getone = timed_getone  # type: ignore[method-assign]


def peak_rss_mib() -> float:
    """This process's peak RSS (VmHWM; not ru_maxrss, which Linux carries over exec)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc/self/status: peak RSS needs Linux")
