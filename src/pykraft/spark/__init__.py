"""PySpark pipelines over pykraft (or any Kafka) topics: the "pykraft" data source.

    from pykraft.spark import local_session, register
    spark = local_session("my-pipeline")     # or any SparkSession (PySpark 4.2+)
    register(spark)
    events = (spark.readStream.format("pykraft")
              .option("kafka.bootstrap.servers", "127.0.0.1:9092")
              .option("subscribe", "events").load())

The source has the schema and options of Spark's built-in Kafka source, so a pipeline moves
between them by changing the format name. Its readers and writers are confluent-kafka clients
running in Spark's Python workers; no JVM connector is needed.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = ["local_session", "register"]


def register(spark: SparkSession) -> None:
    """Make format("pykraft") available to this session's readers and writers."""
    from pykraft.spark.source import PykraftDataSource

    spark.dataSource.register(PykraftDataSource)


def local_session(app_name: str = "pykraft", *, master: str = "local[2]",
                  configs: dict[str, str] | None = None) -> SparkSession:
    """A local SparkSession whose Python workers run this interpreter, with the source
    registered. Small-machine defaults: no web UI, few shuffle partitions, UTC session time."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.ui.enabled", "false")
               .config("spark.ui.showConsoleProgress", "false")
               .config("spark.sql.shuffle.partitions", "4")
               .config("spark.sql.session.timeZone", "UTC")
               .config("spark.driver.memory", "1g"))
    for key, value in (configs or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    register(spark)
    return spark
