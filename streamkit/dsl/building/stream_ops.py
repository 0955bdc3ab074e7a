"""The operations of a stream that need no other table or stream: validation, naming and
the IR node of each, from a :class:`StreamState` to the state of the result."""
from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

from ...core.names import repartition_suffix
from ...errors import TopologyError
from ...processor import ProcessorDefinition
from ...serdes import Json, Serde
from ...sinks.base import Sink
from ...topics import TopicSpec
from ...topology import nodes as ir
from ..draft import check_callable, check_serde
from .states import GroupedState, StreamState

KV = Tuple[Any, Any]
Predicate = Callable[[Any, Any], bool]


def then(stream: StreamState, node: ir.Node, *, keyless: Optional[bool] = None) -> StreamState:
    """Append ``node`` (reading ``stream``) and return the stream it produces: keyless as
    ``stream`` unless told, keeping the key serde hint unless the node may change keys."""
    stream.draft.append(node)
    hint = None if node.changes_key or isinstance(node, ir.MergeNode) else stream.key_serde_hint
    return StreamState(stream.draft, node.name, stream.keyless if keyless is None else keyless, hint)


def named(stream: StreamState, name: Optional[str], kind: str) -> str:
    """``name`` if given, else ``<node>.<kind>`` (numbered for siblings)."""
    return stream.draft.name_for(name, stream.node, kind)


def filter_records(stream: StreamState, predicate: Predicate, name: Optional[str], *,
                   negate: bool = False) -> StreamState:
    operation = "filter_not" if negate else "filter"
    node = named(stream, name, operation)
    check_callable(predicate, f"{operation} predicate", ("key", "value"), node)
    return then(stream, ir.FilterNode(node, (stream.node,), predicate=predicate, negate=negate))


def map_records(stream: StreamState, mapper: Callable[[Any, Any], KV], name: Optional[str]) -> StreamState:
    node = named(stream, name, "map")
    check_callable(mapper, "map function", ("key", "value"), node)
    return then(stream, ir.MapNode(node, (stream.node,), mapper=mapper), keyless=False)


def map_values(stream: StreamState, mapper: Callable[[Any], Any], name: Optional[str]) -> StreamState:
    node = named(stream, name, "map_values")
    check_callable(mapper, "map_values function", ("value",), node)
    return then(stream, ir.MapValuesNode(node, (stream.node,), mapper=mapper))


def flat_map(stream: StreamState, mapper: Callable[[Any, Any], Iterable[KV]], name: Optional[str]) -> StreamState:
    node = named(stream, name, "flat_map")
    check_callable(mapper, "flat_map function", ("key", "value"), node)
    return then(stream, ir.FlatMapNode(node, (stream.node,), mapper=mapper), keyless=False)


def flat_map_values(stream: StreamState, mapper: Callable[[Any], Iterable[Any]], name: Optional[str]) -> StreamState:
    node = named(stream, name, "flat_map_values")
    check_callable(mapper, "flat_map_values function", ("value",), node)
    return then(stream, ir.FlatMapValuesNode(node, (stream.node,), mapper=mapper))


def select_key(stream: StreamState, selector: Callable[[Any, Any], Any], name: Optional[str]) -> StreamState:
    node = named(stream, name, "select_key")
    check_callable(selector, "select_key function", ("key", "value"), node)
    return then(stream, ir.SelectKeyNode(node, (stream.node,), selector=selector), keyless=False)


def peek(stream: StreamState, action: Callable[[Any, Any], None], name: Optional[str], *,
         terminal: bool = False) -> StreamState:
    """``action`` called per record: ``peek`` passes records on; ``foreach`` (``terminal``) ends there."""
    operation = "foreach" if terminal else "peek"
    node = named(stream, name, operation)
    check_callable(action, f"{operation} action", ("key", "value"), node)
    if terminal:
        stream.draft.append(ir.PeekNode(node, (stream.node,), action=action, terminal=True))
        return stream
    return then(stream, ir.PeekNode(node, (stream.node,), action=action))


def merge(stream: StreamState, other: object, name: Optional[str]) -> StreamState:
    """``stream`` and ``other`` (a stream's state, else what the user passed) interleaved."""
    if not isinstance(other, StreamState) or other.draft is not stream.draft:
        raise TopologyError(f"merge() takes a stream of the same topology, got {other!r}")
    node = named(stream, name, "merge")
    return then(stream, ir.MergeNode(node, (stream.node, other.node)), keyless=stream.keyless and other.keyless)


def repartition(stream: StreamState, partitions: Optional[int], name: Optional[str], key_serde: Optional[Serde],
                value_serde: Optional[Serde]) -> StreamState:
    node = named(stream, name, "repartition")
    check_serde(key_serde, "key_serde")
    check_serde(value_serde, "value_serde")
    if partitions is not None and (not isinstance(partitions, int) or partitions < 1):
        raise TopologyError(f"{node}: partitions must be a positive int, got {partitions!r}")
    return then(stream, ir.RepartitionNode(node, (stream.node,), topic_suffix=repartition_suffix(node),
                                           partitions=partitions, key_serde=key_serde or Json(),
                                           value_serde=value_serde or Json()))


