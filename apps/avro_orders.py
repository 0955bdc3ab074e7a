"""Orders in Avro: every order joined with its payment (within 5 minutes of event time),
then with its customer (a table), written as Avro; and running totals per customer in
a keyed store whose state is Avro too. Every topic's values are in Confluent's wire
format (``[0][schema id][Avro binary]``), their schemas in a Schema Registry.

    python -m apps.avro_orders --generate 2000    # create the topics, register the schemas, write sample data
    streamkit worker apps.avro_orders --until-idle 2
    streamkit consume avro-orders-enriched --from-beginning --timeout 1 --value-format avro

Schemas are the ``.avsc`` files in ``apps/schemas/``. The registry is the embedded one
(``registry="embedded"``: kept in the ``_schemas`` topic of the app's broker, what
``streamkit registry serve`` serves over HTTP); set ``AVRO_ORDERS_REGISTRY`` to an
``http(s)://`` URL to use another Schema Registry (this example's own variable: a
serde's ``registry=`` is set per serde, streamkit has no global one).

Topics (keys are plain UTF-8 strings, values Avro):

- ``avro-orders``    key order id:    ``Order`` (``order.avsc``; the sample's first
  orders are written with ``order_v1.avsc``, which lacks ``coupon``: the app reads those
  with its own schema and gets ``coupon = None``, Avro's schema resolution)
- ``avro-payments``  key order id:    ``Payment``
- ``avro-customers`` key customer id: ``Customer`` (a table)
- ``avro-orders-enriched`` key customer id: ``EnrichedOrder``, one per paid order
- ``avro-customer-totals`` key customer id: ``CustomerTotals``, each update of a
  customer's totals (the last one per key is the current total)

The join buffers, the repartition topic (``PaidOrder``, re-keyed by customer) and the
totals store are Avro as well, each under its own subject
(``<app-id>-<store>-changelog-value``, ``<app-id>-<name>-repartition-value``).
Evolution-friendly choices: optional fields are ``["null", ...]`` unions with a
``null`` default; the store's record gives every field but the key a default, so a
later version of the app may add fields (with defaults) and still restore the state
an older version wrote; ``method`` is a string with a default rather than an enum.
"""
from __future__ import annotations

import argparse
import json
import os
from datetime import timedelta
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import streamkit as sk
from apps.orders import sample as json_sample

SCHEMAS = Path(__file__).resolve().parent / "schemas"
PAYMENT_WINDOW = sk.JoinWindows.of(timedelta(minutes=5), grace=timedelta(seconds=30))
OLD_SCHEMA_ORDERS = 100
"""The sample's first orders (``o0`` to ``o99``) are written with ``order_v1.avsc``."""
METHODS = ("card", "transfer", "wallet")


def load_schema(name: str) -> Dict[str, Any]:
    """The parsed Avro schema ``apps/schemas/<name>.avsc``."""
    return json.loads((SCHEMAS / f"{name}.avsc").read_text())


def default_registry() -> str:
    """``$AVRO_ORDERS_REGISTRY`` if set, else ``"embedded"``."""
    return os.environ.get("AVRO_ORDERS_REGISTRY") or "embedded"


def event_time(key: str, value: dict) -> int:
    return value["ts"]


def pay(order: dict, payment: dict) -> dict:
    """Joiner of an order and its payment: a ``PaidOrder``."""
    return {**order, "paid_cents": payment["amount_cents"], "paid_ts": payment["ts"], "method": payment["method"]}


def enrich(paid: dict, customer: dict) -> dict:
    """Joiner of a paid order and its customer: an ``EnrichedOrder``."""
    return {"order_id": paid["order_id"], "customer_id": paid["customer_id"], "customer_name": customer["name"],
            "region": customer["region"], "amount_cents": paid["amount_cents"], "paid_cents": paid["paid_cents"],
            "ts": paid["ts"], "paid_ts": paid["paid_ts"], "method": paid["method"], "coupon": paid["coupon"]}


def no_totals() -> dict:
    """A customer's totals before its first paid order (``customer_id`` is set by :func:`add_order`)."""
    return {"customer_id": "", "orders": 0, "paid_cents": 0, "last_order_ts": 0, "coupon_orders": 0}


def add_order(customer_id: str, order: dict, totals: dict) -> dict:
    """Fold one enriched order into its customer's ``CustomerTotals`` (order-independent:
    sums and a maximum, so the final totals do not depend on processing order)."""
    return {"customer_id": customer_id, "orders": totals["orders"] + 1,
            "paid_cents": totals["paid_cents"] + order["paid_cents"],
            "last_order_ts": max(totals["last_order_ts"], order["ts"]),
            "coupon_orders": totals["coupon_orders"] + (order["coupon"] is not None)}


