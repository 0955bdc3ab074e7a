"""Protobuf schemas as a Schema Registry holds them: ``.proto`` text or base64 descriptors.

A registered Protobuf schema is one ``.proto`` file. Its ``schema_str`` is either the
file's text (what Java clients and ``curl`` register) or the base64 of a serialized
``FileDescriptorProto`` (what confluent-kafka-python's ``ProtobufSerializer``
registers, and what the registry answers with ``?format=serialized``). Its references
name the files it imports (``import "common/money.proto";``), each found at a subject
and version of the registry; the well-known types (``google/protobuf/*.proto``) need
no reference.

Everything here is a pure function of its arguments (temporary files for protoc aside):

- :func:`parse`: text or base64 plus ``{import_path: text_or_base64}`` ->
  :class:`ParsedProto` (the file's ``FileDescriptorProto`` and those of everything it
  imports, in dependency order), compiled by the real protoc (``grpc_tools.protoc``);
  anything protoc refuses raises :class:`~.model.InvalidSchema` with protoc's message.
- :func:`to_proto_text`: a ``FileDescriptorProto`` (or a message class's
  ``DESCRIPTOR.file``) printed as ``.proto`` text that :func:`parse` turns back into
  the same descriptor; :func:`to_serialized` / :func:`from_serialized`: the base64 form.
- :func:`message_class` / :func:`descriptor_pool`: message classes for a parsed schema.
- :func:`message_index` / :func:`message_at` (runtime descriptors) and
  :func:`message_index_of` / :func:`message_name_at` (descriptor protos): Confluent's
  message-index path from a file's top-level messages down to a nested message (its
  wire form is :mod:`.wire_format`'s).

Not printed by :func:`to_proto_text`: comments, and custom options (extensions of
``google.protobuf.*Options``) whose definition is neither among the files given to it
nor known to the protobuf runtime. Editions files print ``edition = "..."`` and their
``features`` as aggregate options (``features = { field_presence: EXPLICIT }``).
"""
from __future__ import annotations

import base64
import binascii
import contextvars
import functools
import importlib
import importlib.util
import os
import re
import tempfile
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import (TYPE_CHECKING, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set,
                    Tuple, Type, Union)

from .model import InvalidSchema, Schema, SchemaReference

if TYPE_CHECKING:  # pragma: no cover
    from google.protobuf.descriptor import Descriptor, FileDescriptor
    from google.protobuf.descriptor_pb2 import (DescriptorProto, EnumDescriptorProto, FieldDescriptorProto,
                                                FileDescriptorProto)
    from google.protobuf.descriptor_pool import DescriptorPool
    from google.protobuf.message import Message

__all__ = ["ParsedProto", "parse", "is_serialized", "from_serialized", "to_serialized", "to_proto_text",
           "collect_imports", "descriptor_pool", "message_class", "message_index", "message_at",
           "message_index_of", "message_name_at", "DEFAULT_NAME"]

#: The file name a schema gets when nothing names it (imports keep their import paths).
DEFAULT_NAME = "schema.proto"

_PROTOC_LOCK = threading.Lock()
#: While printing: finds an options class that knows the printed file's custom options.
_OPTION_CLASSES: "contextvars.ContextVar[Optional[Callable[[str], Optional[type]]]]" = \
    contextvars.ContextVar("streamkit_proto_option_classes", default=None)
_BASE64 = re.compile(r"^[A-Za-z0-9+/\s]+={0,2}\s*$")

#: Files a registry resolves without a reference (confluent-kafka's ``_is_builtin``).
_BUILTIN_PREFIXES = ("google/protobuf/", "google/type/", "confluent/")
#: Where those not shipped as .proto files by grpc_tools or googleapis-common-protos live.
_BUILTIN_MODULES = {
    "confluent/meta.proto": "confluent_kafka.schema_registry.confluent.meta_pb2",
    "confluent/types/decimal.proto": "confluent_kafka.schema_registry.confluent.types.decimal_pb2",
}


@dataclass(frozen=True)
class ParsedProto:
    """A compiled schema: ``file`` and, in dependency order (each after what it
    imports), ``dependencies``: every file it imports, directly or not."""

    file: "FileDescriptorProto"
    dependencies: Tuple["FileDescriptorProto", ...] = ()

    @property
    def files(self) -> Tuple["FileDescriptorProto", ...]:
        """The dependencies, then the file: the order a ``DescriptorPool`` takes them."""
        return self.dependencies + (self.file,)


