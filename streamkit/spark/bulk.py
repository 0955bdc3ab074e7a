"""Bulk plans: sub-topologies compiled to Spark operators instead of a per-task loop."""
from __future__ import annotations

from typing import Any, Optional

from ..topology import Topology
from ..topology.model import SubTopology


def bulk_plan(topology: Topology, sub: SubTopology) -> Optional[Any]:
    """A bulk plan for ``sub``, or None when it runs through the task runner."""
    return None
