"""The names streamkit derives, each rule written once: internal topics and task ids.

- A store's changelog topic is ``<app-id>-<store>-changelog``.
- A repartition topic is ``<app-id>-<suffix>``, where the suffix is the repartition
  node's name, with ``-repartition`` appended unless the name already ends with
  ``repartition`` (so ``.repartition(name="by-id-repartition")`` is not doubled, and an
  automatic name ``<parent>.repartition`` is kept as it is).
- A task id is ``<sub-topology>_<partition>`` (Kafka Streams' ``TaskId`` spelling).

Every internal topic is one of the two kinds, told apart by these suffixes alone.
"""
from __future__ import annotations

from typing import Tuple

CHANGELOG_SUFFIX = "-changelog"
"""Every changelog topic name ends so."""
REPARTITION_SUFFIX = "repartition"
"""Every repartition topic name ends so (usually as ``-repartition``)."""


def changelog_topic(app_id: str, store: str) -> str:
    """The changelog topic of ``store`` in app ``app_id``.

    >>> changelog_topic("shop", "counts")
    'shop-counts-changelog'
    """
    return f"{app_id}-{store}{CHANGELOG_SUFFIX}"


def repartition_suffix(node: str) -> str:
    """The topic suffix of the repartition node ``node`` (the part after ``<app-id>-``).

    >>> repartition_suffix("by-id"), repartition_suffix("orders.repartition")
    ('by-id-repartition', 'orders.repartition')
    """
    return node if node.endswith(REPARTITION_SUFFIX) else f"{node}-{REPARTITION_SUFFIX}"


def internal_topic(app_id: str, suffix: str) -> str:
    """The internal topic ``<app-id>-<suffix>`` of app ``app_id``."""
    return f"{app_id}-{suffix}"


def is_changelog_topic(topic: str) -> bool:
    """Whether the internal topic ``topic`` is a changelog (else it is a repartition topic)."""
    return topic.endswith(CHANGELOG_SUFFIX)


def is_repartition_topic(topic: str) -> bool:
    """Whether the internal topic ``topic`` is a repartition topic."""
    return topic.endswith(REPARTITION_SUFFIX)


def task_id(sub_topology: int, partition: int) -> str:
    """The id of the task running ``partition`` of ``sub_topology``.

    >>> task_id(1, 2)
    '1_2'
    """
    return f"{sub_topology}_{partition}"


def parse_task_id(task: str) -> Tuple[int, int]:
    """The (sub-topology, partition) of a task id; sorting by it orders tasks numerically.

    >>> parse_task_id("1_2")
    (1, 2)
    """
    sub, _, partition = task.partition("_")
    return int(sub), int(partition)
