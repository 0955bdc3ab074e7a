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

import heapq
import struct
from dataclasses import dataclass
from itertools import islice
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, TYPE_CHECKING, Tuple

import orjson

from ..core.names import task_id as make_task_id
from ..serdes import Json, String
from ..core.partitioner import partition_for_key
from ..windowing.windowed_keys import Windowed

if TYPE_CHECKING:  # the runtime loads only when a worker runs
    from ..runtime.worker.view import WorkerView

QUERYABLE_KINDS = ("key_value", "window", "session")


class QueryError(Exception):
    """A query that cannot be answered as asked: ``status`` is the HTTP status to report;
    ``owner`` the address of the worker that runs the key's task, when known."""

    def __init__(self, status: int, message: str, *, owner: Optional[str] = None) -> None:
        super().__init__(message)
        self.status = status
        self.owner = owner


class Unavailable(QueryError):
    """The answer exists but cannot be given now without risking a stale value."""

    def __init__(self, message: str, retry_after: int = 1, *, owner: Optional[str] = None) -> None:
        super().__init__(503, message, owner=owner)
        self.retry_after = retry_after


@dataclass(frozen=True)
class Located:
    """Where a key of a store lives."""

    store: str
    kind: str
    task: str
    partition: int


def parse_key(text: str, serde: Any) -> Any:
    """A key as written in a URL path segment (percent-decoded): its JSON form
    (``"page-1"``, ``42``, ``{"page": "a"}``). Text that is not JSON is taken as a string
    (``page-1``), and a String-keyed store's key is always a string (``42`` is ``"42"``);
    a string that is itself JSON text is written as a JSON string (``"\\"a\\""``)."""
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


def url_key(key: Any, serde: Any) -> str:
    """The shortest text :func:`parse_key` reads back as ``key``: a string as itself
    unless that would read as something else (or is ``""``, ``.``, ``..``, which are no
    usable path segment), any other key as its JSON."""
    if isinstance(key, str) and key not in ("", ".", "..") and parse_key(key, serde) == key:
        return key
    return key_text(key)


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

    def __init__(self, worker: WorkerView) -> None:
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
        partitions = self._worker.partitions
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
        return Located(store, spec.kind, make_task_id(sub.id, partition), partition)

    def tasks_of(self, store: str) -> List[str]:
        """Every task of the app that holds a part of ``store``."""
        self.spec(store)
        sub = next(s for s in self._topology.sub_topologies if store in s.store_names)
        partitions = self._worker.partitions
        count = max((partitions.get(t, 0) for t in self._topology.source_nodes(sub)), default=0)
        return [make_task_id(sub.id, p) for p in range(count)]

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

    def local_page(self, store: str, prefix: Optional[str], after: Optional[str], limit: int) -> List["Entry"]:
        """The first ``limit`` + 1 entries of ``store`` in this worker's running tasks past
        the cursor ``after`` (see :func:`page_cursor`), merged in store order (see
        :func:`merged_page`): each task's store is read from one seek."""
        spec = self.spec(store)
        sources = {}
        for task_id, state in sorted(self._worker.task_states().items()):
            stores = self._worker.task_stores(task_id) if state == "running" else None
            if stores is not None and store in stores:
                sources[task_id] = stores[store]
        return merged_page(sources, spec.kind, spec.key_serde, prefix_seeks(prefix, spec.kind, spec.key_serde),
                           page_cursor(after, spec.kind, spec.key_serde), limit + 1)


@dataclass(frozen=True)
class Entry:
    """One entry of a store listing; ``order`` is its place in store order (bytes)."""

    order: bytes
    key: Any
    value: Any
    task: str

    def to_json(self) -> Dict[str, Any]:
        return {"key": to_json(self.key), "value": to_json(self.value), "task": self.task}


_LENGTH = struct.Struct(">I")
_TIMES = struct.Struct(">QQ")


KeyFilter = Callable[[Any], bool]


