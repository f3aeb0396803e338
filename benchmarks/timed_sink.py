"""`kafka2pc_timed`: kafka2pc, unchanged, with its phases timed from outside.

PySpark runs the driver-side `writer()`/`streamWriter()`, each task's `write()` and the driver's
`commit()` in different Python processes, so timings cannot stay in memory: each timed call appends
one JSON line to the file named by the environment variable below (set before the SparkSession
starts; Spark's Python workers inherit it; benchmarks/timing_log.py). Lines carry the process id,
the phase ("prepare", "task", "commit"), the prefix, start and end (epoch ms); a commit line also
has the earliest transaction start among the batch's handles (the coordinator's clock) and the
transaction timeout. A streaming query's lines also say which micro-batch a task or commit belongs
to, whether a `streamWriter()` ran for planning or for the commit (`for_commit`), and what the
process had imported for twopc (`timing_log.process_state`). Benchmarks only.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import WriterCommitMessage
from pyspark.sql.types import StructType

# Before twopc's modules: timing_log notes what this process had loaded without them.
from benchmarks import timing_log
from benchmarks.timing_log import LOG_ENV, record
from twopc.spark.source import BatchWriter, Kafka2pcDataSource, StreamWriter, TaskMessage, results_of

timing_log.imports_done()

if TYPE_CHECKING:
    from collections.abc import Iterator

    import pyarrow as pa

NAME = "kafka2pc_timed"
__all__ = ["LOG_ENV", "NAME", "TimedKafka2pcDataSource", "record"]


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
    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskMessage:
        from pyspark import TaskContext

        began = time.time()
        message = super().write(iterator)
        context = TaskContext.get()
        batch = context.getLocalProperty("streaming.sql.batchId") if context is not None else None
        record({"phase": "task", "prefix": self.config.prefix, "batch": batch,
                "start_ms": began * 1000, "end_ms": time.time() * 1000,
                "rows": message.result.rows, "partition": message.result.task_partition,
                **timing_log.process_state()})
        return message

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        began = time.time()
        try:
            super().commit(messages, batchId)
        finally:
            record({**_commit_line(self.config.prefix, batchId, began, messages,
                                   self.config.transaction_timeout_ms),
                    **timing_log.process_state()})


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
        # PySpark calls this twice per micro-batch, in two driver-side workers: to plan (twopc's
        # guards, log binding, recovery) and again to commit; `for_commit` tells them apart.
        began = time.time()
        writer = super().streamWriter(schema, overwrite)
        record({"phase": "prepare", "prefix": writer.config.prefix, "streaming": True,
                "for_commit": timing_log.in_commit_runner(), "start_ms": began * 1000,
                "end_ms": time.time() * 1000, **timing_log.process_state()})
        return TimedStreamWriter(writer.config, writer.owner)