# --- the base64 form ---------------------------------------------------------------------

def is_serialized(schema_str: str) -> bool:
    """Whether ``schema_str`` is base64 of a ``FileDescriptorProto`` rather than
    ``.proto`` text. Text always has a ``;`` or a ``{`` (any statement does), base64
    never; an empty string counts as (empty) text."""
    return bool(schema_str.strip()) and bool(_BASE64.match(schema_str))


def from_serialized(schema_str: str, name: Optional[str] = None) -> "FileDescriptorProto":
    """Decode the base64 form; ``name`` (if given) replaces the file's own name, as
    registries do with the reference's import path. Raises ``InvalidSchema``."""
    from google.protobuf import descriptor_pb2
    from google.protobuf.message import DecodeError

    proto = descriptor_pb2.FileDescriptorProto()
    try:
        proto.ParseFromString(base64.b64decode("".join(schema_str.split()), validate=True))
    except (binascii.Error, ValueError, DecodeError) as exc:
        raise InvalidSchema(f"not a base64 FileDescriptorProto: {exc}") from exc
    if name is not None:
        proto.name = name
    return proto


def to_serialized(file: Union["FileDescriptorProto", "FileDescriptor"]) -> str:
    """The base64 form of ``file`` (what ``?format=serialized`` answers)."""
    return base64.b64encode(_as_proto(file).SerializeToString()).decode("ascii")


def _as_proto(file: Union["FileDescriptorProto", "FileDescriptor"]) -> "FileDescriptorProto":
    from google.protobuf import descriptor_pb2

    if isinstance(file, descriptor_pb2.FileDescriptorProto):
        return file
    proto = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(proto)
    return proto


# --- parsing with protoc -----------------------------------------------------------------

def parse(schema_str: str, imports: Optional[Mapping[str, str]] = None, *,
          name: Optional[str] = None) -> ParsedProto:
    """Compile ``schema_str`` (``.proto`` text or the base64 form) with protoc.

    ``imports`` maps import paths to the imported files' text (or base64), recursively
    as far as the imports go; the well-known types (``google/protobuf/*.proto``),
    ``google/type/*.proto`` (if googleapis-common-protos is installed) and Confluent's
    ``confluent/meta.proto`` resolve without it. The schema compiles as ``name``
    (default: a base64 schema's own name, else :data:`DEFAULT_NAME`).

    A base64 file comes back as decoded (options protoc would not print are kept),
    after its printed text compiled. Raises ``InvalidSchema`` with protoc's message
    if protoc refuses the file or anything it imports.
    """
    imports = dict(imports or {})
    serialized = is_serialized(schema_str)
    decoded: Dict[str, "FileDescriptorProto"] = {}
    if serialized:
        main = from_serialized(schema_str)
        name = name or main.name or DEFAULT_NAME
        main.name = name
        decoded[name] = main
    name = name or DEFAULT_NAME
    if name in imports:
        raise InvalidSchema(f"the schema's name {name!r} is also an import path")
    sources: Dict[str, str] = {}
    for path, text in imports.items():
        if is_serialized(text):
            decoded[path] = from_serialized(text, path)
            sources[path] = to_proto_text(decoded[path])
        else:
            sources[path] = text
    sources[name] = to_proto_text(decoded[name]) if serialized else schema_str
    files = _compile(sources, name)
    files = [decoded.get(f.name, f) for f in files]
    return ParsedProto(file=files[-1], dependencies=tuple(files[:-1]))


def _compile(sources: Mapping[str, str], name: str) -> List["FileDescriptorProto"]:
    """``name`` compiled with its imports from ``sources`` (fresh descriptor protos each
    call; the compilation itself is cached)."""
    from google.protobuf import descriptor_pb2

    serialized = _compiled(tuple(sorted(sources.items())), name)
    return list(descriptor_pb2.FileDescriptorSet.FromString(serialized).file)


