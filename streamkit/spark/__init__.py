"""The Spark backend: replay an app's topology over historical data on Apache Spark.

Example (``app`` an :class:`~streamkit.App`; not a doctest, it needs Spark)::

    import streamkit as sk
    sk.spark.replay(app, inputs={"pageviews": sk.sources.ParquetArchive("archive/pageviews")},
                    output="replay-out")

Needs the ``spark`` extra (pyspark) and Java 17+. See :mod:`.replay` and
:mod:`.stages` for how a topology becomes Spark stages (rows cross between the JVM
and Python as Arrow batches) and :mod:`.ordering` for why the results equal a live
run's.
"""
from .compare import CompareReport, compare_topic
from .fidelity import ReplayRefusedError
from .inputs import EmbeddedTopic, KafkaTopic, parse_input
from .outputs import OutputSummary
from .replay import ReplayResult, replay
from .stages import StageSummary
from .session import get_session

__all__ = ["replay", "ReplayResult", "OutputSummary", "StageSummary", "ReplayRefusedError", "EmbeddedTopic",
           "KafkaTopic", "parse_input", "get_session", "compare_topic", "CompareReport"]
