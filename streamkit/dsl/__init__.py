"""The declarative DSL: builders that append IR nodes and never execute.

``kinds.py`` holds the types users call (Stream, Table, the grouped, windowed and cogrouped
kinds); ``building/`` the functions they call to validate, name and append the IR."""
from .builder import StreamsBuilder
from .kinds import (BranchedStream, CogroupedStream, GroupedStream, GroupedTable, SessionWindowedStream, Stream,
                    Table, TimeWindowedStream, WindowedCogroupedStream)

__all__ = ["StreamsBuilder", "Stream", "BranchedStream", "GroupedStream", "GroupedTable", "Table",
           "TimeWindowedStream", "SessionWindowedStream", "CogroupedStream", "WindowedCogroupedStream"]
