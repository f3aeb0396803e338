"""The write path of the foreachBatch sink and the job function: the tasks run through mapInArrow,
their WriteResults come back to this driver process, and the coordinator runs here.

Unlike the data source, the driver keeps its Python process for the whole call, so the results need
no detour through Spark's commit messages.

Design: docs/design.md section 7.
"""

from __future__ import annotations

import pickle
from collections.abc import Iterator
from typing import TYPE_CHECKING

from twopc.protocol.handle import WriteResult
from twopc.spark.options import SinkConfig
from twopc.spark.task import task_write

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame

    from twopc.protocol.owner import Owner

_RESULT_SCHEMA = "result binary"


def write_tasks(df: DataFrame, config: SinkConfig, owner: Owner, batch: str) -> list[WriteResult]:
    """Write every partition of `df` as one pre-committed transaction each; return the winning
    attempts' results (failed attempts leave open transactions the coordinator fences)."""

    def run(batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        import pyarrow as pa
        from pyspark import TaskContext

        context = TaskContext.get()
        assert context is not None
        result = task_write(
            config, owner, batch, batches,
            task_partition=context.partitionId(), attempt=context.attemptNumber(),
        )
        yield pa.record_batch([pa.array([pickle.dumps(result)], pa.binary())], names=["result"])

    rows = df.mapInArrow(run, _RESULT_SCHEMA).collect()
    results = [pickle.loads(row["result"]) for row in rows]
    if not all(isinstance(r, WriteResult) for r in results):
        raise TypeError("a task returned something other than a WriteResult")
    return results
