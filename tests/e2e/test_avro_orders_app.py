"""apps/avro_orders.py end to end, as the README runs it: ``python -m apps.avro_orders
--generate`` registers the schemas in the embedded registry and writes Avro input (its
first orders with an older schema version), two ``streamkit worker`` processes share
the app's tasks on one embedded broker directory until idle; then more orders and
payments arrive and a third worker, without local state, restores every store from
its Avro changelog (join buffers, the customers table, the totals) and goes on from
there. Then:

- every output record is in Confluent's wire format with the id its subject holds, and
  decodes with the app's ``.avsc`` to exactly what a model computed from the input
  says: one enriched order per paid order, and final totals per customer (the later
  orders folded into totals decoded from the restored state);
- orders written with ``order_v1.avsc`` come out with ``coupon = None`` (read with the
  app's newer schema);
- confluent-kafka's ``AvroDeserializer``, with its ``SchemaRegistryClient`` pointed at a
  ``streamkit registry serve`` process on the same broker directory, decodes the same
  bytes to the same values.
"""
from __future__ import annotations

import io
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Callable, Dict, List, Tuple

from confluent_kafka.schema_registry import SchemaRegistryClient
from confluent_kafka.schema_registry.avro import AvroDeserializer
from confluent_kafka.serialization import MessageField, SerializationContext
from fastavro import parse_schema, schemaless_reader

from apps.avro_orders import (OLD_SCHEMA_ORDERS, PAYMENT_WINDOW, add_order, enrich, load_schema, no_totals, pay,
                              produce_sample, sample)
from streamkit.schemas.wire_format import read_header
from streamkit.transport.embedded.transport import EmbeddedTransport
from tests.cli_processes import REPO
from tests.schemas.registry_servers import RegistryProcess

ORDERS = 1_200
MORE_ORDERS = 1_500
"""After the first two workers: orders ``o1200`` to ``o1499`` and their payments."""
ENRICHED, TOTALS = "avro-orders-enriched", "avro-customer-totals"


def expected_outputs(count: int) -> Tuple[Dict[str, dict], Dict[str, dict]]:
    """The model: the enriched order of every paid order (by order id; every payment in
    the sample is within the join window of its order) and the final totals per customer."""
    data = sample(count)
    orders = {key: {"coupon": None, **value} for key, value, _ts in data["avro-orders"]}
    customers = {key: value for key, value, _ts in data["avro-customers"]}
    enriched = {}
    for key, payment, ts in data["avro-payments"]:
        order = orders[key]
        assert abs(ts - order["ts"]) < PAYMENT_WINDOW.size_ms, "the model assumes every payment joins"
        enriched[key] = enrich(pay(order, payment), customers[order["customer_id"]])
    totals: Dict[str, dict] = {}
    for order in enriched.values():
        customer = order["customer_id"]
        totals[customer] = add_order(customer, order, totals.get(customer) or no_totals())
    return enriched, totals


def read_records(broker_dir: Path, topic: str) -> List[Tuple[str, bytes]]:
    """Every committed record of ``topic`` as (key text, raw value bytes)."""
    transport = EmbeddedTransport(str(broker_dir))
    out = []
    try:
        for partition in range(transport.admin.topic(topic).partitions):
            reader = transport.broker.reader(topic, partition)
            while True:
                records = reader.read(10_000)
                if not records:
                    break
                out.extend((record[2].decode(), record[3]) for record in records)
            reader.close()
    finally:
        transport.close()
    return out


def avro_decoder(schema_name: str) -> Callable[[bytes], Tuple[int, dict]]:
    """Decodes a record's value with ``apps/schemas/<schema_name>.avsc``: (schema id, value)."""
    parsed = parse_schema(load_schema(schema_name))

    def decode(data: bytes) -> Tuple[int, dict]:
        schema_id, offset = read_header(data)
        buffer = io.BytesIO(data)
        buffer.seek(offset)
        value = schemaless_reader(buffer, parsed)
        assert buffer.tell() == len(data), "bytes left over after the Avro value"
        return schema_id, value
    return decode


def worker_env(broker_dir: Path) -> Dict[str, str]:
    env = {**os.environ, "STREAMKIT_BROKER": f"embedded://{broker_dir}", "PYTHONPATH": str(REPO)}
    env.pop("AVRO_ORDERS_REGISTRY", None)  # the app's default: the embedded registry
    return env


class Worker:
    """``streamkit worker apps.avro_orders --until-idle 3`` with its log in a file."""

    def __init__(self, broker_dir: Path, tmp_path: Path, name: str) -> None:
        self.log_path = tmp_path / f"{name}.log"
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "streamkit", "worker", "apps.avro_orders", "--until-idle", "3",
                 "--state-dir", str(tmp_path / f"state-{name}")],
                cwd=REPO, env=worker_env(broker_dir), stdout=log, stderr=subprocess.STDOUT)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_for(self, text: str, timeout: float = 30) -> None:
        deadline = time.monotonic() + timeout
        while text not in self.log():
            assert self.process.poll() is None, f"the worker exited before logging {text!r}:\n{self.log()}"
            assert time.monotonic() < deadline, f"the worker logged no {text!r} in {timeout} s:\n{self.log()}"
            time.sleep(0.05)


