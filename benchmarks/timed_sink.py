"""`kafka2pc_timed`: kafka2pc, unchanged, with its phases timed from outside.

PySpark runs the driver-side `writer()`/`streamWriter()`, each task's `write()` and the driver's
`commit()` in different Python processes, so timings cannot stay in memory: each timed call appends
one JSON line to the file named by the environment variable below (set before the SparkSession
starts; Spark's Python workers inherit it). Lines carry the phase ("prepare", "task", "commit"),
the prefix, start and end (epoch ms); a commit line also has the earliest transaction start among the
batch's handles (the coordinator's clock) and the transaction timeout. Benchmarks only.
"""

from __future__ import annotations

import fcntl
import json
import os
import time
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import StructType

from twopc.spark.source import BatchWriter, Kafka2pcDataSource, StreamWriter, TaskMessage, results_of

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa

NAME = "kafka2pc_timed"
LOG_ENV = "TWOPC_BENCH_COMMIT_LOG"


def record(line: dict[str, Any]) -> None:
    path = os.environ.get(LOG_ENV)
    if path:
        with open(path, "a") as out:
            fcntl.flock(out, fcntl.LOCK_EX)  # several processes append to the same file
            out.write(json.dumps(line) + "\n")


def _commit_line(prefix: str, batch: object, began: float, messages: list[WriterCommitMessage | None],
                 timeout_ms: int) -> dict[str, Any]:
    handles = [r.handle for r in results_of(messages) if r.handle is not None]
    return {
        "phase": "commit",
        "prefix": prefix,
        "batch": batch,
        "start_ms": began * 1000,
        "end_ms": time.time() * 1000,
        "transactions": len(handles),
        "rows": sum(h.record_count for h in handles),
        "oldest_start_ms": min((h.start_ms for h in handles), default=None),
        "timeout_ms": timeout_ms,
    }


class TimedStreamWriter(StreamWriter):
    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        began = time.time()
        try:
            super().commit(messages, batchId)
        finally:
            record(_commit_line(self.config.prefix, batchId, began, messages,
                                self.config.transaction_timeout_ms))


class TimedBatchWriter(BatchWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskMessage:
        began = time.time()
        message = super().write(iterator)
        record({"phase": "task", "prefix": self.config.prefix, "start_ms": began * 1000,
                "end_ms": time.time() * 1000, "rows": message.result.rows,
                "partition": message.result.task_partition})
        return message

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        began = time.time()
        try:
            super().commit(messages)
        finally:
            record(_commit_line(self.config.prefix, self.batch, began, messages,
                                self.config.transaction_timeout_ms))


class TimedKafka2pcDataSource(Kafka2pcDataSource):
    @classmethod
    def name(cls) -> str:
        return NAME

    def writer(self, schema: StructType, overwrite: bool) -> TimedBatchWriter:
        began = time.time()
        inner = super().writer(schema, overwrite)
        record({"phase": "prepare", "prefix": inner.config.prefix, "start_ms": began * 1000,
                "end_ms": time.time() * 1000})
        return TimedBatchWriter(inner.config, inner.owner, inner.batch, inner.already_committed)

    def streamWriter(self, schema: StructType, overwrite: bool) -> TimedStreamWriter:
        writer = super().streamWriter(schema, overwrite)
        return TimedStreamWriter(writer.config, writer.owner)
