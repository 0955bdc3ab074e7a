"""Protobuf schemas as the registry holds them: text and base64 parsed by the real protoc,
descriptors printed back as text, message classes, and Confluent's message indexes
(checked against confluent-kafka's own helpers)."""
from __future__ import annotations

import base64
import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest
from google.protobuf import descriptor_pb2, timestamp_pb2
from google.rpc import status_pb2
from grpc_tools import protoc

from streamkit.schemas import protobuf_text as pt
from streamkit.schemas.model import InvalidSchema, Schema, SchemaNotFound, SchemaReference, SchemaType

MONEY = """
syntax = "proto3";
package shop.common;
message Money {
  string currency = 1;
  int64 units = 2;
  int32 nanos = 3;
}
"""

ORDERS = """
syntax = "proto3";
package shop.orders;
import "shop/common/money.proto";
import "google/protobuf/timestamp.proto";
option java_package = "com.example.shop";
option java_multiple_files = true;

enum Status {
  STATUS_UNSPECIFIED = 0;
  PLACED = 1;
  SHIPPED = 2;
  reserved 7, 9 to 11;
  reserved "LOST";
}

message Order {
  string id = 1;
  repeated Line lines = 2;
  map<string, string> labels = 3;
  oneof payment {
    string card = 4;
    Voucher voucher = 5;
  }
  optional string note = 6 [deprecated = true];
  google.protobuf.Timestamp placed_at = 7;
  shop.common.Money total = 8;
  Status status = 9;
  repeated int32 codes = 10 [packed = false];
  string customer_id = 11 [json_name = "customer"];
  reserved 20 to 25, 30;
  reserved "legacy";

  message Line {
    string sku = 1;
    int32 quantity = 2;
    message Discount {
      double rate = 1;
    }
    Discount discount = 3;
  }
  message Voucher { string code = 1; }
  enum Channel { WEB = 0; STORE = 1; }
}

message Refund {
  string order_id = 1;
  map<int32, Order.Line> lines = 2;
}

service Orders {
  rpc Place (Order) returns (Order);
  rpc Watch (Order) returns (stream Order) { option deprecated = true; }
}
"""

LEGACY = """
syntax = "proto2";
package legacy;
message Reading {
  required string sensor = 1;
  optional double value = 2 [default = -1.5];
  optional string unit = 3 [default = "deg \\"C\\"\\n"];
  optional bytes raw = 4 [default = "\\001\\377"];
  optional Kind kind = 5 [default = HUMIDITY];
  optional group Location = 6 {
    optional float lat = 1;
    optional float lon = 2;
  }
  repeated sint64 deltas = 7 [packed = true];
  extensions 100 to 199, 1000 to max;
  enum Kind { TEMPERATURE = 1; HUMIDITY = 2; }
}
extend Reading {
  optional string calibrated_by = 100;
}
enum Unused {
  option allow_alias = true;
  A = 0;
  B = 0;
}
"""

EDITION_2023 = """
edition = "2023";
package ed;
option features.field_presence = IMPLICIT;
message M {
  int32 a = 1 [features.field_presence = EXPLICIT];
  repeated int32 b = 2 [features.repeated_field_encoding = EXPANDED];
  M child = 3 [features.message_encoding = DELIMITED];
  enum E { option features.enum_type = CLOSED; X = 1; }
}
"""

IMPORTS = {"shop/common/money.proto": MONEY}


def test_parse_compiles_the_file_and_its_imports_in_dependency_order() -> None:
    parsed = pt.parse(ORDERS, IMPORTS)
    assert parsed.file.name == pt.DEFAULT_NAME
    assert parsed.file.package == "shop.orders"
    assert [f.name for f in parsed.dependencies] == ["shop/common/money.proto", "google/protobuf/timestamp.proto"]
    assert [m.name for m in parsed.file.message_type] == ["Order", "Refund"]
    order = parsed.file.message_type[0]
    # protoc puts a map's entry type where the map field is declared
    assert [n.name for n in order.nested_type] == ["LabelsEntry", "Line", "Voucher"]
    assert order.oneof_decl[0].name == "payment"
    assert parsed.files[-1] is parsed.file


