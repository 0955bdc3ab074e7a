"""Orders, paid and enriched: every order joined with its payment (within 5 minutes of
event time), then with its customer (a table) and the customer's region (a global
table). Orders still unpaid when their window closes go to ``orders-unpaid``.

    python -m apps.orders --generate 2000     # create the topics and write sample data
    streamkit worker apps.orders --until-idle 2
    streamkit consume orders-enriched --from-beginning --timeout 1

Topics (keys are strings, values JSON):

- ``orders``    key order id:    ``{"order_id", "customer_id", "amount", "ts"}``
- ``payments``  key order id:    ``{"order_id", "amount", "ts"}``
- ``customers`` key customer id: ``{"name", "region"}``  (3 partitions, a table)
- ``regions``   key region code: ``{"name"}``            (1 partition, a global table)
"""
from __future__ import annotations

import argparse
import random
from datetime import timedelta
from typing import Dict, List, Tuple

import streamkit as sk

PAYMENT_WINDOW = sk.JoinWindows.of(timedelta(minutes=5), grace=timedelta(seconds=30))


def event_time(key: str, value: dict) -> int:
    return value["ts"]


def orders_app(app_id: str = "orders", prefix: str = "") -> sk.App:
    """The app, with ``prefix`` before every topic name (tests run several on one broker)."""
    app = sk.App(app_id)
    text, json = sk.serdes.String(), sk.serdes.Json()
    orders_topic = app.topic(f"{prefix}orders", key_serde=text, value_serde=json, partitions=3)
    payments_topic = app.topic(f"{prefix}payments", key_serde=text, value_serde=json, partitions=3)
    customers_topic = app.topic(f"{prefix}customers", key_serde=text, value_serde=json, partitions=3)
    regions_topic = app.topic(f"{prefix}regions", key_serde=text, value_serde=json, partitions=1)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        orders = b.stream(orders_topic, timestamp=event_time)
        payments = b.stream(payments_topic, timestamp=event_time)
        customers = b.table(customers_topic, "customers")
        regions = b.global_table(regions_topic)

        paid = orders.join(payments, lambda order, payment: {**order, "paid": payment["amount"]},
                           PAYMENT_WINDOW, name="paid")
        enriched = (paid.select_key(lambda order_id, order: order["customer_id"], name="by-customer")
                        .join(customers, lambda order, customer: {**order, "customer": customer["name"],
                                                                  "region_code": customer["region"]},
                              name="with-customer"))
        (enriched.join(regions, key_selector=lambda customer_id, order: order["region_code"],
                       joiner=lambda order, region: {**order, "region": region["name"]}, name="with-region")
                 .to(f"{prefix}orders-enriched", key_serde=text, value_serde=json))

        (orders.left_join(payments, lambda order, payment: None if payment is not None else order,
                          PAYMENT_WINDOW, name="unpaid-check")
               .filter(lambda order_id, order: order is not None, name="unpaid")
               .to(f"{prefix}orders-unpaid", key_serde=text, value_serde=json))
    return app


app = orders_app()


REGIONS = {"eu": "Europe", "us": "United States", "ap": "Asia Pacific"}


def sample(count: int, *, seed: int = 1, customers: int = 50, start_ms: int = 1_700_000_000_000
           ) -> Dict[str, List[Tuple[str, dict, int]]]:
    """Deterministic sample data per topic: ``(key, value, timestamp)``. About 90% of the
    orders are paid within two minutes; customers and regions are written first."""
    rng = random.Random(seed)
    data: Dict[str, List[Tuple[str, dict, int]]] = {
        "regions": [(code, {"name": name}, start_ms - 1) for code, name in REGIONS.items()],
        "customers": [(f"c{i}", {"name": f"customer {i}", "region": rng.choice(list(REGIONS))}, start_ms - 1)
                      for i in range(customers)],
        "orders": [], "payments": []}
    for i in range(count):
        ts = start_ms + i * 400 + rng.randrange(0, 2_000)
        order_id = f"o{i}"
        order = {"order_id": order_id, "customer_id": f"c{rng.randrange(customers)}",
                 "amount": rng.randrange(5, 500), "ts": ts}
        data["orders"].append((order_id, order, ts))
        if rng.random() < 0.9:
            paid_at = ts + rng.randrange(-30_000, 120_000)
            data["payments"].append((order_id, {"order_id": order_id, "amount": order["amount"], "ts": paid_at},
                                     paid_at))
    data["payments"].sort(key=lambda record: record[2])
    return data


def produce_sample(broker: str, count: int, *, seed: int = 1, prefix: str = "") -> Dict[str, int]:
    """Create the app's input topics (named with ``prefix``) on ``broker`` and write
    :func:`sample` data; return the records written per topic."""
    from streamkit.transport.factory import open_transport

    from .sample_writer import by_partition, send_batches

    declared = orders_app(prefix=prefix)
    transport = open_transport(broker)
    written: Dict[str, int] = {}
    try:
        batches = []
        for topic, rows in sample(count, seed=seed).items():
            topic = f"{prefix}{topic}"
            spec = declared.topics[topic]
            transport.admin.create_topic(topic, spec.partitions or 1, exist_ok=True)
            batches += by_partition(topic, spec.partitions or 1, (
                (spec.key_serde.serialize(key), spec.value_serde.serialize(value), ts) for key, value, ts in rows))
            written[topic] = len(rows)
        send_batches(transport, batches)
    finally:
        transport.close()
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description="write sample data for apps.orders to its broker")
    parser.add_argument("--generate", type=int, metavar="ORDERS", required=True)
    parser.add_argument("--broker", default=None, help="default: the app's broker (embedded://.streamkit)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    broker = app.resolve_broker(args.broker)
    written = produce_sample(broker, args.generate, seed=args.seed)
    print(f"wrote {', '.join(f'{n} {topic}' for topic, n in written.items())} to {broker}")


if __name__ == "__main__":
    main()
