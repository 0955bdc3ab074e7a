"""The topology IR: nodes, the passes that build a physical topology, and describe()."""
from .model import SubTopology, Topology
from .nodes import Change

__all__ = ["Topology", "SubTopology", "Change"]
