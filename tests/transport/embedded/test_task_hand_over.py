"""Tasks handed over between workers on one embedded directory: a worker that gives
back tasks it had not started yet (a second worker joined while it was starting them)
must free their locks, or nobody runs them while both workers live; and what it gives
back is the joiner's share of the stateful and of the stateless tasks, not simply the
highest task ids (which are all the stateful ones here)."""
from __future__ import annotations

import asyncio
from pathlib import Path
from typing import List

import pytest

import streamkit as sk
from streamkit.runtime.worker.tasks import TaskManager
from streamkit.transport.base import GroupPlan
from streamkit.transport.embedded.transport import EmbeddedMembership, EmbeddedTransport


def _two_sub_topology_app() -> sk.App:
    app = sk.App("hand-over")
    views = app.topic("views", key_serde=sk.serdes.String(), value_serde=sk.serdes.Json(), partitions=3)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        (b.stream(views)
          .group_by(lambda key, value: value["page"], key_serde=sk.serdes.String())
          .count(name="counts")
          .to_stream()
          .to("counts-out"))
    return app


def test_tasks_given_back_before_they_started_are_free_while_the_first_worker_lives(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    transport = EmbeddedTransport(str(tmp_path / "broker"))
    app = _two_sub_topology_app()
    seen: List[List[str]] = []

    async def run() -> None:
        worker = app.worker(transport, until_idle=1.5, state_dir=str(tmp_path / "state"))
        start_task = TaskManager.start
        second: List[EmbeddedMembership] = []

        async def start_then_second_worker_joins(tasks: TaskManager, tid: str) -> None:
            await start_task(tasks, tid)
            if not second:
                stateful = frozenset(t for t in tasks.plan if t.startswith("1_"))  # the count's tasks
                second.append(EmbeddedMembership(transport.broker, app.id,
                                                 GroupPlan(tasks=tasks.plan, stateful=stateful),
                                                 poll_interval=0.01))
                # as a restore would: the first worker looks at its share again before its next start
                await asyncio.sleep(0.3)
        monkeypatch.setattr(TaskManager, "start", start_then_second_worker_joins)

        async def second_worker_polls() -> None:
            while not second:
                await asyncio.sleep(0.01)
            deadline = asyncio.get_running_loop().time() + 5
            while asyncio.get_running_loop().time() < deadline:
                assignment = await second[0].poll()
                if assignment is not None:
                    seen.append(sorted(assignment.active))
                    if len(assignment.active) == 3:
                        break
                await asyncio.sleep(0.02)
            await second[0].aclose()

        await asyncio.gather(worker.run(), second_worker_polls())

    try:
        asyncio.run(run())
    finally:
        transport.close()
    assert seen and len(seen[-1]) == 3, f"the second worker never got the tasks the first gave back: {seen}"
    stateful = [t for t in seen[-1] if t.startswith("1_")]
    assert 1 <= len(stateful) <= 2, f"the joiner got {seen[-1]}: not its share of the 3 stateful tasks"
