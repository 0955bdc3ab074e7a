"""What every operator compiler uses: the compile environment, the callable type
``Downstream``, fan-out to several children, and user-function errors named by node."""
from __future__ import annotations

from typing import Any, Callable, List, Mapping

from ...errors import UserFunctionError
from ...topology import Topology
from ..context.task_context import Downstream, TaskContext

__all__ = ["Compiler", "CompileEnv", "Downstream", "fan_out", "user_error"]

Compiler = Callable[[Any, Downstream, "CompileEnv"], Downstream]


class CompileEnv:
    """What a node compiler may use: the task context, its compiled children by name,
    and the topology."""

    def __init__(self, task: TaskContext, children: Mapping[str, Downstream], topology: Topology) -> None:
        self.task = task
        self.children = children
        self.topology = topology

    def feeds(self, node: str, kind: type) -> bool:
        """Whether a node of ``kind`` is downstream of ``node`` in the same task."""
        children, nodes = self.topology.children, self.topology.nodes
        pending, seen = list(children[node]), set()
        while pending:
            name = pending.pop()
            if name in seen:
                continue
            seen.add(name)
            if isinstance(nodes[name], kind):
                return True
            pending.extend(children[name])
        return False


def noop(key: Any, value: Any, timestamp: int) -> None:
    """A child that drops what it is given (a branch nothing reads)."""
    return None


def fan_out(targets: List[Downstream]) -> Downstream:
    """One callable that calls every target in order (values are shared, not copied)."""
    if not targets:
        return noop
    if len(targets) == 1:
        return targets[0]

    def fan(key: Any, value: Any, timestamp: int) -> None:
        for target in targets:
            target(key, value, timestamp)
    return fan


def user_error(node: str, exc: Exception) -> UserFunctionError:
    """``exc`` raised by the user function of ``node``, named for the error handlers."""
    return UserFunctionError(node, exc)