def prefix_seeks(prefix: Optional[str], kind: str, serde: Any) -> List[Tuple[bytes, KeyFilter]]:
    """``?prefix=`` (the start of the keys' URL form: a string key itself, another key
    its JSON) as (byte prefix to seek, check of the key read) pairs, one seek each.
    Seeking needs keys whose bytes are their text: String and Json key serdes; window
    and session stores are filtered as they are read (one empty byte prefix)."""
    if not prefix:
        return [(b"", _any_key)]
    text = prefix
    if kind != "key_value":
        return [(b"", lambda key: _key_form(key.key).startswith(text))]
    if isinstance(serde, String):
        return [(prefix.encode(), _any_key)]
    if isinstance(serde, Json):
        # a string key is written as a JSON string (its escapes are per character, so the
        # escaped prefix is a prefix of the escaped key); any other key as its JSON text
        return [(orjson.dumps(prefix)[:-1], lambda key: isinstance(key, str)),
                (prefix.encode(), lambda key: not isinstance(key, str))]
    raise QueryError(400, f"?prefix= needs keys written as text (String or Json key serde); this store's "
                          f"keys are {type(serde).__name__}")


def _any_key(key: Any) -> bool:
    return True


def _key_form(key: Any) -> str:
    return key if isinstance(key, str) else orjson.dumps(to_json(key)).decode()


def page_cursor(after: Optional[str], kind: str, serde: Any) -> Optional[bytes]:
    """``?after=`` (a key in URL form, as a listing's ``next`` gives it; a window or
    session: ``{"key", "start", "end"}``) as its place in store order."""
    if after is None or after == "":
        return None
    key = parse_key(after, serde)
    try:
        if kind == "key_value":
            return serde.serialize(key)
        if not isinstance(key, dict) or not {"key", "start", "end"} <= set(key):
            raise ValueError('expected {"key": ..., "start": ms, "end": ms}')
        return _windowed_order(kind, serde.serialize(key["key"]), int(key["start"]), int(key["end"]))
    except Exception as exc:  # noqa: BLE001 - any serde failure is the caller's bad cursor
        raise QueryError(400, f"?after={after!r} is not a key of this {kind} store: {exc}") from None


def _windowed_order(kind: str, key_bytes: bytes, start: int, end: int) -> bytes:
    # the stores' own order: by length-prefixed key bytes, then start (windows) or end (sessions)
    times = (start, end) if kind == "window" else (end, start)
    return _LENGTH.pack(len(key_bytes)) + key_bytes + _TIMES.pack(*(max(t, 0) for t in times))


def merged_page(sources: Mapping[str, Any], kind: str, key_serde: Any, seeks: List[Tuple[bytes, KeyFilter]],
                after: Optional[bytes], count: int) -> List[Entry]:
    """The first ``count`` entries past ``after`` (a place in store order, see
    :class:`Entry`) of the stores ``sources`` (task id -> store, each one partition)
    found by ``seeks`` (see :func:`prefix_seeks`), merged in store order. A key-value
    store is read from one seek per (task, seek) and ``count`` steps at most; window and
    session stores are read from their start and skip what lies before ``after``."""
    scans = [_scan(store, task, kind, key_serde, prefix, accept, after)
             for task, store in sorted(sources.items()) for prefix, accept in seeks]
    return list(islice(heapq.merge(*scans, key=lambda entry: entry.order), count))


def _scan(store: Any, task: str, kind: str, key_serde: Any, prefix: bytes, accept: KeyFilter,
          after: Optional[bytes]) -> Iterator[Entry]:
    if kind == "key_value":
        for raw_key, key, value in store.seek(after, exclusive=True, prefix=prefix):
            if accept(key):
                yield Entry(raw_key, key, value, task)
        return
    for windowed, value in store.all():
        if not accept(windowed):
            continue
        order = _windowed_order(kind, key_serde.serialize(windowed.key) or b"", windowed.start, windowed.end)
        if after is None or order > after:
            yield Entry(order, windowed, value, task)


def merge_pages(pages: Iterable[List[Entry]], limit: int, more_elsewhere: bool
                ) -> Tuple[List[Entry], bool]:
    """The first ``limit`` of several workers' pages (each in store order) and whether
    entries follow them (a page was cut, or ``more_elsewhere``)."""
    merged = list(heapq.merge(*pages, key=lambda entry: entry.order))
    return merged[:limit], more_elsewhere or len(merged) > limit
