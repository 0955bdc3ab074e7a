"""``streamkit produce/consume --value-format avro|json-schema|protobuf``: real CLI
processes on an embedded broker directory, with the registry kept on that broker
(``--registry embedded``, the default), and a real worker in between."""
from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pytest

from tests.cli_processes import broker_dir, cli  # noqa: F401 (fixtures)

ORDER_AVSC = {"type": "record", "name": "Order", "namespace": "shop",
              "fields": [{"name": "id", "type": "string"}, {"name": "qty", "type": "int"},
                         {"name": "note", "type": ["null", "string"], "default": None}]}
ORDERS = [{"id": "o1", "qty": 1, "note": None}, {"id": "o2", "qty": 5, "note": "gift"},
          {"id": "o3", "qty": 7, "note": None}]


def _lines(records) -> str:
    return "".join(json.dumps(r) + "\n" for r in records)


def _consumed(out) -> list:
    assert out.returncode == 0, out.stderr
    return [json.loads(line) for line in out.stdout.splitlines()]


@pytest.fixture
def avsc(tmp_path: Path) -> Path:
    path = tmp_path / "order.avsc"
    path.write_text(json.dumps(ORDER_AVSC))
    return path


def test_avro_produce_then_consume_as_json_lines(cli, avsc: Path) -> None:
    assert cli("topics", "create", "orders", "--partitions", "2").returncode == 0
    produced = cli("produce", "orders", "--value-format", "avro", "--schema", str(avsc), "--key-field", "id",
                   stdin=_lines(ORDERS))
    assert produced.returncode == 0, produced.stderr
    decoded = _consumed(cli("consume", "orders", "--from-beginning", "--timeout", "0.5", "--value-format", "avro"))
    assert sorted((r["key"], json.dumps(r["value"], sort_keys=True)) for r in decoded) == sorted(
        (o["id"], json.dumps(o, sort_keys=True)) for o in ORDERS)
    raw = _consumed(cli("consume", "orders", "--from-beginning", "--timeout", "0.5"))
    # the wire format, rendered as text or base64: magic byte 0, then the id 1 (b"\0\0\0\0\1")
    assert len(raw) == 3 and all(r["value"].startswith(("\x00\x00\x00\x00\x01", "base64:AAAAAAE")) for r in raw)


def test_avro_keys(cli, avsc: Path, tmp_path: Path) -> None:
    key_schema = tmp_path / "key.avsc"
    key_schema.write_text('"string"')
    cli("topics", "create", "keyed", "--partitions", "3")
    produced = cli("produce", "keyed", "--value-format", "avro", "--schema", str(avsc), "--key-field", "id",
                   "--key-format", "avro", "--key-schema", str(key_schema), stdin=_lines(ORDERS))
    assert produced.returncode == 0, produced.stderr
    decoded = _consumed(cli("consume", "keyed", "--from-beginning", "--timeout", "0.5", "--value-format", "avro",
                            "--key-format", "avro"))
    assert sorted((r["key"], r["value"]["qty"]) for r in decoded) == [("o1", 1), ("o2", 5), ("o3", 7)]
    raw = _consumed(cli("consume", "keyed", "--from-beginning", "--timeout", "0.5"))
    # magic byte, 4-byte id, then Avro's string: zigzag length 2 (0x04) and the text
    assert sorted((r["key"][:4], r["key"][5:]) for r in raw) == [("\x00" * 4, f"\x04{o['id']}") for o in ORDERS]


def test_a_line_that_does_not_fit_the_schema_stops_produce_after_the_lines_before(cli, avsc: Path) -> None:
    cli("topics", "create", "orders")
    bad = cli("produce", "orders", "--value-format", "avro", "--schema", str(avsc),
              stdin=_lines([ORDERS[0], {"id": "o9", "qty": "many"}, ORDERS[1]]))
    assert bad.returncode == 1
    assert "line 2: Avro serde (topic 'orders' value, subject 'orders-value', schema id 1)" in bad.stderr
    assert "Traceback" not in bad.stderr
    decoded = _consumed(cli("consume", "orders", "--from-beginning", "--timeout", "0.5", "--value-format", "avro"))
    assert [r["value"] for r in decoded] == [ORDERS[0]]
    missing = cli("produce", "orders", "--value-format", "avro", stdin="{}\n")
    assert missing.returncode == 2 and "--value-format avro needs --schema FILE" in missing.stderr


def test_consume_prints_records_that_do_not_decode_raw_with_the_error(cli, avsc: Path) -> None:
    cli("topics", "create", "mixed")
    cli("produce", "mixed", "--value-format", "avro", "--schema", str(avsc), stdin=_lines(ORDERS[:1]))
    cli("produce", "mixed", stdin='{"plain": true}\n')
    decoded = _consumed(cli("consume", "mixed", "--from-beginning", "--timeout", "0.5", "--value-format", "avro"))
    assert decoded[0]["value"] == ORDERS[0] and "error" not in decoded[0]
    assert decoded[1]["value"] == {"plain": True}
    assert "unknown magic byte 123" in decoded[1]["error"]


