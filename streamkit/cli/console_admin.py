"""The admin operations of the console tools on either broker: the Kafka transport's
admin has them as methods; the embedded broker's are functions of
:mod:`streamkit.transport.embedded.admin`."""
from __future__ import annotations

from typing import Dict, List, Mapping, Optional, Sequence

from ..transport.base import Transport


def _embedded_broker(transport: Transport):
    """The embedded broker behind ``transport``, None for Kafka."""
    from ..transport.embedded.transport import EmbeddedTransport

    return transport.broker if isinstance(transport, EmbeddedTransport) else None


def alter_topic_config(transport: Transport, name: str, set_configs: Mapping[str, str],
                       delete_configs: Sequence[str]) -> Dict[str, str]:
    """Set and remove single configs of topic ``name``; its configs after."""
    broker = _embedded_broker(transport)
    if broker is not None:
        from ..transport.embedded.admin import alter_topic_config as alter

        return alter(broker, name, set_configs, delete_configs)
    return transport.admin.alter_topic_config(name, set_configs, delete_configs)  # type: ignore[attr-defined]


def add_partitions(transport: Transport, name: str, partitions: int) -> int:
    """Grow topic ``name`` to ``partitions`` partitions (never shrinks); its count after."""
    broker = _embedded_broker(transport)
    if broker is not None:
        from ..transport.embedded.admin import add_partitions as grow

        return grow(broker, name, partitions).partitions
    return transport.admin.add_partitions(name, partitions).partitions  # type: ignore[attr-defined]


def offset_for_time(transport: Transport, topic: str, partition: int, timestamp_ms: int) -> Optional[int]:
    """The earliest offset whose record's timestamp is >= ``timestamp_ms``, None if none."""
    broker = _embedded_broker(transport)
    if broker is not None:
        from ..transport.embedded.admin import offset_for_time as find

        return find(broker, topic, partition, timestamp_ms)
    return transport.admin.offset_for_time(topic, partition, timestamp_ms)  # type: ignore[attr-defined]


def delete_group(transport: Transport, group: str) -> None:
    """Delete ``group`` and its committed offsets (refused by the broker while it has live members)."""
    transport.admin.delete_group(group)  # type: ignore[attr-defined]


def live_consumer_groups(transport: Transport, topic: str) -> Dict[str, List[str]]:
    """``{group: live member ids}`` of the groups that committed offsets on ``topic`` and
    have live members now (members whose broker cannot tell are left out)."""
    found = {}
    for group in transport.admin.list_groups():
        if not any(tp.topic == topic for tp in transport.admin.committed_offsets(group)):
            continue
        members = transport.admin.group_members(group)
        if members:
            found[group] = members
    return found