def process(stream: StreamState, processor: ProcessorDefinition, name: Optional[str]) -> StreamState:
    if not isinstance(processor, ProcessorDefinition):
        raise TopologyError(f"process() takes a function decorated with @app.processor(...), got {processor!r}")
    node = named(stream, name, processor.display_name)
    for spec in processor.stores:
        stream.draft.add_store(spec, node)
    return then(stream, ir.ProcessNode(node, (stream.node,), processor=processor,
                                       store_names=processor.store_names), keyless=False)


def to_topic(stream: StreamState, topic: Union[str, TopicSpec], key_serde: Optional[Serde],
             value_serde: Optional[Serde], name: Optional[str]) -> None:
    check_serde(key_serde, "key_serde")
    check_serde(value_serde, "value_serde")
    draft = stream.draft
    if key_serde is None and stream.key_serde_hint is not None and not isinstance(topic, TopicSpec) \
            and topic not in draft.declared_topics:
        key_serde = stream.key_serde_hint  # Windowed keys: JSON {"key", "start", "end"}
    spec = draft.resolve_topic(topic, key_serde, value_serde)
    node = draft.name_for(name, stream.node, f"to-{spec.name}")
    draft.append(ir.SinkNode(node, (stream.node,), topic=spec.name, key_serde=spec.key_serde,
                             value_serde=spec.value_serde))


def to_sink(stream: StreamState, sink: Sink, name: Optional[str]) -> None:
    if not isinstance(sink, Sink):
        raise TopologyError(f"sink() takes a sink such as sk.sinks.ParquetArchive(path), got {sink!r}")
    draft = stream.draft
    node = draft.name_for(name, stream.node, f"sink-{type(sink).__name__.lower()}")
    target = sink.exclusive_target()
    for other in draft.nodes:
        if target is not None and isinstance(other, ir.ExternalSinkNode) and other.sink.exclusive_target() == target:
            raise TopologyError(f"sinks '{other.name}' and '{node}' both write {target}: their files would "
                                "clash; give each sink its own directory")
    draft.append(ir.ExternalSinkNode(node, (stream.node,), sink=sink))


def group_by_key(stream: StreamState, key_serde: Optional[Serde], value_serde: Optional[Serde]) -> GroupedState:
    if stream.keyless:
        raise TopologyError(
            f"group_by_key() after '{stream.node}': this stream has no key (its topic's key serde "
            "is Void), so a stateful operation cannot group it; use group_by(lambda key, value: ...) "
            "or select_key(...) first")
    check_serde(key_serde, "key_serde")
    check_serde(value_serde, "value_serde")
    return GroupedState.of(stream.draft, stream.node, key_serde, value_serde)


def group_by(stream: StreamState, selector: Callable[[Any, Any], Any], key_serde: Optional[Serde],
             value_serde: Optional[Serde], name: Optional[str]) -> GroupedState:
    """A ``select_key`` (named ``name``, default ``<node>.group_by``), grouped by its key."""
    keyed = select_key(stream, selector, name or stream.draft.name_for(None, stream.node, "group_by"))
    return group_by_key(keyed, key_serde, value_serde)


class Split:
    """The branches of one ``split()`` as they are added; :meth:`finish` appends the split
    and one node per branch."""

    def __init__(self, parent: StreamState, name: str) -> None:
        self.parent = parent
        self.name = name
        self.branches: List[Tuple[str, Optional[Predicate]]] = []
        self.done = False

    def add_branch(self, predicate: Predicate, name: Optional[str]) -> None:
        """A branch for records matching ``predicate`` (named ``name``, default its position)."""
        self._check_open()
        branch = name or str(len(self.branches) + 1)
        check_callable(predicate, f"branch '{branch}' predicate", ("key", "value"), self.name)
        self._add(branch, predicate)

    def finish(self, default_branch: Optional[str]) -> Dict[str, StreamState]:
        """Every branch's stream by name, with a ``default_branch`` for unmatched records if named."""
        self._check_open()
        if default_branch is not None:
            self._add(default_branch, None)
        if not self.branches:
            raise TopologyError(f"{self.name}: split() needs at least one branch")
        self.done = True
        draft = self.parent.draft
        draft.append(ir.SplitNode(self.name, (self.parent.node,), branches=tuple(self.branches)))
        out: Dict[str, StreamState] = {}
        for index, (branch, _) in enumerate(self.branches):
            node = draft.append(ir.BranchNode(f"{self.name}-{branch}", (self.name,), index=index))
            out[branch] = StreamState(draft, node.name, keyless=self.parent.keyless)
        return out

    def _add(self, branch: str, predicate: Optional[Predicate]) -> None:
        if any(existing == branch for existing, _ in self.branches):
            raise TopologyError(f"{self.name}: branch name '{branch}' is used twice")
        self.branches.append((branch, predicate))

    def _check_open(self) -> None:
        if self.done:
            raise TopologyError(f"{self.name}: this split is finished; call split() again for more branches")
