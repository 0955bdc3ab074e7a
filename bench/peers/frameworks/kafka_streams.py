"""Kafka Streams 4.1 itself: the scenarios as a Kafka Streams user writes them
(``bench/peers/kafka_streams/KafkaStreamsPeer.java``: one stream thread, Kafka Streams'
default RocksDB stores, ``exactly_once_v2`` for S5, the record cache off unless the column
is ``kafka-streams-cached``), in a JVM of its own.

The jars are Kafka Streams' own from Maven Central (``scripts/ensure-kafka-streams``, the
same as the differential suite's); the program is compiled once per source version into
``~/.cache/streamkit/bench-kafka-streams-<hash>``. The JVM times itself the way
``bench.peers.probe`` times the Python frameworks (first records handed out by its main
consumer to the group's committed offsets covering every input record) and reports its own
CPU time and peak RSS, which this child process passes on unchanged.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from pathlib import Path
from typing import Optional

from bench.peers.frameworks import transactions_missing
from bench.peers.probe import Probe
from bench.peers.workload import Scenario

NAME = "Kafka Streams"
KAFKA_STREAMS_VERSION = "4.1.1"
HEAP = "1g"
"""The JVM's heap limit (-Xmx); Kafka Streams' RocksDB memory is off-heap and not limited by it."""

_ROOT = Path(__file__).resolve().parents[3]
_SOURCE = _ROOT / "bench" / "peers" / "kafka_streams" / "KafkaStreamsPeer.java"
_ENSURE = _ROOT / "scripts" / "ensure-kafka-streams"
JVM_TIMEOUT_S = 900.0


def java() -> str:
    home = os.environ.get("JAVA_HOME")
    return str(Path(home) / "bin" / "java") if home and (Path(home) / "bin" / "java").exists() else "java"


def libs() -> Path:
    """Kafka Streams' jars, fetched from Maven Central by the project's set-up script if needed."""
    done = subprocess.run([str(_ENSURE)], check=True, capture_output=True, text=True, timeout=900)
    folder = Path(done.stdout.strip().splitlines()[-1])
    if not (folder / f"kafka-streams-{KAFKA_STREAMS_VERSION}.jar").exists():
        raise RuntimeError(f"scripts/ensure-kafka-streams left no kafka-streams jar in {folder}")
    return folder


def compiled(jars: Path) -> Path:
    """The folder of the compiled peer, compiling it when its source changed."""
    from tests.java_programs import compiled_java  # the project's Java helper (no pytest involved)

    return compiled_java(_SOURCE, jars, KAFKA_STREAMS_VERSION, "bench-kafka-streams")


def version() -> str:
    return f"kafka-streams {KAFKA_STREAMS_VERSION} (JVM, RocksDB stores, one stream thread)"


def unsupported(scenario: Scenario, transactions: bool) -> Optional[str]:
    if shutil.which("javac") is None:
        return "skipped: no javac on PATH (scripts/ensure-java installs a JDK)"
    return transactions_missing(scenario, transactions)


def run(spec: dict, probe: Probe) -> None:
    jars = libs()
    classes = compiled(jars)
    command = [java(), f"-Xmx{HEAP}", "-cp", f"{classes}{os.pathsep}{jars}/*", "KafkaStreamsPeer",
               json.dumps(spec)]
    jvm = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # A latency run (endless input) ends with SIGTERM to this process: pass it on to the JVM,
    # whose shutdown hook closes Kafka Streams, rather than leave the JVM running orphaned.
    previous = signal.signal(signal.SIGTERM, lambda _signum, _frame: jvm.terminate())
    try:
        stdout, stderr = jvm.communicate(timeout=JVM_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        jvm.kill()
        jvm.communicate()
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    if jvm.returncode != 0 or not stdout.strip():
        raise RuntimeError(f"Kafka Streams exited {jvm.returncode}:\n{stderr[-3000:]}")
    probe.measured_elsewhere(json.loads(stdout.strip().splitlines()[-1]))
