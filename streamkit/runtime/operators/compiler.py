"""Compiles a sub-topology into plain callables, once per task.

Each node kind has one function ``compile_<kind>(node, downstream, env)`` (in
:mod:`.operators`) that returns ``fn(key, value, timestamp)``; this module is their
registry. The chain is composed leaves first, so processing a record is a sequence
of direct calls with no per-record dispatch on node types. User functions are
wrapped only to name the node in errors.
"""
from __future__ import annotations

from typing import Any, Dict, Tuple

from ...topology import Topology
from ...topology import nodes as ir
from ...topology.model import SubTopology
from ..context.task_context import Downstream, TaskContext
from .base import CompileEnv, Compiler, fan_out, user_error
from .joins import compile_global_table_join, compile_stream_table_join
from .stateless import (compile_external_sink, compile_filter, compile_flat_map, compile_flat_map_values,
                                  compile_map, compile_map_values, compile_passthrough, compile_peek,
                                  compile_process, compile_select_key, compile_sink, compile_source, compile_split)
from .stream_joins import compile_stream_stream_join
from .suppression import compile_suppress
from .table_joins import (compile_fk_join, compile_fk_right_updates, compile_fk_subscribe,
                                    compile_fk_subscriptions, compile_table_table_join)
from .tables import (compile_aggregate, compile_table_aggregate, compile_table_filter,
                               compile_table_group_by, compile_table_map_values, compile_table_source,
                               compile_to_stream)
from .window_aggregations import compile_session_aggregate, compile_windowed_aggregate

__all__ = ["COMPILERS", "CompileEnv", "Downstream", "compile_nodes", "compile_sub_topology", "fan_out",
           "user_error"]


def compile_sub_topology(topology: Topology, sub: SubTopology, task: TaskContext) -> Dict[str, Downstream]:
    """Compile every node of ``sub``; return the entry callable of each source node by name."""
    compiled, _downstreams = compile_nodes(topology, sub, task)
    return {name: compiled[name] for name in sub.node_names
            if isinstance(topology.nodes[name], ir.SourceNode)}


def compile_nodes(topology: Topology, sub: SubTopology, task: TaskContext
                  ) -> Tuple[Dict[str, Any], Dict[str, Downstream]]:
    """Compile every node of ``sub``: each node's callable, and what each node calls (its
    children, fanned out) by node name."""
    compiled: Dict[str, Any] = {}
    downstreams: Dict[str, Downstream] = {}
    for name in reversed(sub.node_names):
        node = topology.nodes[name]
        children = {child: _entry(compiled[child], topology.nodes[child].parents, name)
                    for child in topology.children[name]}
        downstream = downstreams[name] = fan_out(list(children.values()))
        compiled[name] = COMPILERS[type(node)](node, downstream, CompileEnv(task, children, topology))
    return compiled, downstreams


def _entry(compiled: Any, parents: Tuple[str, ...], parent: str) -> Downstream:
    """What ``parent`` calls: a two-input node (a join) compiles to one callable per
    input, ``(left, right)``, matched to its parents by position."""
    if not isinstance(compiled, tuple):
        return compiled
    return fan_out([side for side, name in zip(compiled, parents) if name == parent])


COMPILERS: Dict[type, Compiler] = {
    ir.SourceNode: compile_source,
    ir.SinkNode: compile_sink,
    ir.ExternalSinkNode: compile_external_sink,
    ir.FilterNode: compile_filter,
    ir.MapNode: compile_map,
    ir.MapValuesNode: compile_map_values,
    ir.FlatMapNode: compile_flat_map,
    ir.FlatMapValuesNode: compile_flat_map_values,
    ir.SelectKeyNode: compile_select_key,
    ir.PeekNode: compile_peek,
    ir.SplitNode: compile_split,
    ir.BranchNode: compile_passthrough,
    ir.MergeNode: compile_passthrough,
    ir.ProcessNode: compile_process,
    ir.AggregateNode: compile_aggregate,
    ir.TableSourceNode: compile_table_source,
    ir.TableFilterNode: compile_table_filter,
    ir.TableMapValuesNode: compile_table_map_values,
    ir.ToStreamNode: compile_to_stream,
    ir.TableGroupByNode: compile_table_group_by,
    ir.TableAggregateNode: compile_table_aggregate,
}

COMPILERS.update({
    ir.WindowedAggregateNode: compile_windowed_aggregate,
    ir.SessionAggregateNode: compile_session_aggregate,
    ir.SuppressNode: compile_suppress,
    ir.StreamTableJoinNode: compile_stream_table_join,
    ir.StreamStreamJoinNode: compile_stream_stream_join,
    ir.GlobalTableJoinNode: compile_global_table_join,
    ir.TableTableJoinNode: compile_table_table_join,
    ir.ForeignKeySubscribeNode: compile_fk_subscribe,
    ir.ForeignKeySubscriptionNode: compile_fk_subscriptions,
    ir.ForeignKeyRightUpdateNode: compile_fk_right_updates,
    ir.ForeignKeyJoinNode: compile_fk_join,
})
