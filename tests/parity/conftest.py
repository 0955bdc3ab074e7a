"""The differential suite's options and its Kafka Streams JVM (one per pytest process)."""
from __future__ import annotations

from typing import Iterator, List

import pytest

from tests.parity.reference import KafkaStreamsReference

#: The seeds every run covers (CI): each family's cases for these seeds.
DEFAULT_SEEDS = "0-99"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption("--parity-seeds", default=DEFAULT_SEEDS, metavar="A-B[,C-D,E...]",
                     help=f"seeds of the differential suite against Kafka Streams (default {DEFAULT_SEEDS})")


def parse_seeds(text: str) -> List[int]:
    """``"0-99"``, ``"7"`` or ``"0-19,146"`` as a list of seeds."""
    seeds: List[int] = []
    for part in text.split(","):
        low, _, high = part.strip().partition("-")
        seeds.extend(range(int(low), int(high or low) + 1))
    return seeds


@pytest.fixture(scope="session")
def parity_seeds(request: pytest.FixtureRequest) -> List[int]:
    return parse_seeds(request.config.getoption("--parity-seeds"))


@pytest.fixture(scope="session")
def kafka_streams() -> Iterator[KafkaStreamsReference]:
    """Kafka Streams 4.1's TopologyTestDriver in one JVM for the whole session."""
    with KafkaStreamsReference() as reference:
        yield reference
