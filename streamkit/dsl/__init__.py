"""The declarative DSL: builders that append IR nodes and never execute."""
from .builder import StreamsBuilder
from .cogrouped import CogroupedStream, WindowedCogroupedStream
from .grouped import GroupedStream, GroupedTable
from .stream import BranchedStream, Stream
from .table import Table
from .windowed_streams import SessionWindowedStream, TimeWindowedStream

__all__ = ["StreamsBuilder", "Stream", "BranchedStream", "GroupedStream", "GroupedTable", "Table",
           "TimeWindowedStream", "SessionWindowedStream", "CogroupedStream", "WindowedCogroupedStream"]
