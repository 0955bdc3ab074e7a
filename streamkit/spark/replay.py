"""``sk.spark.replay``: run an app's topology over historical data on Spark.

The physical topology is already cut into sub-topologies at every topic
(repartition, through and foreign-key topics). The replay runs them in dependency
order, each as one stage (:mod:`.stages`):

1. its input: the replayed topics (read in parallel, one Spark partition per topic
   partition) and the records earlier stages sent to its topics, as DataFrames;
2. a shuffle to its tasks, sorted in Spark into the live processing order
   (:mod:`.ordering`); none when it reads exactly one replayed topic;
3. its tasks, in Spark's Python workers over Arrow batches (:mod:`.task_functions`
   running :mod:`.task_runner`, or :mod:`.bulk` when the sub-topology has a bulk plan);
   a stateless sub-topology's tasks in slices of their partitions (:mod:`.slicing`);
4. its output, persisted for the stages and outputs that read it, and counted.

Sub-topologies that feed each other in a cycle (a foreign-key join) run together
in one Spark task. Rows cross between the JVM and Python only as Arrow batches, and
nothing is collected to the driver except counts. The result gives each stage's
and each output's wall time.

Serdes are bound to their topics as a worker binds them
(:func:`~streamkit.topology.serde_binding.bind_serdes`, with the app's broker: see
:func:`registry_broker`), on the driver and again in each executor process, so Schema
Registry serdes (Avro, JSON Schema, Protobuf) use the worker's subjects and registry
and the output topics get the worker's bytes, schema ids included. They travel to
the executors without their caches and clients and connect on first use: one shared,
caching client per registry and process, so a schema id costs one registry request
per executor process, not one per record. A registry the executors cannot reach (an
in-memory one) is refused before anything runs.
"""
from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional, Tuple

from ..errors import ConfigError
from ..topology import Topology
from ..topology.passes import resolve_partitions
from ..topology.serde_binding import bind_serdes
from .fidelity import check_replayable
from .inputs import KafkaTopic, resolve_input
from .outputs import EMBEDDED_PREFIX, OutputSummary, parquet_root, write_outputs
from .stages import Stages, StageSummary
from .task_runner import ReplayJob

log = logging.getLogger(__name__)


@dataclass
class ReplayResult:
    """What a replay wrote, where, and how long it took."""

    output: str
    outputs: List[OutputSummary] = field(default_factory=list)
    input_records: int = 0
    """Records read from the replayed topics, global tables' topics not counted."""
    seconds: float = 0.0
    approximations: List[str] = field(default_factory=list)
    stages: List[StageSummary] = field(default_factory=list)
    """Each stage run, in order, with its wall time (the outputs' are in ``outputs``)."""

    def output_path(self, topic: str) -> str:
        """Where the Parquet of output topic ``topic`` is (for a Parquet output)."""
        return os.path.join(self.output, "topics", topic)

    def stage_seconds(self) -> Dict[str, float]:
        """Wall seconds per stage and per output write, in the order they ran."""
        times = {f"stage {s.name} ({s.how})": s.seconds for s in self.stages}
        times.update({f"write {o.kind} {o.name}": o.seconds for o in self.outputs})
        return times

    def summary(self) -> str:
        lines = [f"stage {s.name} ({s.how}{f' in {s.slices} slices' if s.slices else ''}, reads "
                 f"{', '.join(s.reads)}): {s.input_records} replayed record(s) read, {s.sent} sent, "
                 f"in {s.seconds:.1f} s" for s in self.stages]
        lines += [f"{o.kind} {o.name}: {o.records} record(s) in {o.seconds:.1f} s -> {o.path}" for o in self.outputs]
        lines.append(f"replayed {self.input_records} input record(s) in {self.seconds:.1f} s"
                     " (global tables' records, which every task reads whole, not counted)")
        return "\n".join(lines)


