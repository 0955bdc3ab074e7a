"""streamkit against Kafka Streams 4.1, record by record, on seeded random inputs per topology family.

Each case goes through Kafka Streams' own TopologyTestDriver and streamkit's; the output topic is
read after every piped record, so each output record is compared with the input record that caused
it. A difference passes only as a named Kafka Streams defect or named noise (tests/parity/defects.py,
docs/differences-from-kafka-streams.md); any other fails the test, which prints each failing seed and
the first ones shrunk to a minimal input with both outputs. More seeds: ``--parity-seeds 0-999``.
"""
from __future__ import annotations

import collections
import logging
from typing import List

import pytest

from tests.parity.cases import FAMILIES, describe, generate
from tests.parity.reference import KafkaStreamsReference, ReferenceError
from tests.parity.report import Outcome, evaluate, minimal_failure, render

SHRUNK_PER_FAMILY = 3


@pytest.fixture(autouse=True)
def _quiet_streamkit() -> None:
    """Thousands of tiny apps: keep their per-app info logs out of a failure's report."""
    logging.getLogger("streamkit").setLevel(logging.WARNING)


@pytest.mark.parametrize("family", FAMILIES)
def test_streamkit_gives_kafka_streams_results(family: str, parity_seeds: List[int],
                                               kafka_streams: KafkaStreamsReference) -> None:
    cases = [generate(family, seed) for seed in parity_seeds]
    try:
        kafka_outputs = kafka_streams.run_many(cases)
    except ReferenceError:  # one case's error: run them one by one so that it is named
        kafka_outputs = [None] * len(cases)
    outcomes: List[Outcome] = [evaluate(case, kafka_streams, kafka) for case, kafka in zip(cases, kafka_outputs)]
    tally = collections.Counter(o.verdict.label for o in outcomes)
    failed = [o for o in outcomes if o.verdict.kind == "fail"]
    summary = f"{family}: {len(cases)} cases, " + ", ".join(f"{label} {n}" for label, n in sorted(tally.items()))
    print(summary)
    if failed:
        report = [summary, "failing: " + ", ".join(f"{o.case.name} [{describe(o.case)}]: {o.verdict.note}"
                                                   for o in failed)]
        for outcome in failed[:SHRUNK_PER_FAMILY]:
            report += ["", f"minimal case (shrunk from {outcome.case.name}):",
                       render(minimal_failure(outcome, kafka_streams))]
        pytest.fail("\n".join(report), pytrace=False)
