"""``DataFrame.mapInArrow`` for the replay, with or without pandas on the driver.

Rows cross between the JVM and the Python workers as Arrow record batches. PySpark's
``mapInArrow`` builds its UDF through ``pandas_udf``, which refuses to run unless
pandas is installed, although an Arrow map never touches pandas (neither on the
driver nor in the workers). Without pandas, :func:`map_in_arrow` builds the same
Arrow-iterator UDF itself and hands it to the JVM's ``mapInArrow`` exactly as
PySpark does.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

from ..errors import ConfigError

ArrowMap = Callable[[Iterable[Any]], Iterator[Any]]
"""Record batches of one Spark partition in, record batches out (``pyarrow.RecordBatch``)."""


def map_in_arrow(frame: Any, func: ArrowMap, schema: Any) -> Any:
    """``frame.mapInArrow(func, schema)``: ``func`` gets each Spark partition of ``frame``
    as an iterator of record batches and yields batches of ``schema``."""
    if _has_pandas():
        return frame.mapInArrow(func, schema)
    return _map_in_arrow_without_pandas(frame, func, schema)


def _has_pandas() -> bool:
    import importlib.util

    return importlib.util.find_spec("pandas") is not None


def _map_in_arrow_without_pandas(frame: Any, func: ArrowMap, schema: Any) -> Any:
    from pyspark.sql import DataFrame
    from pyspark.util import PythonEvalType

    try:
        from pyspark.sql.pandas.functions import vectorized_udf  # PySpark 4
    except ImportError:
        raise ConfigError("this PySpark's mapInArrow needs pandas on the driver: pip install pandas") from None

    udf = vectorized_udf(func, schema, PythonEvalType.SQL_MAP_ARROW_ITER_UDF, "pandas")
    column = udf(*[frame[name] for name in frame.columns])
    return DataFrame(frame._jdf.mapInArrow(column._jc, False, None), frame.sparkSession)
