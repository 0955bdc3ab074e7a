"""Printing a Protobuf file descriptor as ``.proto`` text that protoc compiles back to
the same descriptor (:func:`to_proto_text`).

Hand-written because no maintained library prints ``.proto`` from descriptors: protoc
(``grpc_tools``) and the protobuf runtime only go the other way, so :mod:`.protobuf_text`
parses with protoc and feeds it this printer's text for schemas registered in base64.

Not printed: comments, and custom options (extensions of ``google.protobuf.*Options``)
whose definition is neither among the files given nor known to the protobuf runtime.
Editions files print ``edition = "..."`` and their ``features`` as aggregate options
(``features = { field_presence: EXPLICIT }``).
"""
from __future__ import annotations

import contextvars
from typing import TYPE_CHECKING, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Union

from .model import InvalidSchema
from .protobuf_descriptors import ParsedProto, as_proto, descriptor_pool

if TYPE_CHECKING:  # pragma: no cover
    from google.protobuf.descriptor import FileDescriptor
    from google.protobuf.descriptor_pb2 import (DescriptorProto, EnumDescriptorProto, FieldDescriptorProto,
                                                FileDescriptorProto)
    from google.protobuf.message import Message

__all__ = ["to_proto_text"]

#: While printing: finds an options class that knows the printed file's custom options.
_OPTION_CLASSES: "contextvars.ContextVar[Optional[Callable[[str], Optional[type]]]]" = \
    contextvars.ContextVar("streamkit_proto_option_classes", default=None)


_SCALARS = {1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32",
            8: "bool", 9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32", 16: "sfixed64",
            17: "sint32", 18: "sint64"}
_GROUP, _MESSAGE, _ENUM, _STRING = 10, 11, 14, 9
_OPTIONAL, _REQUIRED, _REPEATED = 1, 2, 3
_MAX_FIELD_NUMBER = 536870911
#: Options that the syntax says otherwise (``map<...>``, ``[default = ...]``).
_IMPLIED_OPTIONS = {"map_entry"}


def to_proto_text(file: Union["FileDescriptorProto", "FileDescriptor", ParsedProto],
                  dependencies: Sequence["FileDescriptorProto"] = ()) -> str:
    """``file`` as ``.proto`` text: syntax (or edition), package, imports, options,
    messages (nested types, maps, oneofs, proto3 ``optional``, groups, reserved and
    extension ranges), enums, extensions and services. Type names are printed fully
    qualified (``.pkg.Msg``), so :func:`parse` of the text gives ``file`` back.

    Custom options (``[(my.sensitivity) = "pci"]``) print when the protobuf runtime
    knows their extension (a generated ``_pb2`` imported) or when it is defined in
    ``file`` or ``dependencies``: pass a :class:`ParsedProto` (or its dependencies) to
    keep them; otherwise they are dropped."""
    if isinstance(file, ParsedProto):
        file, dependencies = file.file, tuple(dependencies) or file.dependencies
    proto = as_proto(file)
    token = _OPTION_CLASSES.set(_option_classes([*dependencies, proto]) if dependencies else None)
    try:
        return _print_file(proto)
    finally:
        _OPTION_CLASSES.reset(token)


def _option_classes(files: Sequence["FileDescriptorProto"]) -> Optional[Callable[[str], Optional[type]]]:
    """Looks up ``google.protobuf.*Options`` classes in a pool holding ``files``, so
    options parse with the custom options those files define (None if they do not
    make a pool)."""
    from google.protobuf import message_factory

    try:
        pool = descriptor_pool(ParsedProto(files[-1], tuple(files[:-1])))
    except InvalidSchema:
        return None
    classes: Dict[str, Optional[type]] = {}

    def lookup(full_name: str) -> Optional[type]:
        if full_name not in classes:
            try:
                classes[full_name] = message_factory.GetMessageClass(pool.FindMessageTypeByName(full_name))
            except KeyError:
                classes[full_name] = None
        return classes[full_name]

    return lookup


def _print_file(proto: "FileDescriptorProto") -> str:
    out: List[str] = []
    if proto.syntax == "editions":
        out.append(f'edition = "{_edition_name(proto.edition)}";')
    else:
        out.append(f'syntax = "{proto.syntax or "proto2"}";')
    if proto.package:
        out.append(f"package {proto.package};")
    public, weak = set(proto.public_dependency), set(proto.weak_dependency)
    for i, dependency in enumerate(proto.dependency):
        kind = "public " if i in public else "weak " if i in weak else ""
        out.append(f'import {kind}"{_escape(dependency)}";')
    out.extend(f"option {o};" for o in _options(proto.options))
    syntax = proto.syntax or "proto2"
    for enum in proto.enum_type:
        out.extend(_enum(enum))
    for message in proto.message_type:
        out.extend(_message(message, syntax))
    out.extend(_extensions(proto.extension, syntax))
    for service in proto.service:
        out.extend(_service(service))
    return "\n".join(out) + "\n"


