"""Lets PySpark 4 find the "pykraft" data source without `pykraft.spark.register(spark)`:
PySpark discovers top-level `pyspark_<name>` modules that define `DefaultSource`."""

from pykraft.spark.source import PykraftDataSource as DefaultSource

__all__ = ["DefaultSource"]
