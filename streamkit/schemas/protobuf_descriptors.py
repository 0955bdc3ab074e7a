"""Protobuf schemas as descriptors: a compiled schema (:class:`ParsedProto`), the base64
form of a ``FileDescriptorProto`` registries store, a ``DescriptorPool`` for a schema,
and Confluent's message indexes (the path from a file's top-level messages down to a
nested one; its wire form is :mod:`.wire_format`'s).

Pure functions of their arguments; the ``.proto`` text side (protoc, the printer) is
:mod:`.protobuf_text` and :mod:`.protobuf_printer`.
"""
from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterable, List, Optional, Sequence, Tuple, Union

from .model import InvalidSchema

if TYPE_CHECKING:  # pragma: no cover
    from google.protobuf.descriptor import Descriptor, FileDescriptor
    from google.protobuf.descriptor_pb2 import FileDescriptorProto
    from google.protobuf.descriptor_pool import DescriptorPool

__all__ = ["ParsedProto", "is_serialized", "from_serialized", "to_serialized", "as_proto", "descriptor_pool",
           "message_index", "message_at", "message_index_of", "message_name_at"]

_BASE64 = re.compile(r"^[A-Za-z0-9+/\s]+={0,2}\s*$")


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
    return base64.b64encode(as_proto(file).SerializeToString()).decode("ascii")


def as_proto(file: Union["FileDescriptorProto", "FileDescriptor"]) -> "FileDescriptorProto":
    """``file`` as a ``FileDescriptorProto`` (a runtime ``FileDescriptor`` is copied)."""
    from google.protobuf import descriptor_pb2

    if isinstance(file, descriptor_pb2.FileDescriptorProto):
        return file
    proto = descriptor_pb2.FileDescriptorProto()
    file.CopyToProto(proto)
    return proto


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