def _indent(lines: Iterable[str]) -> List[str]:
    return ["  " + line for line in lines]


def _message(message: "DescriptorProto", syntax: str) -> List[str]:
    inner: List[str] = [f"option {o};" for o in _options(message.options)]
    maps = {n.name: n for n in message.nested_type if n.options.map_entry}
    groups = {f.type_name.rsplit(".", 1)[-1] for f in message.field if f.type == _GROUP}
    synthetic = {f.oneof_index for f in message.field if f.proto3_optional}
    printed_oneofs: Set[int] = set()
    for field in message.field:
        if field.HasField("oneof_index") and field.oneof_index not in synthetic:
            if field.oneof_index in printed_oneofs:
                continue
            printed_oneofs.add(field.oneof_index)
            oneof = message.oneof_decl[field.oneof_index]
            members = [f for f in message.field if f.HasField("oneof_index") and f.oneof_index == field.oneof_index]
            body = [f"option {o};" for o in _options(oneof.options)]
            for member in members:
                body.extend(_field(member, message, maps, syntax, in_oneof=True))
            inner.extend([f"oneof {oneof.name} {{", *_indent(body), "}"])
            continue
        inner.extend(_field(field, message, maps, syntax))
    for i, oneof in enumerate(message.oneof_decl):  # oneofs without fields
        if i not in printed_oneofs and i not in synthetic:
            inner.extend([f"oneof {oneof.name} {{", *_indent(f"option {o};" for o in _options(oneof.options)), "}"])
    for enum in message.enum_type:
        inner.extend(_enum(enum))
    for nested in message.nested_type:
        if nested.name not in maps and nested.name not in groups:
            inner.extend(_message(nested, syntax))
    inner.extend(_extensions(message.extension, syntax))
    for r in message.extension_range:
        end = "max" if r.end - 1 >= _MAX_FIELD_NUMBER else str(r.end - 1)
        span = str(r.start) if r.end - 1 == r.start else f"{r.start} to {end}"
        options = _options(r.options)
        inner.append(f"extensions {span}{_bracket(options)};")
    inner.extend(_reserved(message.reserved_range, message.reserved_name, exclusive_end=True))
    return [f"message {message.name} {{", *_indent(inner), "}"]


def _field(field: "FieldDescriptorProto", parent: "DescriptorProto", maps: Mapping[str, "DescriptorProto"],
           syntax: str, *, in_oneof: bool = False) -> List[str]:
    local = field.type_name.rsplit(".", 1)[-1]
    options = _options(field.options)
    if field.HasField("default_value"):
        options.insert(0, f"default = {_default(field)}")
    if field.HasField("json_name") and field.json_name != _json_name(field.name):
        options.append(f'json_name = "{_escape(field.json_name)}"')
    if field.type == _MESSAGE and field.label == _REPEATED and local in maps \
            and field.type_name.endswith(f".{parent.name}.{local}"):
        entry = maps[local]
        key, value = entry.field[0], entry.field[1]
        return [f"map<{_type(key)}, {_type(value)}> {field.name} = {field.number}{_bracket(options)};"]
    label = "" if in_oneof else _label(field, syntax)
    if field.type == _GROUP:
        group = next(n for n in parent.nested_type if n.name == local)
        body = _message(group, syntax)[1:-1]
        return [f"{label}group {local} = {field.number}{_bracket(options)} {{", *body, "}"]
    return [f"{label}{_type(field)} {field.name} = {field.number}{_bracket(options)};"]


def _label(field: "FieldDescriptorProto", syntax: str) -> str:
    if field.label == _REPEATED:
        return "repeated "
    if field.label == _REQUIRED:
        return "required "
    if syntax == "proto2" or field.proto3_optional:
        return "optional "
    return ""


def _type(field: "FieldDescriptorProto") -> str:
    return _SCALARS.get(field.type) or field.type_name


def _default(field: "FieldDescriptorProto") -> str:
    if field.type == _STRING:
        return f'"{_escape(field.default_value)}"'
    if field.type == 12:  # bytes: descriptors hold them C-escaped already
        return f'"{field.default_value}"'
    return field.default_value


def _json_name(name: str) -> str:
    """protoc's default json_name: underscores dropped, the next letter capitalized."""
    out, upper = [], False
    for ch in name:
        if ch == "_":
            upper = True
        else:
            out.append(ch.upper() if upper else ch)
            upper = False
    return "".join(out)


def _enum(enum: "EnumDescriptorProto") -> List[str]:
    inner: List[str] = [f"option {o};" for o in _options(enum.options)]
    for value in enum.value:
        inner.append(f"{value.name} = {value.number}{_bracket(_options(value.options))};")
    inner.extend(_reserved(enum.reserved_range, enum.reserved_name, exclusive_end=False))
    return [f"enum {enum.name} {{", *_indent(inner), "}"]


