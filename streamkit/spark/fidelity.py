"""What a replay cannot reproduce exactly, found before any data is read.

A replay has event time but no wall-clock time: the input is all there, and
nothing waits. Two things in a topology depend on the wall clock:

- processors that schedule ``Punctuation.WALL_CLOCK`` callbacks;
- ``close_idle_windows_after``, which advances an idle task's stream time.

A replay refuses such a topology with a message naming the node, unless the user
accepts the documented difference (``allow_approximate``): wall-clock punctuators
never fire, and windows close by stream time only (so windows still open at the
end of the input stay open, exactly as if the live task had never gone idle).
"""
from __future__ import annotations

from typing import Any, List, Mapping

from ..errors import StreamkitError
from ..processor import Punctuation
from ..runtime.context.collector import RecordCollector
from ..runtime.task.global_tables import GlobalTables
from ..topology import Topology
from ..topology.nodes import WindowAggregationNode


class ReplayRefusedError(StreamkitError):
    """The topology uses something a replay cannot reproduce (and approximation was not allowed)."""


def approximations(app: Any, topology: Topology, partitions: Mapping[str, int]) -> List[str]:
    """One line per node whose replay would differ from a live run, and why."""
    found: List[str] = []
    for name, node in topology.nodes.items():
        if isinstance(node, WindowAggregationNode):
            idle = node.close_idle_after_ms or app.close_idle_windows_after_ms
            if idle is not None:
                found.append(f"node '{name}' ({node.kind}): close_idle_windows_after={idle} ms closes windows "
                             "when the input stays idle by the wall clock; a replay has no idle time, so its "
                             "windows close by stream time only")
    found.extend(_wall_clock_punctuators(app, topology, partitions))
    return found


def _wall_clock_punctuators(app: Any, topology: Topology, partitions: Mapping[str, int]) -> List[str]:
    from .task_runner import ReplayJob, build_task

    job = ReplayJob(app=app, partitions=dict(partitions), _topology=topology)
    tables = GlobalTables(topology, backend="memory", state_dir=None)
    found = []
    for sub in topology.sub_topologies:
        task = build_task(job, sub, 0, RecordCollector(), tables.stores)
        try:
            owners = sorted({s.owner for s in task.context.punctuations.schedules
                             if s.kind is Punctuation.WALL_CLOCK and not s.cancelled})
        finally:
            task.stores.close()
        for owner in owners:
            found.append(f"node '{owner}': schedules a wall-clock punctuation; a replay has no wall clock, "
                         "so it never fires")
    tables.close()
    return found


def check_replayable(app: Any, topology: Topology, partitions: Mapping[str, int], *,
                     allow_approximate: bool) -> List[str]:
    """The approximations the replay will make; raises :class:`ReplayRefusedError` if
    there are any and ``allow_approximate`` is false."""
    found = approximations(app, topology, partitions)
    if found and not allow_approximate:
        raise ReplayRefusedError("cannot replay app '{}' faithfully:\n  {}\n(pass --allow-approximate, or "
                                 "allow_approximate=True, to replay with these differences)".format(
                                     app.id, "\n  ".join(found)))
    return found
