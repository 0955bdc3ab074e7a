"""What every operator compiler uses: the compile environment, the callable type
``Downstream``, fan-out to several children, and user-function errors named by node."""
from __future__ import annotations

from typing import Any, Callable, List, Mapping, Optional

from ...errors import UserFunctionError
from ...topology import Topology
from ..context.task_context import Downstream, TaskContext

__all__ = ["Compiler", "CompileEnv", "Downstream", "fan_out", "forwards_new_values", "new_values_target",
           "user_error"]

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


def forwards_new_values(compiled: Downstream, target: Downstream) -> Downstream:
    """Mark ``compiled`` (a callable taking a table update, ``Change``) as one that only calls
    ``target`` with the update's new value: a table operator feeding it may call ``target``
    with the new value itself and build no ``Change``."""
    compiled.new_values_to = target  # type: ignore[attr-defined]
    return compiled


def new_values_target(downstream: Downstream) -> Optional[Downstream]:
    """What ``downstream`` calls with a table update's new value alone, if it was marked
    by :func:`forwards_new_values` (a ``to_stream``); else None."""
    return getattr(downstream, "new_values_to", None)


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
