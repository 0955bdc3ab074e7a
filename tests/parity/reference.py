"""Apache Kafka Streams as the reference: ``KafkaStreamsReference.java`` in one JVM.

The jars come from ``scripts/ensure-kafka-streams`` (Maven Central, cached); the Java program
is compiled once per source version into ``~/.cache/streamkit/parity-reference-<hash>``. One
JVM serves every case of a pytest process: requests and replies are JSON lines.
"""
from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Iterable, List, Optional, Sequence

from tests.java_programs import compiled_java
from tests.parity.cases import Case, Output, output_from_json

logger = logging.getLogger(__name__)

_HERE = Path(__file__).resolve().parent
_REPO = _HERE.parent.parent
_SOURCE = _HERE / "KafkaStreamsReference.java"
_ENSURE = _REPO / "scripts" / "ensure-kafka-streams"
#: Overrides the folder of Kafka Streams' jars (else ``scripts/ensure-kafka-streams`` decides).
LIBS_ENV_VAR = "STREAMKIT_KAFKA_STREAMS_LIBS"
KAFKA_STREAMS_VERSION = "4.1.1"


class ReferenceError(RuntimeError):
    """Kafka Streams could not run a case (its own exception, or the JVM died)."""


def kafka_streams_libs() -> Path:
    """The folder of Kafka Streams' jars, fetched from Maven Central by the set-up script if needed."""
    try:
        done = subprocess.run([str(_ENSURE)], check=True, capture_output=True, text=True, timeout=900)
    except subprocess.CalledProcessError as exc:
        raise RuntimeError(f"scripts/ensure-kafka-streams failed (exit {exc.returncode}):\n{exc.stderr}") from exc
    libs = Path(done.stdout.strip().splitlines()[-1])
    if not (libs / f"kafka-streams-test-utils-{KAFKA_STREAMS_VERSION}.jar").exists():
        raise RuntimeError(f"scripts/ensure-kafka-streams left no kafka-streams-test-utils jar in {libs}")
    return libs


def _compiled(libs: Path) -> Path:
    """The folder holding the compiled reference program, compiling it when its source changed."""
    return compiled_java(_SOURCE, libs, KAFKA_STREAMS_VERSION, "parity-reference")


class KafkaStreamsReference:
    """One JVM running Kafka Streams' TopologyTestDriver on request: :meth:`run` a case, get
    its output records with the input record that caused each."""

    def __init__(self) -> None:
        libs = kafka_streams_libs()
        classes = _compiled(libs)
        self._state = tempfile.mkdtemp(prefix="parity-kafka-state-")
        self._log = tempfile.NamedTemporaryFile("w+", prefix="parity-kafka-", suffix=".log", delete=False)
        self._process = subprocess.Popen(
            ["java", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Xss4m",
             "-cp", f"{classes}{os.pathsep}{libs}/*", "KafkaStreamsReference", self._state],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._log, text=True, bufsize=1)

    def run(self, case: Case, counterfactual: Sequence[str] = ()) -> List[Output]:
        """Kafka Streams' output for ``case``; ``counterfactual`` names changes to Kafka Streams
        (see the Java program's header). Raises :class:`ReferenceError` if Kafka Streams failed."""
        return self.run_many([case], counterfactual)[0]

    def run_many(self, cases: Iterable[Case], counterfactual: Sequence[str] = ()) -> List[List[Output]]:
        """Like :meth:`run` for many cases, written ahead so the JVM never waits on Python."""
        cases = list(cases)
        replies = []
        # a pipe holds 64 KiB: chunks small enough that neither side blocks on a full pipe
        for start in range(0, len(cases), 10):
            chunk = cases[start:start + 10]
            for case in chunk:
                self._process.stdin.write(json.dumps({
                    "family": case.family, "params": case.params, "records": case.records,
                    "counterfactual": list(counterfactual)}) + "\n")
            self._process.stdin.flush()
            for case in chunk:
                replies.append(self._reply(case))
        return replies

    def _reply(self, case: Case) -> List[Output]:
        line = self._process.stdout.readline()
        if not line:
            self._log.flush()
            self._log.seek(0)
            raise ReferenceError(f"the Kafka Streams JVM died; its log ends:\n{self._log.read()[-3000:]}")
        reply = json.loads(line)
        if reply["error"]:
            raise ReferenceError(f"Kafka Streams failed on {case.name}: {reply['error']}")
        return [output_from_json(row) for row in reply["outputs"]]

    def close(self) -> None:
        """Stop the JVM and remove its state."""
        try:
            self._process.stdin.close()
            self._process.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self._process.kill()
            self._process.wait()
        self._log.close()
        os.unlink(self._log.name)
        shutil.rmtree(self._state, ignore_errors=True)

    def __enter__(self) -> "KafkaStreamsReference":
        return self

    def __exit__(self, *exc: object) -> Optional[bool]:
        self.close()
        return None
