"""Spark integration: the `kafka2pc` data source, a foreachBatch sink and a batch-job function.

    import twopc.spark
    twopc.spark.register(spark)
    df.write.format("kafka2pc").option("kafka.bootstrap.servers", ...).option("topic", ...)
      .option("twopc.checkpoint", "file:///...").option("twopc.transactionalIdPrefix", "orders")
      .option("twopc.jobId", "orders-2026-11-22").mode("append").save()

See docs/spark.md for the options, the guarantees and the errors.

The names below are imported on first use, not with the package: every Python worker Spark starts
for the data source imports this package before `twopc.spark.source` (to unpickle the writer), and
an executor's worker has no use for the driver side (the foreachBatch sink, the job function, the
coordinator behind them): benchmarks/README.md section 9.
"""

from __future__ import annotations

import importlib as _importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
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

# Each public name and the module that defines it.
_HOMES = {
    "NAME": "source",
    "BadRowError": "errors",
    "BatchProgress": "listener",
    "ExactlyOnceKafkaSink": "foreach_batch",
    "InputSchemaError": "errors",
    "JobReport": "jobs",
    "Kafka2pcDataSource": "source",
    "MissingQueryIdentity": "errors",
    "OptionError": "errors",
    "SinkConfig": "options",
    "SparkSinkError": "errors",
    "TwopcProgressListener": "listener",
    "parse_options": "options",
    "register": "source",
    "write_exactly_once": "jobs",
}

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


if not TYPE_CHECKING:  # so that type checkers see only the names above, not "any name is Any"

    def __getattr__(name: str) -> Any:
        home = _HOMES.get(name)
        if home is not None:
            value = getattr(_importlib.import_module(f"twopc.spark.{home}"), name)
            globals()[name] = value  # the next lookup is a plain attribute
            return value
        # The package's modules stay attributes too (`twopc.spark.errors.JournalError` after
        # `import twopc.spark`), as when the package imported them all; found by importing,
        # so that the package's own start reads no directory.
        if not name.startswith("_"):
            try:
                return _importlib.import_module(f"twopc.spark.{name}")
            except ModuleNotFoundError as missing:
                if missing.name != f"twopc.spark.{name}":
                    raise  # a module of ours that failed to import: not "no such attribute"
        raise AttributeError(f"module 'twopc.spark' has no attribute {name!r}")

    def __dir__() -> list[str]:
        import pkgutil

        modules = (m.name for m in pkgutil.iter_modules(__path__))
        return sorted({*__all__, *modules, *(n for n in globals() if n.startswith("__"))})
