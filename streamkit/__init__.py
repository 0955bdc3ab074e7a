"""streamkit: Kafka Streams-style stream processing for Python.

>>> import streamkit as sk
>>> app = sk.App("hello")
>>> views = app.topic("views", value_serde=sk.serdes.Json(), partitions=3)
"""
from . import serdes, sinks, sources, stores
from .app import App
from .dsl import BranchedStream, GroupedStream, GroupedTable, Stream, StreamsBuilder, Table
from .dsl.global_table import GlobalTable
from .errors import (ConfigError, RecordError, SerializationError, SinkError, StreamkitError, TopologyError,
                     TransientSinkError, UserFunctionError)
from .processor import ProcessorContext, Punctuation
from .schemas.registry_resolution import use_broker_registry as _use_broker_registry
from .topics import TopicSpec
from .windowing import (HoppingWindows, SessionWindows, SlidingWindows, TumblingWindows, Windowed,
                        WindowedSerde)
from .windowing.join_windows import JoinWindows
from .windowing.suppressed import Suppressed

__all__ = [
    "App", "StreamsBuilder", "Stream", "BranchedStream", "GroupedStream", "GroupedTable", "Table",
    "ProcessorContext", "Punctuation", "TopicSpec", "serdes", "sinks", "sources", "spark", "stores",
    "TumblingWindows", "HoppingWindows", "SlidingWindows", "SessionWindows", "Windowed", "WindowedSerde",
    "Suppressed", "JoinWindows", "GlobalTable",
    "StreamkitError", "ConfigError", "TopologyError", "SerializationError", "RecordError", "UserFunctionError",
    "SinkError", "TransientSinkError",
]
__version__ = "0.1.0"


def _registry_on_broker(broker_url: str):
    # The serdes sit below the transports, so the package wires them here: a serde with
    # registry="embedded" bound to a broker opens the registry kept on that broker.
    from .schemas.registry.broker_log import registry_on_broker

    return registry_on_broker(broker_url)


_use_broker_registry(_registry_on_broker)


def __getattr__(name: str):
    # ``sk.spark`` (Spark replay) loads on first use: ``import streamkit`` pulls in no
    # runtime, RocksDB, Kafka client, pyarrow or pyspark.
    if name == "spark":
        import importlib

        module = importlib.import_module(".spark", __name__)
        globals()["spark"] = module
        return module
    raise AttributeError(f"module 'streamkit' has no attribute {name!r}")