@functools.lru_cache(maxsize=512)
def _compiled(sources: Tuple[Tuple[str, str], ...], name: str) -> bytes:
    """Write ``sources`` into a temporary tree, add the builtin files that some import
    needs and none of ``sources`` provides, compile ``name`` with its imports and
    return the serialized ``FileDescriptorSet``. Cached: a registry compiles the same
    versions again for every compatibility check (and protoc prints its warnings,
    such as unused imports, once per schema). One compilation at a time: protoc runs
    in this process."""
    from grpc_tools import _protoc_compiler, protoc

    with _PROTOC_LOCK, tempfile.TemporaryDirectory(prefix="streamkit-proto-") as tmp:
        root = Path(tmp, "src")
        for path, text in [*sources, *_missing_builtins(dict(sources)).items()]:
            target = _inside(root, path)
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text, encoding="utf-8")
        out = Path(tmp, "set.bin")
        includes = [str(root)] + _include_dirs()
        args = ["protoc", *(f"-I{d}" for d in includes), f"--descriptor_set_out={out}", "--include_imports", name]
        try:  # the same compiler, raising its errors instead of printing them
            _protoc_compiler.get_protos(name.encode(), [d.encode() for d in includes])
        except _protoc_compiler.ProtocErrors as exc:
            raise InvalidSchema(_protoc_message(exc)) from exc
        if protoc.main(args) != 0 or not out.exists():
            raise InvalidSchema(f"protoc could not compile {name}")
        return out.read_bytes()


def _protoc_message(exc: Exception) -> str:
    """protoc's errors, one a line, as ``file:line:column: message`` (1-based)."""
    lines = []
    for error in exc.errors():  # type: ignore[attr-defined]
        filename = error.filename.decode() if isinstance(error.filename, bytes) else error.filename
        message = error.message.decode() if isinstance(error.message, bytes) else error.message
        where = f"{filename}:{error.line + 1}:{error.column + 1}" if error.line >= 0 else filename
        lines.append(f"{where}: {message}")
    return "\n".join(lines) or str(exc)


def _inside(root: Path, path: str) -> Path:
    target = (root / path).resolve()
    if not path or os.path.isabs(path) or root.resolve() not in target.parents:
        raise InvalidSchema(f"import path {path!r} leaves the source tree")
    return target


@functools.lru_cache(maxsize=1)
def _include_dirs() -> List[str]:
    """grpc_tools' well-known types, then the tree that holds googleapis-common-protos'
    ``google/type/*.proto`` if it is installed."""
    import grpc_tools

    dirs = [str(Path(grpc_tools.__file__).parent / "_proto")]
    try:
        spec = importlib.util.find_spec("google.type.date_pb2")
    except ImportError:
        spec = None
    if spec is not None and spec.origin and Path(spec.origin).with_name("date.proto").exists():
        dirs.append(str(Path(spec.origin).parents[2]))
    return dirs


def _missing_builtins(sources: Mapping[str, str]) -> Dict[str, str]:
    """Text for Confluent's builtin files (``confluent/meta.proto`` ...) that the sources
    import without providing, printed from the modules confluent-kafka ships."""
    wanted = {path for text in sources.values() if not is_serialized(text)
              for path in re.findall(r'import\s+(?:public\s+|weak\s+)?"([^"]+)"', text)}
    found: Dict[str, str] = {}
    for path in sorted(wanted - set(sources)):
        module_name = _BUILTIN_MODULES.get(path)
        if module_name is None:
            continue
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        found[path] = to_proto_text(module.DESCRIPTOR)
    return found


def collect_imports(schema: Schema, resolve: Callable[[SchemaReference], Schema]) -> Dict[str, str]:
    """``{import_path: schema_str}`` for everything ``schema`` references, directly or
    through its references (``resolve`` fetches a reference's schema). References to
    the well-known types (``google/protobuf/...``) are skipped, protoc ships them; one
    to another builtin file (``google/type/...``, ``confluent/...``) is used if the
    registry has it and left to :func:`parse`'s builtins if it has not."""
    from .model import RegistryError

    found: Dict[str, str] = {}
    pending = list(schema.references)
    while pending:
        ref = pending.pop()
        if ref.name in found or ref.name.startswith("google/protobuf/"):
            continue
        try:
            target = resolve(ref)
        except RegistryError:
            if ref.name.startswith(_BUILTIN_PREFIXES):
                continue
            raise
        found[ref.name] = target.schema_str
        pending.extend(target.references)
    return found


# --- message classes ---------------------------------------------------------------------