def replay(app: Any, *, inputs: Optional[Mapping[str, Any]] = None, output: str, spark: Any = None,
           master: Optional[str] = None, allow_approximate: bool = False, output_stores: bool = True,
           bulk: bool = False, slice_records: Optional[int] = None) -> ReplayResult:
    """Replay ``app`` over ``inputs`` (topic → embedded broker directory, archive, files,
    Kafka, or a ``--input`` string) and write every output topic, external sink and
    final store as Parquet under ``output`` (``output/topics/<topic>``,
    ``output/sinks/<node>``, ``output/stores/<store>``); topics the app reads without
    an input come from the app's own embedded broker. ``spark``: a SparkSession
    (default: a new local one, or on ``master``). ``bulk=True`` compiles the
    sub-topologies that have a bulk plan to Spark SQL (see :mod:`.bulk`); by default
    every stage runs the task runner, which measured faster (bench/spark_replay.py).
    A stateless stage reading one replayed topic runs its tasks in slices of about
    ``slice_records`` offsets each (default: chosen from the input's size and Spark's
    parallelism; 0: one Spark task per topic partition), so it uses every core
    whatever the topic's partition count (see :mod:`.slicing`)."""
    from .session import get_session

    started = time.monotonic()
    if spark is None:
        spark = get_session(master)
    plan = plan_replay(app, inputs, spark, allow_approximate=allow_approximate, output_stores=output_stores)
    job = plan.job
    _warn_foreign_registry(job, output)
    run = Stages(spark, job, plan.sources, bulk, slice_records=slice_records).run_all()
    try:
        result = ReplayResult(output=output, approximations=plan.approximations, stages=run.summaries,
                              input_records=sum(run.input_records.values()))
        result.outputs = write_outputs(job, run, output)
        for o in result.outputs:
            log.info("wrote %s %s: %d record(s) in %.1f s", o.kind, o.name, o.records, o.seconds)
    finally:
        run.release(spark)
    result.seconds = time.monotonic() - started
    with open(os.path.join(parquet_root(output), "_replay.json"), "w") as f:
        json.dump({"app": app.id, "input_records": result.input_records, "seconds": round(result.seconds, 3),
                   "approximations": result.approximations,
                   "stages": [dict(s.__dict__, name=s.name, seconds=round(s.seconds, 3)) for s in result.stages],
                   "outputs": [dict(o.__dict__, seconds=round(o.seconds, 3)) for o in result.outputs]}, f, indent=2)
    return result


@dataclass
class ReplayPlan:
    """What a replay runs: the job its executors get, its inputs, and its approximations."""

    job: ReplayJob
    sources: Dict[str, Any]
    """Each replayed topic's input (a :class:`~.inputs.ReplayInput` or :class:`KafkaTopic`)."""
    approximations: List[str]


def plan_replay(app: Any, inputs: Optional[Mapping[str, Any]], spark: Any, *, allow_approximate: bool = False,
                output_stores: bool = True) -> ReplayPlan:
    """Resolve ``app``'s inputs and partition counts and check that it can be replayed
    (raises :class:`~.fidelity.ReplayRefusedError` otherwise)."""
    broker = registry_broker(app)
    topology = bind_serdes(app.build(), broker)
    check_registries(topology)
    _log_registries(topology, broker)
    sources = _resolve_inputs(app, topology, dict(inputs or {}))
    existing = {topic: _partition_count(spark, source) for topic, source in sources.items()}
    partitions = resolve_partitions(topology, existing)
    partitions[f"{app.id}-dlq"] = max(partitions.values())
    notes = check_replayable(app, topology, partitions, allow_approximate=allow_approximate)
    for note in notes:
        log.warning("approximate replay: %s", note)
    globals_ = {topic: sources[topic] for topic in topology.global_tables.values()}
    if any(isinstance(s, KafkaTopic) for s in globals_.values()):
        raise ConfigError("a global table's topic cannot be replayed from Kafka (each task reads it whole): "
                          "archive it or give an embedded broker directory")
    job = ReplayJob(app=app, partitions=partitions, global_inputs=globals_, dump_stores=output_stores,
                    broker=broker, _topology=topology)
    return ReplayPlan(job, sources, notes)


def registry_broker(app: Any) -> str:
    """The broker URL a replay binds ``app``'s serdes to, as a worker of the app binds
    them to its own (:meth:`~streamkit.App.resolve_broker`: ``--broker``,
    ``$STREAMKIT_BROKER``, the config file, the app's, else ``embedded://.streamkit``):
    a registry serde with ``registry="embedded"`` reads and registers in that broker's
    ``_schemas`` topic, from the driver and from every executor. An embedded directory
    is made absolute, so executors find it whatever their working directory."""
    url = app.resolve_broker()
    if url.startswith("embedded://"):
        from ..transport.factory import embedded_directory

        return "embedded://" + os.path.abspath(embedded_directory(url))
    return url


def bound_topology(app: Any) -> Topology:
    """``app``'s topology with its serdes bound as a replay binds them (see
    :func:`registry_broker`): the serdes to read a replay's output topics with."""
    return bind_serdes(app.build(), registry_broker(app))