def test_a_worker_reads_and_writes_avro_on_the_brokers_registry(cli, avsc: Path, tmp_path: Path) -> None:
    big = {"type": "record", "name": "BigOrder", "namespace": "shop",
           "fields": [{"name": "id", "type": "string"}, {"name": "qty", "type": "int"}]}
    (tmp_path / "avro_app.py").write_text(textwrap.dedent(f"""
        import streamkit as sk

        app = sk.App("avro-app", store_backend="memory")
        app.topic("orders", value_serde=sk.serdes.Avro({json.dumps(ORDER_AVSC)!r}, registry="embedded"))
        app.topic("big-orders", value_serde=sk.serdes.Avro({json.dumps(big)!r}, registry="embedded"))

        @app.topology
        def build(b):
            (b.stream("orders").filter(lambda k, v: v["qty"] > 1)
             .map_values(lambda v: {{"id": v["id"], "qty": v["qty"]}}).to("big-orders"))
    """))
    cli("topics", "create", "orders", "--partitions", "2")
    cli("topics", "create", "big-orders", "--partitions", "2")
    cli("produce", "orders", "--value-format", "avro", "--schema", str(avsc), "--key-field", "id",
        stdin=_lines(ORDERS))
    ran = cli("worker", "avro_app:app", "--until-idle", "1", cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr
    decoded = _consumed(cli("consume", "big-orders", "--from-beginning", "--timeout", "0.5",
                            "--value-format", "avro"))
    assert sorted((r["key"], r["value"]["qty"]) for r in decoded) == [("o2", 5), ("o3", 7)]


def test_json_schema_produce_validates_and_consume_decodes(cli, tmp_path: Path) -> None:
    schema = tmp_path / "order.json"
    schema.write_text(json.dumps({"title": "Order", "type": "object", "required": ["id"],
                                  "properties": {"id": {"type": "string"}, "qty": {"type": "integer"}}}))
    cli("topics", "create", "json-orders")
    ok = cli("produce", "json-orders", "--value-format", "json-schema", "--schema", str(schema),
             stdin='{"id": "o1", "qty": 2}\n{"id": 7}\n')
    assert ok.returncode == 1 and "line 2:" in ok.stderr and "fails validation at /id" in ok.stderr
    decoded = _consumed(cli("consume", "json-orders", "--from-beginning", "--timeout", "0.5",
                            "--value-format", "json-schema"))
    assert [r["value"] for r in decoded] == [{"id": "o1", "qty": 2}]


def test_protobuf_produce_and_consume_with_an_imported_file(cli, tmp_path: Path) -> None:
    (tmp_path / "shop").mkdir()
    (tmp_path / "shop" / "money.proto").write_text(
        'syntax = "proto3";\npackage shop;\nmessage Money { string currency = 1; int64 cents = 2; }\n')
    proto = tmp_path / "order.proto"
    proto.write_text('syntax = "proto3";\npackage shop;\nimport "shop/money.proto";\n'
                     'message Order { string id = 1; shop.Money price = 2; }\n'
                     'message Refund { string order_id = 1; int32 cents = 2; }\n')
    cli("topics", "create", "refunds")
    produced = cli("produce", "refunds", "--value-format", "protobuf", "--schema", str(proto), "--message", "Refund",
                   "--key-field", "order_id", stdin='{"order_id": "o1", "cents": 250}\n')
    assert produced.returncode == 0, produced.stderr
    # a consumer without the .proto builds the classes from the registry
    decoded = _consumed(cli("consume", "refunds", "--from-beginning", "--timeout", "0.5",
                            "--value-format", "protobuf"))
    assert [(r["key"], r["value"]) for r in decoded] == [("o1", {"order_id": "o1", "cents": 250})]
    cli("topics", "create", "orders")
    produced = cli("produce", "orders", "--value-format", "protobuf", "--schema", str(proto),
                   stdin='{"id": "o1", "price": {"currency": "EUR", "cents": "990"}}\n')
    assert produced.returncode == 0, produced.stderr
    decoded = _consumed(cli("consume", "orders", "--from-beginning", "--timeout", "0.5",
                            "--value-format", "protobuf", "--schema", str(proto)))
    assert decoded[0]["value"] == {"id": "o1", "price": {"currency": "EUR", "cents": "990"}}
    unknown = cli("produce", "orders", "--value-format", "protobuf", "--schema", str(proto), "--message", "Nope",
                  stdin="{}\n")
    assert unknown.returncode == 2 and "--message Nope" in unknown.stderr and "Order, Refund" in unknown.stderr
