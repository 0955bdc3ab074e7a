"""``streamkit registry serve`` processes on one embedded broker directory: the state
survives a restart, and two servers registering at the same time agree on every id."""
from __future__ import annotations

import json
import signal
import threading
from pathlib import Path
from typing import Dict, List, Tuple

from confluent_kafka.schema_registry import Schema, SchemaRegistryClient

from .registry_servers import RegistryProcess


def record(name: str) -> str:
    return json.dumps({"type": "record", "name": name, "fields": [{"name": "id", "type": "long"}]})


def register_concurrently(urls: List[str], per_thread: int = 6) -> Dict[Tuple[str, str], int]:
    """Two threads per server; each registers its own schemas, and every thread also the
    same shared schema under its own subject. (subject, schema) -> id."""
    results: Dict[Tuple[str, str], int] = {}
    errors: List[BaseException] = []
    start = threading.Barrier(2 * len(urls))

    def work(url: str, thread: str) -> None:
        try:
            client = SchemaRegistryClient({"url": url})
            start.wait()
            for i in range(per_thread):
                subject = f"{thread}-{i % 2}"
                schema = record(f"R_{thread}_{i}")
                results[(subject, schema)] = client.register_schema(subject, Schema(schema, "AVRO"))
            shared = record("Shared")
            results[(f"{thread}-shared", shared)] = client.register_schema(f"{thread}-shared", Schema(shared, "AVRO"))
        except BaseException as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(url, f"s{n}t{t}")) for n, url in enumerate(urls) for t in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    return results


def check_agreement(urls: List[str], results: Dict[Tuple[str, str], int]) -> None:
    by_schema: Dict[str, set] = {}
    for (_subject, schema), schema_id in results.items():
        by_schema.setdefault(schema, set()).add(schema_id)
    assert all(len(ids) == 1 for ids in by_schema.values()), by_schema  # one id per schema
    ids = [next(iter(ids)) for ids in by_schema.values()]
    assert len(set(ids)) == len(ids)  # one schema per id
    for url in urls:
        client = SchemaRegistryClient({"url": url})
        for (subject, schema), schema_id in results.items():
            assert json.loads(client.get_schema(schema_id).schema_str) == json.loads(schema)
            assert client.lookup_schema(subject, Schema(schema, "AVRO")).schema_id == schema_id


def test_two_servers_on_one_broker_agree_on_ids(tmp_path: Path) -> None:
    broker = f"embedded://{tmp_path}/broker"
    first = RegistryProcess(broker, tmp_path / "first.log")
    second = RegistryProcess(broker, tmp_path / "second.log")
    try:
        SchemaRegistryClient({"url": first.url}).set_compatibility(level="NONE")
        results = register_concurrently([first.url, second.url])
        check_agreement([first.url, second.url], results)
        assert len({i for i in results.values()}) == 2 * 2 * 6 + 1
    finally:
        codes = (first.stop(), second.stop(signal.SIGINT))
    assert codes == (0, 0), first.log() + second.log()


def test_state_survives_a_restart(tmp_path: Path) -> None:
    broker = f"embedded://{tmp_path}/broker"
    server = RegistryProcess(broker, tmp_path / "before.log")
    client = SchemaRegistryClient({"url": server.url})
    first = client.register_schema("orders-value", Schema(record("Order"), "AVRO"))
    client.set_compatibility("orders-value", "FULL")
    client.register_schema("gone-value", Schema(record("Gone"), "AVRO"))
    client.delete_subject("gone-value")
    assert server.stop() == 0
    again = RegistryProcess(broker, tmp_path / "after.log")
    try:
        fresh = SchemaRegistryClient({"url": again.url})
        assert json.loads(fresh.get_schema(first).schema_str) == json.loads(record("Order"))
        assert fresh.get_latest_version("orders-value").schema_id == first
        assert fresh.get_compatibility("orders-value") == "FULL"
        assert fresh.get_subjects() == ["orders-value"]
        assert fresh.get_subjects(deleted=True) == ["gone-value", "orders-value"]
        assert fresh.register_schema("next-value", Schema(record("Next"), "AVRO")) == first + 2
    finally:
        assert again.stop() == 0