def check_registries(topology: Topology) -> None:
    """Refuse registry serdes whose registry the executors cannot reach: an in-memory
    registry (``memory://``, or ``registry="embedded"`` on a ``memory://`` broker) lives
    in one process, and a client object must pickle to travel to them."""
    import pickle

    from ..serdes.registry_serde import RegistrySerde

    for place, serde in _serdes(topology):
        if not isinstance(serde, RegistrySerde):
            continue
        registry = serde.registry
        if isinstance(registry, str):
            in_memory = registry.startswith("memory://") or (
                registry == "embedded" and (serde.broker or "").startswith("memory://"))
            if in_memory:
                raise ConfigError(
                    f"{place}: {serde!r} uses an in-memory registry ({registry}"
                    f"{'' if registry != 'embedded' else ' on broker ' + str(serde.broker)}), which Spark's "
                    "executors (other processes) cannot read: use registry='embedded' on an embedded:// or "
                    "kafka:// broker, or an http(s):// registry URL")
            continue
        try:
            pickle.dumps(registry)
        except Exception as exc:  # noqa: BLE001 - any pickling failure means it cannot travel
            raise ConfigError(
                f"{place}: {serde!r} uses registry client {registry!r}, which cannot be sent to Spark's "
                f"executors ({type(exc).__name__}: {exc}): pass the registry's http(s):// URL or "
                "'embedded' instead") from None


def _log_registries(topology: Topology, broker: str) -> None:
    """Say which registries the registry serdes use (the ids in the inputs must be theirs)."""
    from ..schemas.registry_resolution import describe_registry
    from ..serdes.registry_serde import RegistrySerde

    used = sorted({f"the _schemas topic of {broker}" if serde.registry == "embedded"
                   else describe_registry(serde.registry)
                   for _, serde in _serdes(topology) if isinstance(serde, RegistrySerde)})
    if used:
        log.info("registry serdes bound to the app's broker %s; schema ids are read from and registered in %s "
                 "(streamkit replay --broker or the app's broker= picks another)", broker, ", ".join(used))


def _warn_foreign_registry(job: ReplayJob, output: str) -> None:
    """Output topics appended to another embedded broker than the app's carry schema ids of
    the app's registry: say so, since ``registry="embedded"`` readers there would look the
    ids up in that broker's own registry."""
    from ..serdes.registry_serde import RegistrySerde

    if not output.startswith(EMBEDDED_PREFIX) or job.broker is None:
        return
    target = "embedded://" + os.path.abspath(output[len(EMBEDDED_PREFIX):])
    if target == job.broker:
        return
    if any(isinstance(serde, RegistrySerde) and serde.registry == "embedded" for _, serde in _serdes(job.topology)):
        log.warning("the output topics go to %s but their schema ids are those of the registry on the app's "
                    "broker %s: readers there must use that registry (its registry serve URL, or "
                    "registry='embedded' on that broker), not %s's own", target, job.broker, target)


def _serdes(topology: Topology) -> List[Tuple[str, Any]]:
    """(where, serde) for every serde of ``topology``: its topics', stores' and nodes'
    (node fields that are not serdes come along; callers test the type)."""
    import dataclasses

    found: List[Tuple[str, Any]] = []
    for name, spec in topology.topics.items():
        found += [(f"topic '{name}'", spec.key_serde), (f"topic '{name}'", spec.value_serde)]
    for name, store in topology.stores.items():
        found += [(f"store '{name}'", store.key_serde), (f"store '{name}'", store.value_serde)]
    for name, node in topology.nodes.items():
        found += [(f"node '{name}'", getattr(node, f.name)) for f in dataclasses.fields(node)]
    return found


def _resolve_inputs(app: Any, topology: Topology, given: Dict[str, Any]) -> Dict[str, Any]:
    from ..runtime.task.external_sources import external_sources

    produced = {t for sub in topology.sub_topologies for t in sub.sink_topics}
    needed = [t for sub in topology.sub_topologies for t in sub.source_topics if t not in produced]
    needed += [t for t in topology.global_tables.values() if t not in needed]
    unknown = sorted(set(given) - set(needed))
    if unknown:
        raise ConfigError(f"--input names topic(s) {', '.join(unknown)} that app '{app.id}' does not read "
                          f"from outside (it reads: {', '.join(sorted(set(needed)))})")
    anchors = external_sources(topology)
    default_dir = _default_embedded_dir(app)
    sources: Dict[str, Any] = {}
    for topic in dict.fromkeys(needed):
        spec = topology.topics[topic]
        chosen = given.get(topic) or anchors.get(topic)
        if chosen is None:
            if default_dir is None:
                raise ConfigError(f"no input for topic '{topic}': pass --input {topic}=SOURCE")
            chosen = default_dir
        sources[topic] = resolve_input(topic, chosen, spec.key_serde, spec.value_serde)
    return sources


def _default_embedded_dir(app: Any) -> Optional[str]:
    url = app.resolve_broker()
    if url.startswith("embedded://"):
        return url[len("embedded://"):]
    return None


def _partition_count(spark: Any, source: Any) -> int:
    if isinstance(source, KafkaTopic):
        from .kafka_input import kafka_partition_count
        return kafka_partition_count(spark, source)
    return source.partitions()