@pytest.mark.parametrize("text, imports", [(ORDERS, IMPORTS), (LEGACY, {}), (MONEY, {}), (EDITION_2023, {})],
                         ids=["proto3", "proto2", "plain", "edition-2023"])
def test_text_to_descriptor_to_text_round_trips(text: str, imports: dict) -> None:
    first = pt.parse(text, imports)
    printed = pt.to_proto_text(first.file)
    second = pt.parse(printed, imports)
    assert second.file == first.file
    assert pt.to_proto_text(second.file) == printed  # the printed form is a fixed point


def test_printed_text_spells_the_constructs_as_proto_does() -> None:
    printed = pt.to_proto_text(pt.parse(ORDERS, IMPORTS).file)
    assert 'syntax = "proto3";' in printed
    assert 'import "shop/common/money.proto";' in printed
    assert "map<string, string> labels = 3;" in printed
    assert "oneof payment {" in printed
    assert "optional string note = 6 [deprecated = true];" in printed
    assert 'string customer_id = 11 [json_name = "customer"];' in printed
    assert "reserved 20 to 25, 30;" in printed
    assert "rpc Watch (.shop.orders.Order) returns (stream .shop.orders.Order) { option deprecated = true; }" in printed
    assert "LabelsEntry" not in printed

    legacy = pt.to_proto_text(pt.parse(LEGACY).file)
    assert "required string sensor = 1;" in legacy
    assert "optional group Location = 6 {" in legacy
    assert "extensions 100 to 199;" in legacy and "extensions 1000 to max;" in legacy
    assert "extend .legacy.Reading {" in legacy
    assert "optional .legacy.Reading.Kind kind = 5 [default = HUMIDITY];" in legacy


def _without_json_names(file: descriptor_pb2.FileDescriptorProto) -> descriptor_pb2.FileDescriptorProto:
    """``file`` less the json_names protoc derives from field names (protoc's python
    plugin leaves them out of generated code, ``--descriptor_set_out`` writes them)."""
    copy = descriptor_pb2.FileDescriptorProto()
    copy.CopyFrom(file)
    pending = list(copy.message_type)
    while pending:
        message = pending.pop()
        for field in message.field:
            field.ClearField("json_name")
        pending.extend(message.nested_type)
    return copy


def test_descriptor_of_a_generated_class_prints_as_text_that_parses_back() -> None:
    """What a Java client does: register a message class's file as text."""
    original = descriptor_pb2.FileDescriptorProto.FromString(status_pb2.DESCRIPTOR.serialized_pb)
    text = pt.to_proto_text(status_pb2.Status.DESCRIPTOR.file)
    parsed = pt.parse(text, name=original.name)
    assert _without_json_names(parsed.file) == original
    assert [f.name for f in parsed.dependencies] == ["google/protobuf/any.proto"]


def test_a_base64_descriptor_from_confluent_kafkas_serializer_parses() -> None:
    from confluent_kafka.schema_registry.common.protobuf import _schema_to_str

    registered = _schema_to_str(status_pb2.Status.DESCRIPTOR.file)  # what ProtobufSerializer registers
    assert pt.is_serialized(registered)
    assert pt.to_serialized(status_pb2.DESCRIPTOR) == registered
    parsed = pt.parse(registered)
    assert parsed.file.name == "google/rpc/status.proto"
    assert parsed.file == descriptor_pb2.FileDescriptorProto.FromString(status_pb2.DESCRIPTOR.serialized_pb)

    status_class = pt.message_class(registered, "google.rpc.Status")
    written = status_pb2.Status(code=5, message="not found").SerializeToString()
    decoded = status_class.FromString(written)
    assert (decoded.code, decoded.message) == (5, "not found")


