"""The Spark backend: replay an app's topology over historical data on Apache Spark.

>>> import streamkit as sk                                   # doctest: +SKIP
>>> sk.spark.replay(app, inputs={"pageviews": sk.sources.ParquetArchive("archive/pageviews")},
...                 output="replay-out")                      # doctest: +SKIP

Needs the ``spark`` extra (pyspark) and Java 17+. See :mod:`.replay` for how a
topology becomes Spark stages and :mod:`.ordering` for why the results equal a
live run's.
"""
from .compare import CompareReport, compare_topic
from .fidelity import ReplayRefusedError
from .inputs import EmbeddedTopic, KafkaTopic, parse_input
from .replay import OutputSummary, ReplayResult, replay
from .session import get_session

__all__ = ["replay", "ReplayResult", "OutputSummary", "ReplayRefusedError", "EmbeddedTopic", "KafkaTopic",
           "parse_input", "get_session", "compare_topic", "CompareReport"]
