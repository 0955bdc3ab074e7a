"""Protobuf schemas: validation by protoc, and Confluent's Protobuf compatibility rules.

A schema is valid when protoc compiles it with its references (see
:func:`~..protobuf_text.parse`). ``read_incompatibilities(reader, writer)`` compares
the two files as Confluent Schema Registry does (its Protobuf ``SchemaDiff``): the
writer is the *original* and the reader the *update*; every difference found is
either compatible or not, and the incompatible ones are reported.

Covered (Confluent's verdicts):

- package changed: incompatible.
- messages, matched by name in each scope (file, then nested): one the reader adds is
  compatible, one it removes is not (but map entries); a message moved or reordered
  is compatible (message indexes refer to the writer's schema id); renaming a message
  is a removal plus an addition, hence incompatible.
- enums: adding, removing, renaming and renumbering enums or their constants is
  compatible (Confluent does not look inside enums).
- fields, matched by number: adding or removing an optional (or repeated) field is
  compatible, adding or removing a ``required`` one is not; renaming is compatible.
  A changed kind (scalar vs message vs map; enums count as scalars) is incompatible;
  scalars may change only within Confluent's wire-compatible groups: int32, uint32,
  int64, uint64, bool and enums; sint32, sint64; string, bytes; fixed32, sfixed32;
  fixed64, sfixed64; float alone; double alone. A message-typed field may not change
  to a message of another name (package aside); a same-named message type is
  compared recursively. Map fields compare their key and value types.
- labels: between explicit labels (``optional``/``required``/``repeated``, not
  proto3's implicit presence nor oneof membership), a change on a numeric field is
  incompatible, on a string or bytes field compatible; message fields' labels are
  not compared.
- oneofs: adding or removing a oneof, and adding a field to one, is compatible;
  removing a field from a oneof (deleting it from the message) is not; moving one
  existing field into a new oneof is compatible, moving several into one oneof, or
  one into a oneof that already held fields of the writer's oneofs, is not.

Not covered: Confluent's data-contract metadata and rules (``confluent.field_meta``
tags), reserved-number checks, syntax changes (proto2 <-> proto3, which Confluent
does not check either) and options; well-known types are compared like any message.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Dict, List, Optional, Set, Tuple

from ..model import Schema, SchemaReference
from ..protobuf_text import ParsedProto, collect_imports, parse

if TYPE_CHECKING:  # pragma: no cover
    from google.protobuf.descriptor_pb2 import DescriptorProto, FieldDescriptorProto

__all__ = ["validate", "read_incompatibilities"]

Resolver = Callable[[SchemaReference], Schema]

_MESSAGE, _GROUP, _ENUM = 11, 10, 14
_OPTIONAL, _REQUIRED, _REPEATED = 1, 2, 3
_SCALAR_NAMES = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32",
                 8: "bool", 9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32", 16: "sfixed64",
                 17: "sint32", 18: "sint64"}
#: Confluent's wire-compatible scalar groups (enums read as GENERAL_NUMBER too).
_SCALAR_GROUP = {"int32": "varint", "uint32": "varint", "int64": "varint", "uint64": "varint", "bool": "varint",
                 "sint32": "zigzag", "sint64": "zigzag", "string": "length", "bytes": "length",
                 "fixed32": "fixed32", "sfixed32": "fixed32", "fixed64": "fixed64", "sfixed64": "fixed64",
                 "float": "float", "double": "double"}


def _parse_schema(schema: Schema, resolve: Resolver) -> ParsedProto:
    """``schema`` compiled with everything it references (``InvalidSchema`` if protoc
    refuses it)."""
    return parse(schema.schema_str, collect_imports(schema, resolve))


def validate(schema: Schema, resolve: Resolver) -> None:
    """Raise ``InvalidSchema`` (with protoc's message) unless ``schema`` compiles."""
    _parse_schema(schema, resolve)


def read_incompatibilities(reader: Schema, writer: Schema, resolve: Resolver) -> List[str]:
    """Why data written with ``writer`` cannot be read with ``reader``, by Confluent's
    Protobuf rules (see the module docstring); empty when it can."""
    diff = _Diff(_Side(_parse_schema(writer, resolve)), _Side(_parse_schema(reader, resolve)))
    diff.files()
    return diff.problems


@dataclass(frozen=True)
class _Type:
    """A message or enum of one side, found by its full name (with a leading dot)."""

    package: str
    message: Optional["DescriptorProto"]  # None for enums

    @property
    def is_map(self) -> bool:
        return self.message is not None and self.message.options.map_entry


class _Side:
    """One schema's file and the types of everything it can name."""

    def __init__(self, parsed: ParsedProto) -> None:
        self.file = parsed.file
        self.types: Dict[str, _Type] = {}
        for file in parsed.files:
            prefix = f".{file.package}" if file.package else ""
            for enum in file.enum_type:
                self.types[f"{prefix}.{enum.name}"] = _Type(file.package, None)
            for message in file.message_type:
                self._add(file.package, f"{prefix}.{message.name}", message)

    def _add(self, package: str, name: str, message: "DescriptorProto") -> None:
        self.types[name] = _Type(package, message)
        for enum in message.enum_type:
            self.types[f"{name}.{enum.name}"] = _Type(package, None)
        for nested in message.nested_type:
            self._add(package, f"{name}.{nested.name}", nested)

    def local_name(self, full_name: str) -> str:
        """``full_name`` without its package (what Confluent compares)."""
        found = self.types.get(full_name)
        prefix = f".{found.package}." if found is not None and found.package else "."
        return full_name[len(prefix):] if full_name.startswith(prefix) else full_name.lstrip(".")

    def syntax(self) -> str:
        return self.file.syntax or "proto2"


class _Diff:
    """Walks writer (original) and reader (update) side by side, collecting what the
    reader cannot read as ``problems``."""

    def __init__(self, writer: _Side, reader: _Side) -> None:
        self.writer, self.reader = writer, reader
        self.problems: List[str] = []
        self._seen: Set[Tuple[str, str]] = set()

    def _problem(self, where: str, why: str) -> None:
        message = f"{where}: {why}" if where else why
        if message not in self.problems:
            self.problems.append(message)

    def files(self) -> None:
        w, r = self.writer.file, self.reader.file
        if w.package != r.package:
            self._problem("", f"package changed from {w.package or '(none)'!r} to {r.package or '(none)'!r}")
        self._scope(list(w.message_type), list(r.message_type),
                    f".{w.package}" if w.package else "", f".{r.package}" if r.package else "",
                    w.package or "")

    def _scope(self, writer_messages: List["DescriptorProto"], reader_messages: List["DescriptorProto"],
               writer_prefix: str, reader_prefix: str, where: str) -> None:
        """Messages of one scope, matched by name (enums are all compatible)."""
        by_name = {m.name: m for m in reader_messages if not m.options.map_entry}
        for message in writer_messages:
            if message.options.map_entry:
                continue  # compared through the map fields using them
            label = f"{where}.{message.name}" if where else message.name
            other = by_name.get(message.name)
            if other is None:
                self._problem(label, "message removed")
                continue
            self._message(message, other, f"{writer_prefix}.{message.name}", f"{reader_prefix}.{other.name}", label)

    def _message(self, w: "DescriptorProto", r: "DescriptorProto", w_name: str, r_name: str, where: str) -> None:
        if (w_name, r_name) in self._seen:
            return
        self._seen.add((w_name, r_name))
        w_top, w_oneof_of = _members(w)
        r_top, r_oneof_of = _members(r)
        w_all = {f.number: f for f in w.field}
        r_all = {f.number: f for f in r.field}
        # fields moving into the reader's oneofs
        for oneof_index, oneof in enumerate(r.oneof_decl):
            numbers = [n for n, i in r_oneof_of.items() if i == oneof_index]
            moved = [n for n in numbers if n in w_top]
            existing = [n for n in numbers if n in w_oneof_of]
            if len(moved) > 1:
                self._problem(f"{where}.{oneof.name}", f"fields {_numbers(moved)} moved into one oneof")
            elif len(moved) == 1 and existing:
                self._problem(f"{where}.{oneof.name}",
                              f"field {moved[0]} moved into a oneof that holds fields of an earlier oneof")
        # oneofs by name: added or removed is compatible, fields leaving one are not
        r_oneofs = {o.name: i for i, o in enumerate(r.oneof_decl) if not _synthetic(r, i)}
        for w_index, oneof in enumerate(w.oneof_decl):
            if _synthetic(w, w_index) or oneof.name not in r_oneofs:
                continue
            r_index = r_oneofs[oneof.name]
            for number, index in w_oneof_of.items():
                if index != w_index:
                    continue
                if number not in r_all:
                    self._problem(f"{where}.{oneof.name}", f"oneof field {_field_name(w_all[number])} removed")
                elif r_oneof_of.get(number) == r_index:
                    self._field(w_all[number], r_all[number], where)
        # top-level fields (not in a oneof) by number
        for number in sorted(set(w_top) | set(r_top)):
            wf, rf = w_top.get(number), r_top.get(number)
            if rf is None and number in r_oneof_of:
                continue  # moved into a oneof: checked above and below
            if rf is None:
                if wf.label == _REQUIRED:
                    self._problem(where, f"required field {_field_name(wf)} removed")
            elif wf is None:
                if number in w_oneof_of:
                    continue  # moved out of a oneof: compared below
                if rf.label == _REQUIRED:
                    self._problem(where, f"required field {_field_name(rf)} added")
            else:
                self._field(wf, rf, where)
        # fields whose oneof membership changed: compare their contents anyway
        for number in sorted(set(w_all) & set(r_all)):
            w_in, r_in = w_oneof_of.get(number), r_oneof_of.get(number)
            if w_in is None and r_in is None:
                continue
            if w_in is not None and r_in is not None and w.oneof_decl[w_in].name == r.oneof_decl[r_in].name:
                continue
            self._field(w_all[number], r_all[number], where)
        self._scope(list(w.nested_type), list(r.nested_type), w_name, r_name, where)

    def _field(self, wf: "FieldDescriptorProto", rf: "FieldDescriptorProto", where: str) -> None:
        self._types(wf, rf, f"{where}.{wf.name}", _label(wf, self.writer), _label(rf, self.reader))

    def _types(self, wf: "FieldDescriptorProto", rf: "FieldDescriptorProto", where: str,
               w_label: Optional[int], r_label: Optional[int]) -> None:
        w_map, r_map = self._map_entry(wf, self.writer), self._map_entry(rf, self.reader)
        w_kind, r_kind = _kind(wf, w_map), _kind(rf, r_map)
        if w_kind != r_kind:
            self._problem(where, f"type changed from {self._spell(wf, w_map, self.writer)} "
                                 f"to {self._spell(rf, r_map, self.reader)}")
        elif w_kind == "map":
            self._types(w_map.field[0], r_map.field[0], f"{where}.key", None, None)
            self._types(w_map.field[1], r_map.field[1], f"{where}.value", None, None)
        elif w_kind == "scalar":
            w_scalar, r_scalar = _scalar(wf), _scalar(rf)
            if _SCALAR_GROUP.get(w_scalar, "varint") != _SCALAR_GROUP.get(r_scalar, "varint"):
                self._problem(where, f"type changed from {self._spell(wf, None, self.writer)} "
                                     f"to {self._spell(rf, None, self.reader)}")
            elif w_label is not None and r_label is not None and w_label != r_label \
                    and _SCALAR_GROUP.get(w_scalar, "varint") != "length":
                self._problem(where, f"label changed from {_LABELS[w_label]} to {_LABELS[r_label]}")
        else:
            w_local, r_local = self.writer.local_name(wf.type_name), self.reader.local_name(rf.type_name)
            if w_local != r_local:
                self._problem(where, f"type changed from message {w_local} to message {r_local}")
                return
            w_type, r_type = self.writer.types.get(wf.type_name), self.reader.types.get(rf.type_name)
            if w_type is not None and r_type is not None and w_type.message and r_type.message:
                self._message(w_type.message, r_type.message, wf.type_name, rf.type_name, where)

    def _map_entry(self, field: "FieldDescriptorProto", side: _Side) -> Optional["DescriptorProto"]:
        if field.type != _MESSAGE:
            return None
        found = side.types.get(field.type_name)
        return found.message if found is not None and found.is_map else None

    def _spell(self, field: "FieldDescriptorProto", map_entry: Optional["DescriptorProto"], side: _Side) -> str:
        if map_entry is not None:
            return f"map<{self._spell(map_entry.field[0], None, side)}, {self._spell(map_entry.field[1], None, side)}>"
        if field.type in (_MESSAGE, _GROUP):
            return f"message {side.local_name(field.type_name)}"
        if field.type == _ENUM:
            return f"enum {side.local_name(field.type_name)}"
        return _SCALAR_NAMES[field.type]


_LABELS = {_OPTIONAL: "optional", _REQUIRED: "required", _REPEATED: "repeated"}


def _kind(field: "FieldDescriptorProto", map_entry: Optional["DescriptorProto"]) -> str:
    """Confluent's field kinds: map, message (groups too) or scalar (enums too)."""
    if map_entry is not None:
        return "map"
    return "message" if field.type in (_MESSAGE, _GROUP) else "scalar"


def _members(message: "DescriptorProto") -> Tuple[Dict[int, "FieldDescriptorProto"], Dict[int, int]]:
    """Fields outside real oneofs by number, and the oneof index of the others."""
    top: Dict[int, "FieldDescriptorProto"] = {}
    oneof_of: Dict[int, int] = {}
    for field in message.field:
        if field.HasField("oneof_index") and not field.proto3_optional:
            oneof_of[field.number] = field.oneof_index
        else:
            top[field.number] = field
    return top, oneof_of


def _synthetic(message: "DescriptorProto", oneof_index: int) -> bool:
    """proto3 ``optional`` fields live in a synthetic oneof of their own."""
    return any(f.proto3_optional for f in message.field if f.HasField("oneof_index") and f.oneof_index == oneof_index)


def _label(field: "FieldDescriptorProto", side: _Side) -> Optional[int]:
    """The label as written: None for proto3's implicit presence and oneof members."""
    if field.label in (_REPEATED, _REQUIRED):
        return field.label
    if field.HasField("oneof_index") and not field.proto3_optional:
        return None
    if side.syntax() == "proto2" or field.proto3_optional:
        return _OPTIONAL
    return None


def _scalar(field: "FieldDescriptorProto") -> str:
    return "enum" if field.type == _ENUM else _SCALAR_NAMES[field.type]


def _field_name(field: "FieldDescriptorProto") -> str:
    return f"{field.name} = {field.number}"


def _numbers(numbers: List[int]) -> str:
    return ", ".join(str(n) for n in numbers)
