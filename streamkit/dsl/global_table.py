"""GlobalTable: a topic fully replicated into every worker, for joins without co-partitioning."""
from __future__ import annotations

from ..serdes import Serde
from .draft import TopologyDraft


class GlobalTable:
    """Every partition of a topic, loaded into a store on each worker before any task
    runs and kept up to date as the topic changes (Kafka Streams' GlobalKTable).

    Join it from a stream with ``stream.join(global_table, key_selector=..., joiner=...)``:
    any key can be looked up on any task, so the stream needs no repartitioning. The
    topic itself is the store's changelog (nothing else is written).
    """

    def __init__(self, draft: TopologyDraft, store: str, topic: str, key_serde: Serde, value_serde: Serde) -> None:
        self._draft = draft
        self.store = store
        self.topic = topic
        self.key_serde = key_serde
        self.value_serde = value_serde

    @property
    def name(self) -> str:
        return self.store

    def __repr__(self) -> str:
        return f"<GlobalTable {self.store!r} of topic {self.topic!r}>"
