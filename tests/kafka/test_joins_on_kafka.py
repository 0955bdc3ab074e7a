"""apps/orders.py (stream-stream join, left join at window close, repartition into a
stream-table join, global table) on a Kafka-protocol broker, with its worker killed by
SIGKILL during the run: under at_least_once no paid order is missing from the output
and no order is wrongly reported unpaid; under exactly_once (a broker with
transactions, e.g. ``STREAMKIT_TEST_KAFKA``) each result appears exactly once."""
from __future__ import annotations

import json
import signal
import time
from collections import Counter

from apps.orders import PAYMENT_WINDOW, orders_app, produce_sample, sample

from .topics import create_app_topics
from .workers import KafkaApp, stop

ORDERS = 4_000


def _run_with_a_kill(broker, tmp_path, name: str, *guarantee: str):
    app = KafkaApp(broker, tmp_path, name)
    prefix = f"{name}-"
    (tmp_path / f"{app.module}.py").write_text(
        f"from apps.orders import orders_app\napp = orders_app({name!r}, prefix={prefix!r})\n")
    # The sample's event times (record timestamps of inputs and outputs) are from 2023: every
    # topic is created first, keeping its records; produce_sample leaves existing ones alone.
    create_app_topics(broker, orders_app(name, prefix=prefix))
    produce_sample(broker.url, ORDERS, prefix=prefix)

    log = tmp_path / "first.log"
    worker = app.worker(*guarantee, "--until-idle", "20", state="s", log=log)
    try:
        deadline = time.monotonic() + 60
        while "assigned this worker" not in log.read_text() and time.monotonic() < deadline:
            time.sleep(0.2)
        time.sleep(1.5)
        killed_mid_run = worker.poll() is None
        worker.send_signal(signal.SIGKILL)
        worker.wait(timeout=30)
    finally:
        stop([worker])
    app.run_until_idle("s", *guarantee)

    def order_ids(topic: str) -> Counter:
        out = app.cli("consume", f"{prefix}{topic}", "--from-beginning", "--timeout", "2")
        assert out.returncode == 0, out.stderr
        return Counter(json.loads(line)["value"]["order_id"] for line in out.stdout.splitlines())
    return order_ids("orders-enriched"), order_ids("orders-unpaid"), killed_mid_run


def _expected():
    data = sample(ORDERS)
    paid = {key for key, _value, _ts in data["payments"]}
    last = max(ts for rows in (data["orders"], data["payments"]) for _k, _v, ts in rows)
    unpaid = {key: ts for key, _value, ts in data["orders"] if key not in paid}
    # a window surely closed: the end of input is past it by more than any task's lag behind it
    closed = {key for key, ts in unpaid.items() if PAYMENT_WINDOW.left_close_time(ts) + 10_000 <= last}
    return paid, set(unpaid), closed


def test_orders_app_loses_nothing_across_a_kill(kafka, tmp_path, unique_name) -> None:
    enriched, unpaid, killed_mid_run = _run_with_a_kill(kafka, tmp_path, unique_name("orders"))
    paid, all_unpaid, closed = _expected()
    assert set(enriched) == paid, f"{len(paid - set(enriched))} paid orders missing"
    assert set(unpaid) <= all_unpaid, "orders with a payment reported unpaid"
    assert closed <= set(unpaid), f"{len(closed - set(unpaid))} unpaid orders whose window closed are missing"
    print(f"\n{len(paid)} paid orders all enriched, {len(unpaid)} unpaid reported "
          f"({'killed mid-run' if killed_mid_run else 'the first worker had finished before the kill'})")


def test_orders_app_exactly_once_across_a_kill(transactional_kafka, tmp_path, unique_name) -> None:
    enriched, unpaid, _ = _run_with_a_kill(transactional_kafka, tmp_path, unique_name("orders-eos"),
                                           "--guarantee", "exactly_once")
    paid, all_unpaid, closed = _expected()
    assert enriched == Counter({order: 1 for order in paid})
    assert set(unpaid) <= all_unpaid and closed <= set(unpaid) and max(unpaid.values()) == 1
