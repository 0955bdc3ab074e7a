"""The Processor API: plain functions with access to stores, forwarding and timers.

>>> import streamkit as sk
>>> app = sk.App("doc-processor")
>>> @app.processor(stores=[sk.stores.key_value("totals")])
... def running_total(ctx, key, value):
...     totals = ctx.store("totals")
...     total = (totals.get(key) or 0) + value
...     totals.put(key, total)
...     ctx.forward(key, total)
>>> running_total.store_names
('totals',)
"""
from __future__ import annotations

import abc
import ast
import enum
import inspect
import logging
import textwrap
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Callable, Optional, Sequence, Tuple

from .errors import TopologyError
from .stores import KeyValueStore, StoreSpec

__all__ = ["Punctuation", "ProcessorContext", "ProcessorDefinition", "Cancellable"]

log = logging.getLogger(__name__)


class Punctuation(enum.Enum):
    """What drives a scheduled callback."""

    STREAM_TIME = "stream_time"
    """Fires as the task's stream time (largest processed timestamp) advances."""
    WALL_CLOCK = "wall_clock"
    """Fires by the system clock (the test driver's clock in tests)."""


class Cancellable(abc.ABC):
    """Returned by :meth:`ProcessorContext.schedule`."""

    @abc.abstractmethod
    def cancel(self) -> None: ...


class ProcessorContext(abc.ABC):
    """What a processor function sees of its task and the record being processed."""

    @property
    @abc.abstractmethod
    def timestamp(self) -> int:
        """Timestamp (ms) of the record being processed, or of the punctuation."""

    @property
    @abc.abstractmethod
    def topic(self) -> Optional[str]:
        """Source topic of the current record (None inside a punctuation)."""

    @property
    @abc.abstractmethod
    def partition(self) -> int:
        """The task's partition."""

    @property
    @abc.abstractmethod
    def offset(self) -> Optional[int]:
        """Offset of the current record in its source topic (None inside a punctuation)."""

    @property
    @abc.abstractmethod
    def headers(self) -> Optional[Tuple[Tuple[str, bytes], ...]]:
        """Headers of the current record."""

    @property
    @abc.abstractmethod
    def stream_time(self) -> int:
        """The largest timestamp the task has processed (-1 before the first record)."""

    @property
    @abc.abstractmethod
    def task_id(self) -> str:
        """``<sub-topology>_<partition>``."""

    @abc.abstractmethod
    def store(self, name: str) -> KeyValueStore:
        """A store this processor declared in ``@app.processor(stores=[...])``."""

    @abc.abstractmethod
    def forward(self, key: Any, value: Any, *, to: Optional[str] = None,
                timestamp: Optional[int] = None) -> None:
        """Send a record downstream: to every child, or only to the child named ``to``."""

    @abc.abstractmethod
    def schedule(self, interval: timedelta, punctuation: Punctuation,
                 callback: Callable[[int], None]) -> Cancellable:
        """Call ``callback(timestamp_ms)`` every ``interval`` of stream or wall-clock time.

        Scheduling the same callback function again (e.g. from every call of the
        processor) keeps the existing schedule.
        """


@dataclass(frozen=True)
class ProcessorDefinition:
    """A function registered with ``@app.processor``; use it as ``stream.process(defn)``."""

    fn: Callable[[ProcessorContext, Any, Any], None]
    stores: Tuple[StoreSpec, ...] = ()
    name: Optional[str] = None
    init: Optional[Callable[[ProcessorContext], None]] = None

    @property
    def store_names(self) -> Tuple[str, ...]:
        return tuple(spec.name for spec in self.stores)

    @property
    def display_name(self) -> str:
        return self.name or getattr(self.fn, "__name__", "processor")

    def __call__(self, ctx: ProcessorContext, key: Any, value: Any) -> None:
        self.fn(ctx, key, value)


def define_processor(fn: Callable, stores: Sequence[StoreSpec], name: Optional[str],
                     init: Optional[Callable[[ProcessorContext], None]]) -> ProcessorDefinition:
    """Validate and wrap a processor function (used by ``App.processor``)."""
    if not callable(fn):
        raise TopologyError(f"@app.processor decorates a function, got {fn!r}")
    for spec in stores:
        if not isinstance(spec, StoreSpec):
            raise TopologyError(
                f"processor '{getattr(fn, '__name__', fn)}': stores= takes sk.stores.key_value(...) "
                f"declarations, got {spec!r}")
    definition = ProcessorDefinition(fn, tuple(stores), name, init)
    declared = set(definition.store_names)
    for used in stores_named_in_source(fn) | (stores_named_in_source(init) if init else set()):
        if used not in declared:
            raise TopologyError(
                f"processor '{definition.display_name}' uses store '{used}' but does not declare it: "
                f"add sk.stores.key_value({used!r}) to @app.processor(stores=[...])")
    return definition


def stores_named_in_source(fn: Callable) -> set:
    """Store names a function passes as literals to ``<x>.store("name")``.

    Best effort (the source may be unavailable); the runtime checks every call too.
    """
    try:
        source = textwrap.dedent(inspect.getsource(fn))
        tree = ast.parse(source)
    except (OSError, TypeError, SyntaxError):
        return set()
    names = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and node.func.attr == "store" and node.args
                and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
            names.add(node.args[0].value)
    return names
