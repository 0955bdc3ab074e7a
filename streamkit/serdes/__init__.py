"""Serializers/deserializers ("serdes") between Python objects and record bytes.

The plain serdes (:class:`Json`, :class:`String`, :class:`Bytes`, :class:`Int`,
:class:`Float`, :class:`Dataclass`, :class:`Void`) live in :mod:`.basic`. The
Schema Registry serdes (:class:`Avro`, :class:`JsonSchema`, :class:`Protobuf`) write
Confluent's wire format and load their libraries (fastavro, jsonschema, protobuf) on
first use, so ``import streamkit`` stays light.
"""
from __future__ import annotations

import importlib
from typing import Any

from .basic import Bytes, Dataclass, Float, Int, Json, Serde, String, Void, _preview, compact_json

# Avro, JsonSchema and Protobuf are left out of __all__: a star import would load them.
__all__ = ["Serde", "Json", "String", "Bytes", "Int", "Float", "Dataclass", "Void"]

# name -> module (under this package) that defines it; imported on first access.
_REGISTRY_SERDES = {"Avro": ".avro", "JsonSchema": ".json_schema", "Protobuf": ".protobuf"}


def __getattr__(name: str) -> Any:
    module_name = _REGISTRY_SERDES.get(name)
    if module_name is None:
        raise AttributeError(f"module 'streamkit.serdes' has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name, __name__), name)
    globals()[name] = value
    return value
