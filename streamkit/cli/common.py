"""Options and helpers shared by the CLI commands."""
from __future__ import annotations

import os
import re
from contextlib import contextmanager
from typing import Dict, Iterator, Optional

import click

from ..errors import StreamkitError
from ..transport.base import Transport
from ..transport.factory import configured_broker, open_transport

broker_option = click.option(
    "--broker", metavar="URL", default=None,
    help="embedded:///path or kafka://host:port[,host:port] (default: $STREAMKIT_BROKER, else the "
         "config file's broker, else the app's, else embedded://.streamkit).")


def broker_url(option: Optional[str]) -> str:
    return option or configured_broker() or "embedded://.streamkit"


@contextmanager
def connected(option: Optional[str]) -> Iterator[Transport]:
    """The broker named by ``--broker`` (or its defaults), closed on exit."""
    transport = open_transport(broker_url(option))
    try:
        yield transport
    finally:
        transport.close()


def require_topic(transport: Transport, name: str):
    meta = transport.admin.topic(name)
    if meta is None:
        raise click.ClickException(
            f"unknown topic '{name}' on {transport.url}: create it with "
            f"`streamkit topics create {name} --partitions N`")
    return meta


# -- record formats (issue 23) -------------------------------------------------------

FORMATS = ("json", "text", "avro", "json-schema", "protobuf")
REGISTRY_FORMATS = ("avro", "json-schema", "protobuf")


def format_options(fn=None, *, value_default: str = "--format"):
    """``--key-format/--value-format``, their schemas, Protobuf message names and
    ``--registry``, shared by ``produce`` and ``consume``; ``value_default`` says what
    ``--value-format`` defaults to (``@format_options(value_default=...)``)."""
    if fn is None:
        return lambda f: format_options(f, value_default=value_default)
    options = [
        click.option("--value-format", type=click.Choice(FORMATS), default=None,
                     help="How values are encoded: json/text (plain), or avro, json-schema, protobuf in "
                          f"Confluent's wire format with a Schema Registry (default: {value_default})."),
        click.option("--key-format", type=click.Choice(FORMATS), default=None,
                     help="How keys are encoded, as --value-format (default: text for strings, else json)."),
        click.option("--schema", "value_schema", type=click.Path(exists=True, dir_okay=False), default=None,
                     metavar="FILE", help="The value schema: .avsc (Avro), .json (JSON Schema) or .proto "
                                          "(Protobuf). Needed to produce; to consume, Avro uses it as the "
                                          "reader schema and Protobuf as the message types."),
        click.option("--key-schema", type=click.Path(exists=True, dir_okay=False), default=None,
                     metavar="FILE", help="The key schema, as --schema."),
        click.option("--message", "value_message", metavar="NAME", default=None,
                     help="The Protobuf message of --schema to use (default: the file's first message)."),
        click.option("--key-message", metavar="NAME", default=None, help="As --message, for keys."),
        click.option("--registry", metavar="URL|embedded", default="embedded", show_default=True,
                     help="The Schema Registry: http(s)://[user:password@]host:port, or 'embedded' "
                          "(the registry kept on --broker, as `streamkit registry serve` serves it)."),
    ]
    for option in reversed(options):
        fn = option(fn)
    return fn


def registry_serde(fmt: str, schema_file: Optional[str], message: Optional[str], registry: str, *,
                   topic: str, is_key: bool, broker: str, required: bool):
    """The registry serde for ``fmt`` (avro, json-schema, protobuf) bound to ``topic``,
    or None for json/text. ``required``: the schema file must be given (to produce)."""
    if fmt not in REGISTRY_FORMATS:
        return None
    option = "--key-schema" if is_key else "--schema"
    text = None
    if schema_file is not None:
        with open(schema_file, encoding="utf-8") as f:
            text = f.read()
    elif required:
        raise click.UsageError(f"--{'key' if is_key else 'value'}-format {fmt} needs {option} FILE")
    from .. import serdes

    if fmt == "avro":
        serde = serdes.Avro(text, registry=registry)
    elif fmt == "json-schema":
        serde = serdes.JsonSchema(text, registry=registry)
    else:
        serde = _protobuf_serde(text, schema_file, message, registry, is_key)
    return serde.for_topic(topic, is_key, broker=broker)


def _protobuf_serde(text: Optional[str], schema_file: Optional[str], message: Optional[str], registry: str,
                    is_key: bool):
    """A Protobuf serde for the message ``message`` (default: the first) of the ``.proto``
    file ``schema_file``; its imports are read relative to the file's directory."""
    from .. import serdes

    if text is None or schema_file is None:
        return serdes.Protobuf(None, registry=registry)
    from ..schemas.protobuf_text import message_class, parse

    imports = _proto_imports(text, os.path.dirname(os.path.abspath(schema_file)), {})
    file = parse(text, imports).file
    names = [m.name for m in file.message_type]
    if not names:
        raise click.UsageError(f"{schema_file} defines no message")
    wanted = message or names[0]
    full_name = wanted if not file.package or wanted.startswith(file.package + ".") else f"{file.package}.{wanted}"
    try:
        cls = message_class(text, full_name, imports)
    except StreamkitError as exc:
        option = "--key-message" if is_key else "--message"
        raise click.UsageError(f"{option} {wanted}: {exc} (its messages: {', '.join(names)})") from None
    return serdes.Protobuf(cls, registry=registry)


_IMPORT = re.compile(r'^\s*import\s+(?:public\s+|weak\s+)?"([^"]+)"\s*;', re.MULTILINE)


def _proto_imports(text: str, root: str, found: Dict[str, str]) -> Dict[str, str]:
    """``{import path: text}`` of the files ``text`` imports that exist under ``root``,
    recursively (the well-known types are left to the compiler)."""
    for path in _IMPORT.findall(text):
        if path in found:
            continue
        candidate = os.path.join(root, path)
        if os.path.isfile(candidate):
            with open(candidate, encoding="utf-8") as f:
                found[path] = f.read()
            _proto_imports(found[path], root, found)
    return found
