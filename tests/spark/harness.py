"""Runs one input through the live runtime and through a Spark replay, and reads both outputs.

- :func:`write_inputs` puts records into an embedded broker directory (the replay's input);
- :func:`replay_outputs` replays an app from it and reads every output topic back;
- :func:`live_order` merges per-topic inputs into the order a live task takes them;
- :func:`driver_outputs` pipes the same records through the TopologyTestDriver;
- :func:`worker_outputs` runs the real embedded worker over the broker directory.

Outputs are ``{topic: [(key, value, timestamp), ...]}`` in (partition, offset) order.
"""
from __future__ import annotations

import os
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import pyarrow.parquet as pq

from streamkit.serdes import Bytes
from streamkit.testing import TopologyTestDriver
from streamkit.topology.serde_binding import bind_serdes
from streamkit.broker.broker import EmbeddedBroker

Record = Tuple[Any, Any, int]
Outputs = Dict[str, List[Record]]


def write_inputs(app: Any, directory: str, records: Sequence[Tuple[str, Any, Any, int]],
                 partitions: Optional[Dict[str, int]] = None) -> None:
    """Append ``(topic, key, value, timestamp)`` records, in this order, to the broker in
    ``directory``; a topic's partition is Kafka's default for the key (1 partition unless
    ``partitions`` says otherwise)."""
    from streamkit.core.partitioner import partition_for_key

    topics = app.build().topics
    partitions = partitions or {}
    with EmbeddedBroker(directory) as broker:
        for topic in dict.fromkeys(t for t, *_ in records):
            broker.create_topic(topic, partitions.get(topic, 1), exist_ok=True)
        for topic, key, value, ts in records:
            spec = topics[topic]
            kb, vb = spec.key_serde.serialize(key), spec.value_serde.serialize(value)
            count = partitions.get(topic, 1)
            p = partition_for_key(kb, count) if kb is not None else 0
            broker.append(topic, p, [(kb, vb, ts, None)])


def read_replayed_topic(app: Any, output: str, topic: str) -> List[Record]:
    spec = app.build().topics.get(topic)
    kd = spec.key_serde.deserialize if spec is not None else Bytes().deserialize
    vd = spec.value_serde.deserialize if spec is not None else Bytes().deserialize
    rows = pq.read_table(os.path.join(output, "topics", topic)).to_pylist()
    rows.sort(key=lambda r: (r["partition"], r["offset"]))
    return [(kd(r["key_bytes"]), vd(r["value_bytes"]), r["timestamp"]) for r in rows]


def replay_outputs(spark: Any, app: Any, directory: str, output: str, **options: Any) -> Outputs:
    """Replay ``app`` from the broker in ``directory``; every output topic it wrote."""
    from streamkit.spark import replay

    result = replay(app, inputs=_inputs_from(app, directory), output=output, spark=spark, **options)
    return {o.name: read_replayed_topic(app, output, o.name) for o in result.outputs if o.kind == "topic"}


def _inputs_from(app: Any, directory: str) -> Dict[str, str]:
    topology = app.build()
    produced = {t for sub in topology.sub_topologies for t in sub.sink_topics}
    read = {t for sub in topology.sub_topologies for t in sub.source_topics} | set(topology.global_tables.values())
    return {t: directory for t in read - produced if not topology.topics[t].internal
            and not any(getattr(n, "external", None) is not None and n.topic == t for n in topology.nodes.values())}


def live_order(app: Any, sides: Mapping[str, Sequence[Record]],
               via: Optional[Dict[str, str]] = None) -> List[Tuple[str, Any, Any, int]]:
    """The records of ``sides`` in the order a live task reading all of them takes them:
    the smallest head timestamp next, ties to the input listed first in its sub-topology
    (topics read by different tasks: in the order given, for inputs without such ties).
    ``via``: an input topic that reaches the task through another topic (a repartition
    topic keeps its order and timestamps) -> that topic."""
    topology = app.build()
    via = via or {}
    read = {via.get(t, t): t for t in sides}
    sub = next((s for s in topology.sub_topologies if set(read) <= set(s.source_topics)), None)
    order = [read[t] for t in topology.source_nodes(sub) if t in read] if sub is not None else list(sides)
    position = {t: 0 for t in order}
    merged: List[Tuple[str, Any, Any, int]] = []
    while True:
        heads = [(sides[t][position[t]][2], index, t) for index, t in enumerate(order)
                 if position[t] < len(sides[t])]
        if not heads:
            return merged
        _ts, _index, topic = min(heads)
        key, value, ts = sides[topic][position[topic]]
        position[topic] += 1
        merged.append((topic, key, value, ts))


def driver_outputs(app: Any, records: Sequence[Tuple[str, Any, Any, int]]) -> Outputs:
    """Pipe ``(topic, key, value, timestamp)`` records in order through the test driver;
    every output topic that received records (internal topics left out)."""
    with TopologyTestDriver(app) as driver:
        for topic, key, value, ts in records:
            driver.input_topic(topic).pipe_input(key, value, timestamp=ts)
        topology = driver.topology
        outputs: Outputs = {}
        for topic in list(driver._outputs):
            spec = topology.topics.get(topic)
            if topic in {t for s in topology.sub_topologies for t in s.source_topics} and topic not in \
                    {t for s in topology.sub_topologies for t in s.sink_topics}:
                continue  # an input
            if (spec is not None and spec.internal) or topic in topology.global_tables.values():
                continue
            got = [(r.key, r.value, r.timestamp) for r in driver.output_topic(topic).read_records()]
            if got:
                outputs[topic] = got
        return outputs


def worker_outputs(app: Any, directory: str, until_idle: float = 1.0) -> Outputs:
    """Run the embedded worker over ``directory`` until idle; every output topic it wrote,
    read back from the broker in (partition, offset) order."""
    url = f"embedded://{directory}"
    app.run(broker=url, until_idle=until_idle)
    # bound as the worker binds them: registry serdes need their topic and the broker's registry
    topology = bind_serdes(app.build(), url)
    produced = {t for sub in topology.sub_topologies for t in sub.sink_topics}
    outputs: Outputs = {}
    with EmbeddedBroker(directory) as broker:
        for meta in broker.list_topics():
            topic = meta.name
            spec = topology.topics.get(topic)
            if topic not in produced and topic != f"{app.id}-dlq":
                continue
            if spec is not None and spec.internal:
                continue
            kd = spec.key_serde.deserialize if spec is not None else (lambda b: b)
            vd = spec.value_serde.deserialize if spec is not None else (lambda b: b)
            got = []
            for p in range(meta.partitions):
                reader = broker.reader(topic, p)
                while batch := reader.read(10_000):
                    got.extend((kd(k), vd(v), ts) for _o, ts, k, v, _h in batch)
                reader.close()
            if got:
                outputs[topic] = got
    return outputs


def per_key(records: Sequence[Record]) -> Dict[Any, List[Tuple[Any, int]]]:
    """Each key's (value, timestamp) sequence: what Kafka orders (keys are unhashable-safe via repr)."""
    out: Dict[Any, List[Tuple[Any, int]]] = {}
    for key, value, ts in records:
        out.setdefault(repr(key), []).append((value, ts))
    return out