def test_imports_may_be_base64_too() -> None:
    money = pt.parse(MONEY, name="shop/common/money.proto").file
    parsed = pt.parse(ORDERS, {"shop/common/money.proto": pt.to_serialized(money)})
    assert parsed.dependencies[0] == money


def test_from_serialized_renames_as_the_reference_says() -> None:
    encoded = pt.to_serialized(pt.parse(MONEY).file)
    assert pt.from_serialized(encoded, "shop/common/money.proto").name == "shop/common/money.proto"
    assert pt.from_serialized(encoded).name == pt.DEFAULT_NAME


@pytest.mark.parametrize("text, imports, message", [
    ('syntax = "proto3";\nmessage A {\n  int32 x = 1\n}\n', {}, 'schema.proto:4:1: Expected ";".'),
    ('syntax = "proto3"; message A { Missing m = 1; }', {}, '"Missing" is not defined.'),
    ('syntax = "proto3"; message A { int32 x = 1; int32 y = 1; }', {}, "Field number 1 has already been used"),
    ('syntax = "proto3"; import "absent.proto"; message A {}', {}, "absent.proto: File not found."),
    ('syntax = "proto3"; import "dep.proto"; message A {}', {"dep.proto": "message {"}, "dep.proto:1:9"),
    ('syntax = "proto4";', {}, "Unrecognized syntax identifier"),
], ids=["syntax", "unknown-type", "duplicate-number", "missing-import", "bad-import", "bad-syntax"])
def test_what_protoc_refuses_is_an_invalid_schema_with_its_message(text: str, imports: dict, message: str) -> None:
    with pytest.raises(InvalidSchema) as caught:
        pt.parse(text, imports)
    assert message in caught.value.message
    assert caught.value.error_code == 42201


def test_garbage_base64_and_escaping_import_paths_are_invalid() -> None:
    with pytest.raises(InvalidSchema, match="not a base64 FileDescriptorProto"):
        pt.parse(base64.b64encode(b"\xff\xff\xff").decode())
    with pytest.raises(InvalidSchema, match="leaves the source tree"):
        pt.parse(MONEY, {"../../etc/x.proto": MONEY})
    with pytest.raises(InvalidSchema, match="also an import path"):
        pt.parse(MONEY, {pt.DEFAULT_NAME: MONEY})


def test_is_serialized_tells_text_from_base64() -> None:
    assert not pt.is_serialized(MONEY)
    assert not pt.is_serialized('syntax = "proto3";')
    assert not pt.is_serialized("")
    assert pt.is_serialized(pt.to_serialized(pt.parse(MONEY).file))


def test_confluents_builtin_meta_proto_needs_no_reference() -> None:
    text = """
    syntax = "proto3";
    import "confluent/meta.proto";
    message Tagged { string ssn = 1 [(confluent.field_meta).tags = "PII"]; }
    """
    parsed = pt.parse(text)
    assert "confluent/meta.proto" in [f.name for f in parsed.dependencies]
    printed = pt.to_proto_text(parsed.file)
    assert '[(confluent.field_meta) = { tags: "PII" }]' in printed
    assert pt.parse(printed).file == parsed.file


def test_collect_imports_follows_references_transitively() -> None:
    registry = {
        ("money", 1): Schema(MONEY, SchemaType.PROTOBUF),
        ("orders", 3): Schema(ORDERS, SchemaType.PROTOBUF, (SchemaReference("shop/common/money.proto", "money", 1),)),
    }
    top = Schema('syntax = "proto3"; import "shop/orders.proto"; message Envelope { shop.orders.Order o = 1; }',
                 SchemaType.PROTOBUF,
                 (SchemaReference("shop/orders.proto", "orders", 3),
                  SchemaReference("google/protobuf/timestamp.proto", "ignored", 1)))
    imports = pt.collect_imports(top, lambda ref: registry[(ref.subject, ref.version)])
    assert imports == {"shop/orders.proto": ORDERS, "shop/common/money.proto": MONEY}
    assert pt.parse(top.schema_str, imports).file.message_type[0].name == "Envelope"


