"""Protobuf schemas as a Schema Registry holds them: ``.proto`` text or base64 descriptors,
compiled by the real protoc (``grpc_tools.protoc``, no parser of our own).

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
  imports, in dependency order); anything protoc refuses raises
  :class:`~.model.InvalidSchema` with protoc's message.
- :func:`collect_imports`: a schema's references, resolved, as :func:`parse` takes them.
- :func:`message_class`: the message class of a schema (one pool per schema, cached).

This module is the Protobuf schemas' entry point: it also offers the names of
:mod:`.protobuf_descriptors` (the base64 form, pools, message indexes) and
:mod:`.protobuf_printer` (:func:`to_proto_text`, descriptor -> ``.proto`` text, which
:func:`parse` uses to hand protoc the schemas registered in base64).
"""
from __future__ import annotations

import functools
import importlib
import importlib.util
import os
import re
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Dict, List, Mapping, Optional, Tuple, Type

from .model import InvalidSchema, Schema, SchemaReference
from .protobuf_descriptors import (ParsedProto, descriptor_pool, from_serialized, is_serialized,
                                   message_at, message_index, message_index_of, message_name_at, to_serialized)
from .protobuf_printer import to_proto_text

if TYPE_CHECKING:  # pragma: no cover
    from google.protobuf.descriptor_pb2 import FileDescriptorProto
    from google.protobuf.descriptor_pool import DescriptorPool
    from google.protobuf.message import Message

__all__ = ["ParsedProto", "parse", "is_serialized", "from_serialized", "to_serialized", "to_proto_text",
           "collect_imports", "descriptor_pool", "message_class", "message_index", "message_at",
           "message_index_of", "message_name_at", "DEFAULT_NAME"]

#: The file name a schema gets when nothing names it (imports keep their import paths).
DEFAULT_NAME = "schema.proto"

_PROTOC_LOCK = threading.Lock()

#: Files a registry resolves without a reference (confluent-kafka's ``_is_builtin``).
_BUILTIN_PREFIXES = ("google/protobuf/", "google/type/", "confluent/")
#: Where those not shipped as .proto files by grpc_tools or googleapis-common-protos live.
_BUILTIN_MODULES = {
    "confluent/meta.proto": "confluent_kafka.schema_registry.confluent.meta_pb2",
    "confluent/types/decimal.proto": "confluent_kafka.schema_registry.confluent.types.decimal_pb2",
}


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
