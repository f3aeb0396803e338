"""Spark integration: the `kafka2pc` data source, a foreachBatch sink and a batch-job function.

    import twopc.spark
    twopc.spark.register(spark)
    df.write.format("kafka2pc").option("kafka.bootstrap.servers", ...).option("topic", ...)
      .option("twopc.checkpoint", "file:///...").option("twopc.transactionalIdPrefix", "orders")
      .option("twopc.jobId", "orders-2026-11-22").mode("append").save()

See docs/spark.md for the options, the guarantees and the errors.
"""

from twopc.spark.errors import (
    BadRowError,
    InputSchemaError,
    MissingQueryIdentity,
    OptionError,
    SparkSinkError,
)
from twopc.spark.foreach_batch import ExactlyOnceKafkaSink
from twopc.spark.jobs import JobReport, write_exactly_once
from twopc.spark.listener import BatchProgress, TwopcProgressListener
from twopc.spark.options import SinkConfig, parse_options
from twopc.spark.source import NAME, Kafka2pcDataSource, register

__all__ = [
    "NAME",
    "BadRowError",
    "BatchProgress",
    "ExactlyOnceKafkaSink",
    "InputSchemaError",
    "JobReport",
    "Kafka2pcDataSource",
    "MissingQueryIdentity",
    "OptionError",
    "SinkConfig",
    "SparkSinkError",
    "TwopcProgressListener",
    "parse_options",
    "register",
    "write_exactly_once",
]