def test_avro_orders_app_end_to_end(tmp_path: Path) -> None:
    broker_dir = tmp_path / "broker"
    generated = subprocess.run([sys.executable, "-m", "apps.avro_orders", "--generate", str(ORDERS)],
                               capture_output=True, text=True, timeout=60, cwd=REPO, env=worker_env(broker_dir))
    assert generated.returncode == 0, generated.stderr
    assert f"{ORDERS} avro-orders" in generated.stdout

    # The second worker joins once the first started all six tasks: it is handed three of
    # them, restoring their stores from the Avro changelogs the first one wrote.
    workers = [Worker(broker_dir, tmp_path, "first")]
    try:
        workers[0].wait_for("task 1_2 started")
        workers.append(Worker(broker_dir, tmp_path, "second"))
        for worker in workers:
            worker.process.wait(timeout=90)
    finally:
        for worker in workers:
            if worker.process.poll() is None:
                worker.process.kill()
                worker.process.wait()
    for worker in workers:
        assert worker.process.returncode == 0, worker.log()[-3000:]
    assert " started at " in workers[1].log(), "the second worker was given no task"

    written = produce_sample(f"embedded://{broker_dir}", MORE_ORDERS, first_order=ORDERS)
    assert written["avro-orders"] == MORE_ORDERS - ORDERS
    third = Worker(broker_dir, tmp_path, "third")
    try:
        third.process.wait(timeout=90)
    finally:
        if third.process.poll() is None:
            third.process.kill()
            third.process.wait()
    assert third.process.returncode == 0, third.log()[-3000:]
    assert third.log().count(" restored ") == 6, third.log()[-3000:]

    expected_enriched, expected_totals = expected_outputs(MORE_ORDERS)
    decode_enriched, decode_totals = avro_decoder("enriched_order"), avro_decoder("customer_totals")
    enriched_records = read_records(broker_dir, ENRICHED)
    totals_records = read_records(broker_dir, TOTALS)

    # Enriched orders: each paid order exactly once, keyed by its customer, as the model says.
    enriched_ids = set()
    got: Dict[str, dict] = {}
    for key, value in enriched_records:
        schema_id, order = decode_enriched(value)
        enriched_ids.add(schema_id)
        assert key == order["customer_id"]
        got[order["order_id"]] = order
    missing, extra = set(expected_enriched) - set(got), set(got) - set(expected_enriched)
    assert not missing and not extra, f"{len(missing)} paid orders not enriched, {len(extra)} unexpected"
    assert len(enriched_records) == len(expected_enriched), "an enriched order was written more than once"
    assert got == expected_enriched
    old_orders = {f"o{i}" for i in range(OLD_SCHEMA_ORDERS)}
    assert any(got[o]["coupon"] is None for o in old_orders & set(got))
    assert all(got[o]["coupon"] is None for o in old_orders & set(got))
    assert sum(order["coupon"] is not None for order in got.values()) > MORE_ORDERS // 20

    # Totals: the last update per customer is the model's total.
    final_totals: Dict[str, dict] = {}
    totals_ids = set()
    for key, value in totals_records:
        schema_id, totals = decode_totals(value)
        totals_ids.add(schema_id)
        final_totals[key] = totals
    assert final_totals == expected_totals

    # A third-party client through `streamkit registry serve` on the same broker directory.
    registry = RegistryProcess(f"embedded://{broker_dir}", tmp_path / "registry.log")
    try:
        client = SchemaRegistryClient({"url": registry.url})
        assert {client.get_latest_version(f"{ENRICHED}-value").schema_id} == enriched_ids
        assert {client.get_latest_version(f"{TOTALS}-value").schema_id} == totals_ids
        order_versions = client.get_versions("avro-orders-value")
        assert len(order_versions) == 2, "order_v1.avsc and order.avsc, one version each"
        assert "coupon" not in client.get_version("avro-orders-value", order_versions[0]).schema.schema_str

        deserialize = AvroDeserializer(client)
        context = SerializationContext(ENRICHED, MessageField.VALUE)
        assert {(value := deserialize(raw, context))["order_id"]: value for _key, raw in enriched_records} == got
        context = SerializationContext(TOTALS, MessageField.VALUE)
        assert [deserialize(raw, context) for _key, raw in totals_records] == \
               [decode_totals(raw)[1] for _key, raw in totals_records]
    finally:
        assert registry.stop() == 0, registry.log()