def test_builtin_references_come_from_the_registry_if_it_has_them() -> None:
    """confluent-kafka registers google/type/... files too unless told to skip them."""
    from google.type import date_pb2

    def resolve(ref: SchemaReference) -> Schema:
        if ref.subject == "google/type/date.proto":
            return Schema(pt.to_serialized(date_pb2.DESCRIPTOR), SchemaType.PROTOBUF)
        raise SchemaNotFound(f"no subject {ref.subject}")

    text = 'syntax = "proto3"; import "google/type/date.proto"; message Born { google.type.Date on = 1; }'
    date_ref = SchemaReference("google/type/date.proto", "google/type/date.proto", 1)
    registered = Schema(text, SchemaType.PROTOBUF, (date_ref,))
    imports = pt.collect_imports(registered, resolve)
    assert list(imports) == ["google/type/date.proto"] and pt.is_serialized(imports["google/type/date.proto"])
    assert pt.parse(text, imports).dependencies[-1].name == "google/type/date.proto"

    unregistered = Schema(text, SchemaType.PROTOBUF, (SchemaReference("google/type/date.proto", "missing", 1),))
    assert pt.collect_imports(unregistered, resolve) == {}
    assert pt.parse(text).dependencies[-1].name == "google/type/date.proto"  # googleapis-common-protos' file
    with pytest.raises(SchemaNotFound):
        pt.collect_imports(Schema(text, SchemaType.PROTOBUF, (SchemaReference("mine.proto", "missing", 1),)), resolve)


def test_message_class_encodes_and_decodes_with_a_users_proto() -> None:
    order_class = pt.message_class(ORDERS, "shop.orders.Order", IMPORTS)
    assert pt.message_class(ORDERS, "shop.orders.Order", IMPORTS) is order_class
    order = order_class(id="o-1", card="4111", labels={"vip": "yes"}, status=2)
    order.lines.add(sku="apple", quantity=3).discount.rate = 0.1
    order.placed_at.seconds = 1_700_000_000
    order.total.currency, order.total.units = "EUR", 12
    again = order_class.FromString(order.SerializeToString())
    assert again == order
    assert again.WhichOneof("payment") == "card"
    assert again.lines[0].discount.rate == pytest.approx(0.1)
    # the well-known type in this pool reads what the stock Timestamp class wrote
    assert again.placed_at.SerializeToString() == timestamp_pb2.Timestamp(seconds=1_700_000_000).SerializeToString()

    with pytest.raises(InvalidSchema, match="no message 'shop.orders.Nope'"):
        pt.message_class(ORDERS, "shop.orders.Nope", IMPORTS)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    """A real ``_pb2`` module, generated by protoc's python plugin from ORDERS."""
    root = tmp_path_factory.mktemp("generated")
    (root / "shop" / "common").mkdir(parents=True)
    (root / "shop" / "common" / "money.proto").write_text(MONEY)
    # a file name no other test registers in the default pool
    (root / "streamkit_test_orders.proto").write_text(ORDERS)
    wkt = Path(protoc.__file__).parent / "_proto"
    assert protoc.main(["protoc", f"-I{root}", f"-I{wkt}", f"--python_out={root}",
                        "shop/common/money.proto", "streamkit_test_orders.proto"]) == 0
    sys.path.insert(0, str(root))
    try:
        spec = importlib.util.spec_from_file_location("streamkit_test_orders_pb2",
                                                      root / "streamkit_test_orders_pb2.py")
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(root))
    return module


def test_message_index_matches_confluent_kafkas_for_nested_messages(generated: ModuleType) -> None:
    from confluent_kafka.schema_registry.common.protobuf import _create_index_array

    cases = {
        generated.Order: [0],
        generated.Refund: [1],
        generated.Order.Line: [0, 1],  # after the map entry LabelsEntry
        generated.Order.Line.Discount: [0, 1, 0],
        generated.Order.Voucher: [0, 2],
    }
    for cls, expected in cases.items():
        assert pt.message_index(cls.DESCRIPTOR) == expected, cls.DESCRIPTOR.full_name
        assert _create_index_array(cls.DESCRIPTOR) == expected
        assert pt.message_at(generated.DESCRIPTOR, expected) is cls.DESCRIPTOR


