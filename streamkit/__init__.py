"""streamkit: Kafka Streams-style stream processing for Python.

>>> import streamkit as sk
>>> app = sk.App("hello")
>>> views = app.topic("views", value_serde=sk.serdes.Json(), partitions=3)
"""
from . import serdes, sinks, sources, spark, stores
from .app import App
from .dsl import BranchedStream, GroupedStream, GroupedTable, Stream, StreamsBuilder, Table
from .errors import (ConfigError, RecordError, SerializationError, SinkError, StreamkitError, TopologyError,
                     TransientSinkError, UserFunctionError)
from .processor import ProcessorContext, Punctuation
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
