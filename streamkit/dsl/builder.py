"""StreamsBuilder: where a topology function starts its streams and tables."""
from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, Optional, Union

from ..errors import TopologyError
from ..serdes import Json, Void
from ..sources.base import Source
from ..stores import StoreSpec
from ..topics import TopicSpec
from ..topology import nodes as ir
from .draft import TopologyDraft, check_callable
from .building.states import StreamState, TableState
from .global_table import GlobalTable
from .kinds import Stream, Table

TimestampExtractor = Callable[[Any, Any], Union[int, float, datetime]]


class StreamsBuilder:
    """Passed to each ``@app.topology`` function."""

    def __init__(self, draft: TopologyDraft) -> None:
        self._draft = draft

    def stream(self, topic: Union[str, TopicSpec, Source], *, timestamp: Optional[TimestampExtractor] = None,
               name: Optional[str] = None) -> Stream:
        """Records of ``topic`` as a stream. ``timestamp(key, value)`` gives each record's
        event time (epoch ms int, float or datetime); default: the record's own timestamp.

        ``topic`` may also be a source such as ``sk.sources.Files(...)`` or
        ``sk.sources.ParquetArchive(path)``: its records, with JSON keys and values, are
        read as if from a topic ``<app-id>-source-<name>`` (``name`` defaults to the
        source's own), whose offsets the app commits and resumes at."""
        external = None
        if isinstance(topic, Source):
            external = topic
            topic = TopicSpec(f"{self._draft.app_id}-source-{name or external.default_name()}", Json(), Json(),
                              partitions=external.partitions())
        spec = self._draft.resolve_topic(topic)
        node = name or spec.name
        if timestamp is not None:
            check_callable(timestamp, "timestamp extractor", ("key", "value"), node)
        self._draft.add_source(ir.SourceNode(node, (), topic=spec.name, key_serde=spec.key_serde,
                                             value_serde=spec.value_serde, timestamp_extractor=timestamp,
                                             external=external))
        return Stream(StreamState(self._draft, node, keyless=isinstance(spec.key_serde, Void)))

    def table(self, topic: Union[str, TopicSpec], name: Optional[str] = None, *,
              timestamp: Optional[TimestampExtractor] = None) -> Table:
        """``topic`` read as a table: the latest value per key, materialized in a store
        named ``name`` (default: ``<topic>-table``). A ``None`` value deletes the key."""
        spec = self._draft.resolve_topic(topic)
        if isinstance(spec.key_serde, Void):
            raise TopologyError(
                f"table('{spec.name}'): a table needs keys, but the topic's key serde is Void; "
                "declare the topic with a key serde (app.topic(..., key_serde=sk.serdes.String()))")
        table_name = name or f"{spec.name}-table"
        if timestamp is not None:
            check_callable(timestamp, "timestamp extractor", ("key", "value"), table_name)
        source = f"{spec.name}-source" if table_name == spec.name else spec.name
        self._draft.add_source(ir.SourceNode(source, (), topic=spec.name, key_serde=spec.key_serde,
                                             value_serde=spec.value_serde, timestamp_extractor=timestamp))
        self._draft.add_store(StoreSpec(table_name, "key_value", spec.key_serde or Json(),
                                        spec.value_serde or Json(), timestamped=True), table_name)
        self._draft.append(ir.TableSourceNode(table_name, (source,), store=table_name))
        return Table(TableState.of(self._draft, table_name, key_serde=spec.key_serde, value_serde=spec.value_serde))

    def global_table(self, topic: Union[str, TopicSpec], name: Optional[str] = None) -> GlobalTable:
        """``topic`` read as a global table: every partition, on every worker, loaded before
        processing starts and kept up to date (store ``name``, default ``<topic>-global``).
        A ``None`` value deletes the key."""
        spec = self._draft.resolve_topic(topic)
        if isinstance(spec.key_serde, Void):
            raise TopologyError(f"global_table('{spec.name}'): a table needs keys, but the topic's key serde "
                                "is Void; declare the topic with a key serde")
        store = name or f"{spec.name}-global"
        StoreSpec(store)  # validates the name
        self._draft.add_global_table(store, spec.name)
        return GlobalTable(self._draft, store, spec.name, spec.key_serde or Json(), spec.value_serde or Json())