def test_message_index_on_descriptor_protos_and_back() -> None:
    file = pt.parse(ORDERS, IMPORTS).file
    for name, index in [("shop.orders.Order", [0]), ("shop.orders.Refund", [1]),
                        ("shop.orders.Order.Line.Discount", [0, 1, 0]), (".shop.orders.Order.Voucher", [0, 2]),
                        ("shop.orders.Order.LabelsEntry", [0, 0])]:
        assert pt.message_index_of(file, name) == index
        assert pt.message_name_at(file, index) == name.lstrip(".")
    with pytest.raises(KeyError):
        pt.message_index_of(file, "shop.orders.Missing")
    with pytest.raises(KeyError):
        pt.message_index_of(file, "other.Order")
    with pytest.raises(IndexError):
        pt.message_name_at(file, [0, 9])
    with pytest.raises(IndexError):
        pt.message_name_at(file, [])


def test_message_at_refuses_an_index_outside_the_file(generated: ModuleType) -> None:
    with pytest.raises(IndexError):
        pt.message_at(generated.DESCRIPTOR, [2])
    with pytest.raises(IndexError):
        pt.message_at(generated.DESCRIPTOR, [0, 1, 0, 0])


def test_a_generated_modules_file_registers_as_text(generated: ModuleType) -> None:
    """``DESCRIPTOR.file`` of a class generated from ORDERS prints as text that compiles
    to the same file (imports as the registry would resolve them)."""
    original = descriptor_pb2.FileDescriptorProto.FromString(generated.DESCRIPTOR.serialized_pb)
    text = pt.to_proto_text(generated.Order.DESCRIPTOR.file)
    parsed = pt.parse(text, IMPORTS, name="streamkit_test_orders.proto")
    assert _without_json_names(parsed.file) == _without_json_names(original)
    assert 'string customer_id = 11 [json_name = "customer"];' in text


def test_parse_results_are_fresh_though_compilation_is_cached() -> None:
    first = pt.parse(ORDERS, IMPORTS)
    first.file.message_type[0].name = "Mutated"
    assert pt.parse(ORDERS, IMPORTS).file.message_type[0].name == "Order"


def test_parse_from_several_threads() -> None:
    from concurrent.futures import ThreadPoolExecutor

    texts = [MONEY.replace("Money", f"Money{i}") for i in range(8)]
    with ThreadPoolExecutor(max_workers=4) as pool:
        files = list(pool.map(lambda text: pt.parse(text).file, texts))
    assert [f.message_type[0].name for f in files] == [f"Money{i}" for i in range(8)]


OPTIONS = """
syntax = "proto3";
package my;
import "google/protobuf/descriptor.proto";
extend google.protobuf.FieldOptions { string sensitivity = 50001; }
extend google.protobuf.MessageOptions { int32 version = 50002; }
"""
CARD = """
syntax = "proto3";
package shop;
import "opts.proto";
message Card {
  option (my.version) = 3;
  string number = 1 [(my.sensitivity) = "pci"];
}
"""


def test_custom_options_print_when_their_definitions_are_given() -> None:
    parsed = pt.parse(CARD, {"opts.proto": OPTIONS})
    printed = pt.to_proto_text(parsed)
    assert "option (my.version) = 3;" in printed
    assert 'string number = 1 [(my.sensitivity) = "pci"];' in printed
    assert pt.to_proto_text(parsed.file, parsed.dependencies) == printed
    again = pt.parse(printed, {"opts.proto": OPTIONS})
    assert again.file == parsed.file
    # without the definitions the runtime cannot read them: they are left out
    assert "sensitivity" not in pt.to_proto_text(parsed.file)