def avro_orders_app(app_id: str = "avro-orders", prefix: str = "", registry: Optional[str] = None) -> sk.App:
    """The app, with ``prefix`` before every topic name (tests run several on one broker);
    ``registry``: the serdes' ``registry=`` (default :func:`default_registry`)."""
    registry = registry or default_registry()
    app = sk.App(app_id)
    text = sk.serdes.String()

    def avro(name: str) -> Any:
        return sk.serdes.Avro(load_schema(name), registry=registry)

    order, payment, paid_order = avro("order"), avro("payment"), avro("paid_order")
    enriched_order, totals = avro("enriched_order"), avro("customer_totals")
    orders_topic = app.topic(f"{prefix}avro-orders", key_serde=text, value_serde=order, partitions=3)
    payments_topic = app.topic(f"{prefix}avro-payments", key_serde=text, value_serde=payment, partitions=3)
    customers_topic = app.topic(f"{prefix}avro-customers", key_serde=text, value_serde=avro("customer"),
                                partitions=3)
    enriched_topic = app.topic(f"{prefix}avro-orders-enriched", key_serde=text, value_serde=enriched_order,
                               partitions=3)
    totals_topic = app.topic(f"{prefix}avro-customer-totals", key_serde=text, value_serde=totals, partitions=3)

    @app.topology
    def build(b: sk.StreamsBuilder) -> None:
        orders = b.stream(orders_topic, timestamp=event_time)
        payments = b.stream(payments_topic, timestamp=event_time)
        customers = b.table(customers_topic, "customers")

        paid = orders.join(payments, pay, PAYMENT_WINDOW, name="paid", key_serde=text,
                           value_serde=order, other_value_serde=payment)
        enriched = (paid.select_key(lambda order_id, value: value["customer_id"], name="by-customer")
                        .join(customers, enrich, name="with-customer", key_serde=text, value_serde=paid_order))
        enriched.to(enriched_topic)
        (enriched.group_by_key(key_serde=text, value_serde=enriched_order)
                 .aggregate(no_totals, add_order, name="customer-totals", value_serde=totals)
                 .to_stream()
                 .to(totals_topic))
    return app


app = avro_orders_app()


def sample(count: int, *, seed: int = 1) -> Dict[str, List[Tuple[str, dict, int]]]:
    """Deterministic sample data per topic, ``(key, value, timestamp)``, in the Avro
    schemas' shape: :func:`apps.orders.sample`'s orders, payments and customers (about
    90% of the orders paid within two minutes), amounts in cents, every 7th order
    with a coupon and payment methods in turn. The first :data:`OLD_SCHEMA_ORDERS`
    orders have no ``coupon`` key: they are written with ``order_v1.avsc``. Order ``o<i>``
    and its payment are the same whatever ``count`` is (a larger sample extends a
    smaller one)."""
    data = json_sample(count, seed=seed)
    orders = []
    for i, (key, value, ts) in enumerate(data["orders"]):
        order = {"order_id": value["order_id"], "customer_id": value["customer_id"],
                 "amount_cents": value["amount"] * 100, "ts": value["ts"]}
        if i >= OLD_SCHEMA_ORDERS:
            order["coupon"] = "WELCOME10" if i % 7 == 0 else None
        orders.append((key, order, ts))
    payments = [(key, {"order_id": value["order_id"], "amount_cents": value["amount"] * 100, "ts": value["ts"],
                       "method": METHODS[int(key[1:]) % len(METHODS)]}, ts)
                for key, value, ts in data["payments"]]
    return {"avro-customers": data["customers"], "avro-orders": orders, "avro-payments": payments}


def produce_sample(broker: str, count: int, *, seed: int = 1, prefix: str = "",
                   registry: Optional[str] = None, first_order: int = 0) -> Dict[str, int]:
    """Create the app's topics (named with ``prefix``) on ``broker``, register the schemas
    (``registry``: as :func:`avro_orders_app`'s) and write :func:`sample` data with the
    app's serdes (orders without ``coupon`` with ``order_v1.avsc``, registered first under
    the same subject); return the records written per topic. ``first_order``: write only
    orders ``o<first_order>`` on and their payments, and no customers (more of the same
    sample, after an earlier call wrote its first ``first_order`` orders)."""
    from streamkit.transport.factory import open_transport

    from .sample_writer import by_partition, send_batches

    registry = registry or default_registry()
    declared = avro_orders_app(prefix=prefix, registry=registry)
    transport = open_transport(broker)
    written: Dict[str, int] = {}
    try:
        for spec in declared.topics.values():
            transport.admin.create_topic(spec.name, spec.partitions or 1, exist_ok=True)
        batches = []
        data = sample(count, seed=seed)
        if first_order:
            data = {topic: [row for row in data[topic] if int(row[0][1:]) >= first_order]
                    for topic in ("avro-orders", "avro-payments")}
        for topic, rows in data.items():
            topic = f"{prefix}{topic}"
            spec = declared.topics[topic]
            key_serde = spec.key_serde.for_topic(topic, True, broker=broker)
            value_serde = spec.value_serde.for_topic(topic, False, broker=broker)
            old_serde = sk.serdes.Avro(load_schema("order_v1"), registry=registry).for_topic(
                topic, False, broker=broker)

            def encode(value: dict) -> bytes:
                # orders without a coupon are written with the old schema, as an older producer would
                serde = old_serde if topic.endswith("avro-orders") and "coupon" not in value else value_serde
                return serde.serialize(value)
            batches += by_partition(topic, spec.partitions or 1, (
                (key_serde.serialize(key), encode(value), ts) for key, value, ts in rows))
            written[topic] = len(rows)
        send_batches(transport, batches)
    finally:
        transport.close()
    return written


def main() -> None:
    parser = argparse.ArgumentParser(description="register the schemas of apps.avro_orders and write sample data")
    parser.add_argument("--generate", type=int, metavar="ORDERS", required=True)
    parser.add_argument("--broker", default=None, help="default: the app's broker (embedded://.streamkit)")
    parser.add_argument("--registry", default=None,
                        help="http(s)://host:port or 'embedded' (default: $AVRO_ORDERS_REGISTRY, else embedded)")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    broker = app.resolve_broker(args.broker)
    written = produce_sample(broker, args.generate, seed=args.seed, registry=args.registry)
    print(f"wrote {', '.join(f'{n} {topic}' for topic, n in written.items())} to {broker}")


if __name__ == "__main__":
    main()
