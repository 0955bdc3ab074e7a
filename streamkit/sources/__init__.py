"""Sources beyond topics: ``b.stream(sk.sources.Files("data/*.jsonl", timestamp="ts"))``
and ``b.stream(sk.sources.ParquetArchive(path))`` read historical files as a stream."""
from .base import PartitionReader, Source
from .files import Files
from .parquet_archive import ParquetArchive

__all__ = ["Source", "PartitionReader", "Files", "ParquetArchive"]