def descriptor_pool(parsed: ParsedProto) -> "DescriptorPool":
    """A fresh ``DescriptorPool`` holding ``parsed`` and its dependencies."""
    from google.protobuf.descriptor_pool import DescriptorPool

    pool = DescriptorPool()
    for file in parsed.files:
        try:
            pool.Add(file)
        except (TypeError, ValueError) as exc:
            raise InvalidSchema(f"{file.name}: {exc}") from exc
    return pool


def message_class(schema_str: str, full_name: str, imports: Optional[Mapping[str, str]] = None) -> Type["Message"]:
    """The message class for ``full_name`` (``package.Outer.Inner``) in the schema
    ``schema_str`` (text or base64) with ``imports`` as :func:`parse` takes them. The
    same arguments give the same class (one pool per schema and imports, cached).
    Raises ``InvalidSchema`` if the schema does not compile or has no such message."""
    from google.protobuf import message_factory

    pool = _cached_pool(schema_str, tuple(sorted((imports or {}).items())))
    try:
        descriptor = pool.FindMessageTypeByName(full_name)
    except KeyError as exc:
        raise InvalidSchema(f"the schema has no message {full_name!r}") from exc
    return message_factory.GetMessageClass(descriptor)


@functools.lru_cache(maxsize=256)
def _cached_pool(schema_str: str, imports: Tuple[Tuple[str, str], ...]) -> "DescriptorPool":
    return descriptor_pool(parse(schema_str, dict(imports)))


# --- message indexes ---------------------------------------------------------------------

def message_index(descriptor: "Descriptor") -> List[int]:
    """Confluent's message index of a (nested) message: its top-level ancestor's
    position among the file's messages, then each nested message's position among its
    parent's nested messages. ``[0]`` is the file's first message. A map field's entry
    type counts among the nested messages, where protoc puts it (at the map field's
    declaration), as confluent-kafka-python counts it."""
    path: List[int] = []
    current = descriptor
    while current.containing_type is not None:
        parent = current.containing_type
        path.append(_position(parent.nested_types, current.full_name))
        current = parent
    path.append(_position(current.file.message_types_by_name.values(), current.full_name))
    return path[::-1]


def message_at(file: "FileDescriptor", index: Sequence[int]) -> "Descriptor":
    """The message that ``index`` designates in ``file`` (the inverse of
    :func:`message_index`). Raises ``IndexError`` if it designates none."""
    if not index:
        raise IndexError("an empty message index designates no message")
    candidates = list(file.message_types_by_name.values())
    descriptor = None
    for position in index:
        if not 0 <= position < len(candidates):
            raise IndexError(f"message index {list(index)} leaves {file.name}")
        descriptor = candidates[position]
        candidates = list(descriptor.nested_types)
    return descriptor


def message_index_of(file: "FileDescriptorProto", full_name: str) -> List[int]:
    """:func:`message_index` on a descriptor proto: the index of ``full_name``
    (``package.Outer.Inner``, a leading dot allowed). Map entries count, as they do
    in the nested types Confluent indexes. Raises ``KeyError`` if ``file`` has none."""
    prefix = f".{file.package}." if file.package else "."
    wanted = full_name if full_name.startswith(".") else "." + full_name
    if not wanted.startswith(prefix):
        raise KeyError(full_name)
    names = wanted[len(prefix):].split(".")
    candidates = list(file.message_type)
    path: List[int] = []
    for name in names:
        position = next((i for i, m in enumerate(candidates) if m.name == name), None)
        if position is None:
            raise KeyError(full_name)
        path.append(position)
        candidates = list(candidates[position].nested_type)
    return path


def message_name_at(file: "FileDescriptorProto", index: Sequence[int]) -> str:
    """The full name (``package.Outer.Inner``) of the message ``index`` designates in
    ``file``. Raises ``IndexError`` if it designates none."""
    if not index:
        raise IndexError("an empty message index designates no message")
    candidates = list(file.message_type)
    names: List[str] = [file.package] if file.package else []
    for position in index:
        if not 0 <= position < len(candidates):
            raise IndexError(f"message index {list(index)} leaves {file.name}")
        names.append(candidates[position].name)
        candidates = list(candidates[position].nested_type)
    return ".".join(names)


def _position(descriptors: Iterable["Descriptor"], full_name: str) -> int:
    for position, candidate in enumerate(descriptors):
        if candidate.full_name == full_name:
            return position
    raise ValueError(f"{full_name} is not where its parent says")


# --- printing ----------------------------------------------------------------------------

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
    proto = _as_proto(file)
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
