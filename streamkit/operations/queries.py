"""Interactive queries: read the state a running app computed, from any of its workers.

A key lives in one task: the task of its store's sub-topology whose partition Kafka's
default partitioner gives the key's bytes, serialized as the sub-topology's input topic
serializes keys, over that topic's partition count (Kafka Streams'
``queryMetadataForKey``). The worker running that task answers from its store; any
other worker forwards the query to it over HTTP (each worker advertises its address to
the group). What is answered:

- a key-value store: the key's value;
- a window store: the key's windows whose start lies in ``[from, to]`` (epoch ms);
- a session store: the key's sessions.

Never a stale value without saying so: while the task is restoring, or the worker is
between a rebalance's revocation and its new assignment, or nobody is known to run the
task, the answer is :class:`Unavailable` (HTTP 503 with ``Retry-After``). With
``allow_standby`` a worker keeping a standby copy answers from it, and says so.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Iterator, List, Optional, Tuple

import orjson

from ..serdes import String
from ..transport.partitioner import partition_for_key
from ..windowing.windowed_keys import Windowed

QUERYABLE_KINDS = ("key_value", "window", "session")


class QueryError(Exception):
    """A query that cannot be answered as asked: ``status`` is the HTTP status to report."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class Unavailable(QueryError):
    """The answer exists but cannot be given now without risking a stale value."""

    def __init__(self, message: str, retry_after: int = 1) -> None:
        super().__init__(503, message)
        self.retry_after = retry_after


@dataclass(frozen=True)
class Located:
    """Where a key of a store lives."""

    store: str
    kind: str
    task: str
    partition: int


def parse_key(text: str, serde: Any) -> Any:
    """A key as written in a URL: its JSON form (``"page-1"``, ``42``, ``{"a": 1}``).
    Text that is not JSON is taken as a string (``page-1``), and a String-keyed store's
    key is always a string (``42`` is ``"42"``)."""
    try:
        value = orjson.loads(text)
    except orjson.JSONDecodeError:
        return text
    if isinstance(serde, String) and not isinstance(value, str):
        return text
    return value


def key_text(key: Any) -> str:
    """A key's URL form (its JSON), read back by :func:`parse_key`."""
    return orjson.dumps(to_json(key)).decode()


def to_json(value: Any) -> Any:
    """A store value or key as JSON-ready data (a window as ``{"key", "start", "end"}``)."""
    if isinstance(value, Windowed):
        return {"key": to_json(value.key), "start": value.start, "end": value.end}
    try:
        return orjson.loads(orjson.dumps(value))
    except TypeError:
        return repr(value)


class StoreQueries:
    """Answers queries on ``worker``'s app from its local tasks (see the module docstring)."""

    def __init__(self, worker: Any) -> None:
        self._worker = worker
        self._topology = worker.topology

    def spec(self, store: str) -> Any:
        spec = self._topology.stores.get(store)
        if spec is None:
            names = ", ".join(sorted(n for n, s in self._topology.stores.items() if s.kind in QUERYABLE_KINDS))
            raise QueryError(404, f"app {self._worker.app_id} has no store '{store}' (queryable: {names or 'none'})")
        if spec.kind not in QUERYABLE_KINDS:
            raise QueryError(400, f"store '{store}' is a {spec.kind} store: not queryable")
        return spec

    def locate(self, store: str, key: Any) -> Located:
        """The task holding ``key`` of ``store``."""
        spec = self.spec(store)
        sub = next(s for s in self._topology.sub_topologies if store in s.store_names)
        sources = sorted(self._topology.source_nodes(sub))
        partitions = getattr(self._worker, "partitions", None)
        if not partitions:
            raise Unavailable("the worker is starting: its topics are not resolved yet")
        count = max(partitions[topic] for topic in sources)
        try:
            data = self._topology.topics[sources[0]].key_serde.serialize(key)
        except Exception as exc:  # noqa: BLE001 - any serde failure is the caller's bad key
            raise QueryError(400, f"key {key!r} does not serialize for store '{store}': {exc}") from None
        if data is None:
            raise QueryError(400, f"key {key!r} serializes to no bytes: it has no partition")
        partition = partition_for_key(data, count)
        return Located(store, spec.kind, f"{sub.id}_{partition}", partition)

    def tasks_of(self, store: str) -> List[str]:
        """Every task of the app that holds a part of ``store``."""
        self.spec(store)
        sub = next(s for s in self._topology.sub_topologies if store in s.store_names)
        partitions = getattr(self._worker, "partitions", None) or {}
        count = max((partitions.get(t, 0) for t in self._topology.source_nodes(sub)), default=0)
        return [f"{sub.id}_{p}" for p in range(count)]

    def local_store(self, located: Located, allow_standby: bool) -> Tuple[Optional[Any], bool]:
        """(the store, from a standby?) when this worker can answer for ``located``'s task
        now; (None, False) when another worker must. Raises Unavailable when this worker
        holds the task but cannot answer yet."""
        worker = self._worker
        state = worker.task_states().get(located.task)
        if state in ("running", "restoring"):
            if worker.rebalancing:
                raise Unavailable(f"task {located.task} is being reassigned (the group is rebalancing)")
            if state == "restoring":
                raise Unavailable(f"task {located.task} is restoring its stores")
            return worker.task_stores(located.task)[located.store], False
        if state == "standby" and allow_standby:
            stores = worker.task_stores(located.task, standby=True)
            if stores is not None and located.store in stores:
                return stores[located.store], True
        return None, False

    def read(self, store: Any, located: Located, key: Any, time_from: Optional[int],
             time_to: Optional[int]) -> Tuple[Any, bool]:
        """(the JSON-ready answer, found?) for ``key`` in ``store``."""
        if located.kind == "key_value":
            value = store.get(key)
            return to_json(value), value is not None
        if located.kind == "window":
            lo = 0 if time_from is None else time_from
            hi = (1 << 62) if time_to is None else time_to
            windows = [{"start": w.start, "end": w.end, "value": to_json(v)} for w, v in store.fetch(key, lo, hi)]
            return windows, bool(windows)
        sessions = [{"start": w.start, "end": w.end, "value": to_json(v)} for w, v in store.fetch(key)
                    if (time_from is None or w.end >= time_from) and (time_to is None or w.start <= time_to)]
        return sessions, bool(sessions)

    def local_entries(self, store: str, prefix: Optional[str], after: Optional[str]) -> Iterator[Dict[str, Any]]:
        """Entries of ``store`` in this worker's running tasks whose key's JSON text starts
        with ``prefix`` (a string key: the string itself) and sorts after ``after``."""
        spec = self.spec(store)
        for task_id, state in sorted(self._worker.task_states().items()):
            if state != "running":
                continue
            stores = self._worker.task_stores(task_id)
            if stores is None or store not in stores:
                continue
            for key, value in _entries(stores[store], spec.kind):
                text = key if isinstance(key, str) else orjson.dumps(to_json(key)).decode()
                if prefix is not None and not text.startswith(prefix):
                    continue
                if after is not None and text <= after:
                    continue
                yield {"key": to_json(key), "value": to_json(value), "task": task_id, "_sort": text}


def _entries(store: Any, kind: str) -> Iterator[Tuple[Any, Any]]:
    if kind == "key_value":
        yield from store.range()
    else:
        yield from store.all()
