"""The ``backend`` fixture: one topology, one input, run on each of the three ways streamkit
runs a topology, with one interface (registered for the whole suite by tests/conftest.py).

``driver``    :class:`streamkit.testing.TopologyTestDriver`, in this process;
``embedded``  a real worker (``App.run``) on an embedded broker directory, in this process,
              until it has been idle for a second after reading every input;
``spark``     the Spark replay (``streamkit.spark.replay``) of that broker directory, on the
              session's SparkSession (tests/spark/fixtures.py); marked ``spark``.

A test taking ``backend`` runs once per backend and calls
``backend.run(app_or_build, inputs={topic: [(key, value, timestamp), ...]})``. The three
legs are built on tests/spark/harness.py (the replay harness the Spark parity tests use).
"""
from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Callable, Iterator, List, Mapping, Sequence, Tuple, Union

import pytest

import streamkit as sk

Record = Tuple[Any, Any, int]
"""``(key, value, timestamp)``, as given to and returned by :meth:`Backend.run`."""
Outputs = Mapping[str, List[Record]]
Build = Callable[[sk.StreamsBuilder], None]

BACKENDS = ("driver", "embedded", "spark")


def as_app(app_or_build: Union[sk.App, Build]) -> sk.App:
    """An App as given, or one running ``build`` with the default serdes (String keys, Json
    values) and no record cache, so every update reaches the output on every backend."""
    if isinstance(app_or_build, sk.App):
        return app_or_build
    app = sk.App(f"backend-{getattr(app_or_build, '__name__', 'topology').replace('_', '-')}", caching=False)
    app.topology(app_or_build)
    return app


def task_order(app: sk.App, inputs: Mapping[str, Sequence[Record]]) -> List[Tuple[str, Any, Any, int]]:
    """The records of ``inputs`` in the order a live worker processes them: global tables'
    topics whole and first (a worker loads them before any task runs), then the other topics
    merged as a task reads its partitions: the smallest head timestamp next, ties to the
    source listed first in the sub-topology; each topic keeps its own order."""
    from tests.spark.harness import live_order

    global_topics = set(app.build().global_tables.values())
    first = [(topic, *record) for topic in inputs if topic in global_topics for record in inputs[topic]]
    return first + live_order(app, {t: records for t, records in inputs.items() if t not in global_topics})


class Backend:
    """One of :data:`BACKENDS`; :meth:`run` gives each run a fresh broker directory."""

    def __init__(self, name: str, directory: Path, spark: Any = None) -> None:
        if name not in BACKENDS:
            raise ValueError(f"unknown backend {name!r}: one of {', '.join(BACKENDS)}")
        self.name = name
        self._directory = directory
        self._spark = spark
        self._runs = itertools.count()

    def __repr__(self) -> str:
        return f"Backend({self.name!r})"

    def run(self, app_or_build: Union[sk.App, Build], inputs: Mapping[str, Sequence[Record]]) -> Outputs:
        """Run the topology (an App, or a ``build(builder)`` function) over ``inputs``, each
        topic's records in offset order on one partition, to the end.

        Returns every output topic that received records (internal topics left out; the
        app's dead-letter topic included) with its records as ``(key, value, timestamp)``,
        each partition's in offset order, partition after partition.
        """
        from tests.spark.harness import driver_outputs, replay_outputs, worker_outputs, write_inputs

        app = as_app(app_or_build)
        if self.name == "driver":
            return driver_outputs(app, task_order(app, inputs))
        run = self._directory / f"run-{next(self._runs)}"
        broker = str(run / "broker")
        write_inputs(app, broker, [(topic, *record) for topic, records in inputs.items() for record in records])
        if self.name == "embedded":
            return worker_outputs(app, broker)
        return replay_outputs(self._spark, app, broker, str(run / "replay"))


@pytest.fixture(params=[pytest.param(name, marks=[pytest.mark.spark] if name == "spark" else [])
                        for name in BACKENDS])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """The test once per backend (:data:`BACKENDS`); the Spark leg takes the session's
    SparkSession (and skips, saying why, where pyspark or Java is missing)."""
    spark = request.getfixturevalue("spark") if request.param == "spark" else None
    yield Backend(request.param, tmp_path / request.param, spark)
