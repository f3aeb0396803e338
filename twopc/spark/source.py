"""The `kafka2pc` Python data source: Spark's Kafka sink schema and options, written exactly once.

Where the driver runs code (checked on PySpark 4.3, see docs/spark.md):
- batch: `writer()` runs once in a driver-side Python worker before any task; the writer is pickled to
  the tasks and to a fresh driver-side worker that calls `commit()` or `abort()`;
- streaming: `streamWriter()` runs in a driver-side worker before the tasks of *every* micro-batch, and
  again in the worker that calls `commit(messages, batchId)` / `abort(...)`. Recovery must run only in
  the first of these: in the second, the batch's own pre-committed transactions are open and not yet
  named by any record, and recovery would fence them as orphans.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from checkpoint.redact import redact_url
from twopc.driver.observe import show_in_worker_log
from twopc.errors import QueryMismatch
from twopc.protocol.handle import WriteResult
from twopc.protocol.owner import Owner
from twopc.spark.driver import (
    abort_batch,
    commit_batch,
    job_owner,
    new_run,
    prepare,
    query_id_from_spark_checkpoint,
)
from twopc.spark.errors import OptionError
from twopc.spark.options import JOB_ID, SinkConfig, parse_options
from twopc.spark.schema import check_schema
from twopc.spark.task import task_write

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

_log = logging.getLogger(__name__)

NAME = "kafka2pc"
_COMMIT_RUNNER = "python_streaming_sink_runner.py"


class TaskMessage(WriterCommitMessage):
    """Spark requires a WriterCommitMessage; the payload is the core's picklable WriteResult."""

    def __init__(self, result: WriteResult) -> None:
        self.result = result

    def __repr__(self) -> str:
        return f"TaskMessage({self.result!r})"


def results_of(messages: Sequence[WriterCommitMessage | None]) -> list[WriteResult]:
    """A failed task's message is None: it reported nothing (its transaction, if any, is an orphan
    that the coordinator finds by listing the prefix's open transactions)."""
    return [m.result for m in messages if isinstance(m, TaskMessage)]


def _task_identity() -> tuple[int, int]:
    from pyspark import TaskContext

    context = TaskContext.get()
    if context is None:
        raise RuntimeError("kafka2pc's write() must run inside a Spark task")
    return context.partitionId(), context.attemptNumber()


def _constructed_for_commit() -> bool:
    """True when Spark builds the stream writer only to call commit()/abort() on it.

    PySpark gives the data source no other way to tell its two driver-side constructions apart; the
    worker's file name is part of PySpark's layout (pyspark/sql/worker/), checked on 4.3.
    """
    # A plain walk up the frames: inspect.stack() would also look up every frame's source file
    # (milliseconds, in every micro-batch).
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_filename.endswith(_COMMIT_RUNNER):
            return True
        frame = frame.f_back  # type: ignore[assignment]
    return False


class BatchWriter(DataSourceArrowWriter):
    def __init__(self, config: SinkConfig, owner: Owner, job_id: str, already_committed: bool,
                 run: str | None = None) -> None:
        self.config = config
        self.owner = owner
        self.batch = job_id
        self.already_committed = already_committed
        self.run = run  # this run's lease on the family's log (twopc/driver/lease.py)

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskMessage:
        partition, attempt = _task_identity()
        return TaskMessage(
            task_write(
                self.config, self.owner, self.batch, iterator,
                task_partition=partition, attempt=attempt, known_committed=self.already_committed,
            )
        )

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        show_in_worker_log()
        commit_batch(self.config, self.owner, self.batch, results_of(messages), self.run)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        show_in_worker_log()
        abort_batch(self.config, self.owner, self.batch, results_of(messages), run=self.run)


class StreamWriter(DataSourceStreamArrowWriter):
    def __init__(self, config: SinkConfig, owner: Owner) -> None:
        self.config = config
        self.owner = owner

    def write(self, iterator: Iterator[pa.RecordBatch]) -> TaskMessage:
        from pyspark import TaskContext

        partition, attempt = _task_identity()
        context = TaskContext.get()
        assert context is not None
        batch_id = context.getLocalProperty("streaming.sql.batchId")
        query_id = context.getLocalProperty("sql.streaming.queryId")
        if batch_id is None:
            raise RuntimeError("a streaming task without the local property streaming.sql.batchId")
        if query_id is not None and query_id != self.owner.owner_id:
            # The driver read the query id from the checkpoint's metadata; the task's own must agree.
            raise QueryMismatch(self.config.checkpoint_url, str(self.owner), f"query {query_id}")
        return TaskMessage(
            task_write(
                self.config, self.owner, batch_id, iterator, task_partition=partition, attempt=attempt
            )
        )

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        show_in_worker_log()
        commit_batch(self.config, self.owner, str(batchId), results_of(messages))

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        show_in_worker_log()
        abort_batch(self.config, self.owner, str(batchId), results_of(messages))


class Kafka2pcDataSource(DataSource):
    """`df.write.format("kafka2pc")` / `df.writeStream.format("kafka2pc")`: see docs/spark.md."""

    @classmethod
    def name(cls) -> str:
        return NAME

    def writer(self, schema: StructType, overwrite: bool) -> BatchWriter:
        show_in_worker_log()
        config = parse_options(self.options, streaming=False)
        if overwrite:
            raise OptionError(
                "save mode overwrite is not possible for Kafka (a topic is append-only): use "
                "mode('append')"
            )
        if config.job_id is None:
            raise OptionError(
                f"a batch write needs the option {JOB_ID}: a name for this job that stays the same "
                "when the job is re-run, so that a re-run of a committed job writes nothing"
            )
        check_schema(schema, config.topic)
        owner = job_owner(config)
        run = new_run()
        # JobFamilyBusy if another job of the family runs (twopc/driver/lease.py). PySpark runs
        # no driver-side Python through the job's tasks: the lease is taken once, for
        # twopc.jobLeaseMs, and ended by the commit or the abort.
        committed = prepare(config, owner, config.job_id, run)
        if committed:
            _log.warning(
                "twopc: job %s is already committed in %s: this run writes nothing",
                config.job_id, redact_url(config.checkpoint_url),
            )
        return BatchWriter(config, owner, config.job_id, committed, None if committed else run)

    def streamWriter(self, schema: StructType, overwrite: bool) -> StreamWriter:
        show_in_worker_log()
        config = parse_options(self.options, streaming=True)
        check_schema(schema, config.topic)
        owner = Owner.query(query_id_from_spark_checkpoint(config.spark_checkpoint), config.prefix)
        if not _constructed_for_commit():
            # This planning process runs before every micro-batch and never commits: the first
            # look at the newest committed batch (twopc/driver/call.py `_to_prove`) would cost
            # Fetches of its spans each time; the committing process makes it once.
            prepare(config, owner, first_look=False)
        return StreamWriter(config, owner)


def register(spark: object) -> None:
    """Make `format("kafka2pc")` available in this SparkSession."""
    spark.dataSource.register(Kafka2pcDataSource)  # type: ignore[attr-defined]