def _reserved(ranges: Iterable[object], names: Iterable[str], *, exclusive_end: bool) -> List[str]:
    lines = []
    spans = []
    for r in ranges:
        end = r.end - 1 if exclusive_end else r.end  # type: ignore[attr-defined]
        start = r.start  # type: ignore[attr-defined]
        limit = _MAX_FIELD_NUMBER if exclusive_end else 2 ** 31 - 1
        spans.append(str(start) if start == end else f"{start} to {'max' if end >= limit else end}")
    if spans:
        lines.append(f"reserved {', '.join(spans)};")
    names = list(names)
    if names:
        lines.append("reserved " + ", ".join(f'"{_escape(n)}"' for n in names) + ";")
    return lines


def _extensions(fields: Iterable["FieldDescriptorProto"], syntax: str) -> List[str]:
    by_extendee: Dict[str, List["FieldDescriptorProto"]] = {}
    for field in fields:
        by_extendee.setdefault(field.extendee, []).append(field)
    lines: List[str] = []
    for extendee, members in by_extendee.items():
        body: List[str] = []
        for field in members:
            options = _options(field.options)
            if field.HasField("default_value"):
                options.insert(0, f"default = {_default(field)}")
            if field.HasField("json_name") and field.json_name != _json_name(field.name):
                options.append(f'json_name = "{_escape(field.json_name)}"')
            body.append(f"{_label(field, syntax)}{_type(field)} {field.name} = {field.number}{_bracket(options)};")
        lines.extend([f"extend {extendee} {{", *_indent(body), "}"])
    return lines


def _service(service: object) -> List[str]:
    inner: List[str] = [f"option {o};" for o in _options(service.options)]  # type: ignore[attr-defined]
    for method in service.method:  # type: ignore[attr-defined]
        request = ("stream " if method.client_streaming else "") + method.input_type
        response = ("stream " if method.server_streaming else "") + method.output_type
        options = _options(method.options)
        tail = " { " + " ".join(f"option {o};" for o in options) + " }" if options else ";"
        inner.append(f"rpc {method.name} ({request}) returns ({response}){tail}")
    return [f"service {service.name} {{", *_indent(inner), "}"]  # type: ignore[attr-defined]


def _bracket(options: Sequence[str]) -> str:
    return f" [{', '.join(options)}]" if options else ""


def _options(options: "Message") -> List[str]:
    """``name = value`` for each option set (extensions the runtime knows included)."""
    from google.protobuf.descriptor import FieldDescriptor

    lookup = _OPTION_CLASSES.get()
    if lookup is not None and options.ByteSize():
        dynamic = lookup(options.DESCRIPTOR.full_name)
        if dynamic is not None:  # the same bytes, read with the custom options' extensions known
            options = dynamic.FromString(options.SerializeToString())
    found: List[str] = []
    for field, value in options.ListFields():
        if field.name in _IMPLIED_OPTIONS and not field.is_extension:
            continue
        name = f"({field.full_name})" if field.is_extension else field.name
        repeated = getattr(field, "is_repeated", None)
        values = value if (repeated if repeated is not None else field.label == FieldDescriptor.LABEL_REPEATED) \
            else [value]
        found.extend(f"{name} = {_option_value(field, v)}" for v in values)
    return found


def _option_value(field: object, value: object) -> str:
    from google.protobuf import text_format
    from google.protobuf.descriptor import FieldDescriptor

    kind = field.type  # type: ignore[attr-defined]
    if kind in (FieldDescriptor.TYPE_MESSAGE, FieldDescriptor.TYPE_GROUP):
        return "{ " + text_format.MessageToString(value, as_one_line=True) + " }"
    if kind == FieldDescriptor.TYPE_ENUM:
        enum_value = field.enum_type.values_by_number.get(value)  # type: ignore[attr-defined]
        return enum_value.name if enum_value is not None else str(value)
    if kind == FieldDescriptor.TYPE_BOOL:
        return "true" if value else "false"
    if kind == FieldDescriptor.TYPE_STRING:
        return f'"{_escape(value)}"'  # type: ignore[arg-type]
    if kind == FieldDescriptor.TYPE_BYTES:
        from google.protobuf import text_encoding
        return '"' + text_encoding.CEscape(value, as_utf8=False) + '"'  # type: ignore[arg-type]
    if isinstance(value, float):
        return repr(value) if value == value and abs(value) != float("inf") else \
            ("nan" if value != value else "inf" if value > 0 else "-inf")
    return str(value)


def _escape(text: str) -> str:
    from google.protobuf import text_encoding

    return text_encoding.CEscape(text.encode("utf-8"), as_utf8=True)


def _edition_name(edition: int) -> str:
    from google.protobuf import descriptor_pb2

    name = descriptor_pb2.Edition.Name(edition)
    return name[len("EDITION_"):] if name.startswith("EDITION_") else name
