"""Two Python data sources that split the throughput gap between Spark's JVM Kafka sink and kafka2pc.

- `bench_noop`: receives the rows in the Python worker as Arrow batches, as kafka2pc does, and writes
  nothing: the cost every Python data source pays before it produces a single record;
- `bench_plain`: the same, then a plain idempotent confluent-kafka producer per task (at-least-once,
  no transaction, a delivery callback that fails the task on any error): the cost of producing from
  Python without the two-phase commit.

kafka2pc minus `bench_plain` is then the price of exactly-once itself. `bench_noop` also takes a
streaming query (`writeStream`), timed into benchmarks/timing_log.py's log as
benchmarks/timed_sink.py times kafka2pc, so that a micro-batch's Python data-source costs (driver-side
workers, task workers, Arrow batches) can be told from twopc's own. Benchmarks only.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)

from benchmarks import timing_log

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql.types import StructType

timing_log.imports_done()  # as timed_sink does for twopc's: ~0 here, for the same column

NOOP = "bench_noop"
PLAIN = "bench_plain"


class RowCount(WriterCommitMessage):
    def __init__(self, rows: int) -> None:
        self.rows = rows


class DeliveryFailed(RuntimeError):
    """A record of the plain baseline was not delivered (the benchmark run is then invalid)."""


def _column(batch: pa.RecordBatch, name: str) -> list[Any] | None:
    for index, field_name in enumerate(batch.schema.names):
        if field_name.lower() == name:
            return batch.column(index).to_pylist()  # type: ignore[no-any-return]
    return None


class _NoopWriter(DataSourceArrowWriter):
    def write(self, iterator: Iterator[pa.RecordBatch]) -> RowCount:
        rows = 0
        for batch in iterator:
            # Materialize the values as kafka2pc does (to_pylist), so that only producing differs.
            values = _column(batch, "value")
            rows += len(values or ())
        return RowCount(rows)


class _NoopStreamWriter(DataSourceStreamArrowWriter):
    """The streaming noop: each call timed as kafka2pc's are (benchmarks/timed_sink.py)."""

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def write(self, iterator: Iterator[pa.RecordBatch]) -> RowCount:
        from pyspark import TaskContext

        began = time.time()
        rows = _NoopWriter().write(iterator).rows
        context = TaskContext.get()
        batch = context.getLocalProperty("streaming.sql.batchId") if context is not None else None
        timing_log.record({"phase": "task", "prefix": self.tag, "batch": batch,
                           "start_ms": began * 1000, "end_ms": time.time() * 1000, "rows": rows,
                           "partition": context.partitionId() if context is not None else None,
                           **timing_log.process_state()})
        return RowCount(rows)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        now = time.time() * 1000
        rows = sum(m.rows for m in messages if isinstance(m, RowCount))
        timing_log.record({"phase": "commit", "prefix": self.tag, "batch": batchId,
                           "start_ms": now, "end_ms": now, "rows": rows,
                           **timing_log.process_state()})

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        pass


class _PlainWriter(DataSourceArrowWriter):
    def __init__(self, options: dict[str, str]) -> None:
        self.bootstrap = options["kafka.bootstrap.servers"]
        self.topic = options["topic"]
        # Other kafka.* options are producer settings, as for Spark's own sink and kafka2pc.
        self.producer_config = {k[len("kafka."):]: v for k, v in options.items()
                                if k.startswith("kafka.") and k != "kafka.bootstrap.servers"}

    def write(self, iterator: Iterator[pa.RecordBatch]) -> RowCount:
        from confluent_kafka import KafkaError, Producer

        failed: list[KafkaError] = []

        def on_delivery(err: KafkaError | None, _msg: object) -> None:
            if err is not None:
                failed.append(err)

        producer = Producer({"linger.ms": 5, **self.producer_config,
                             "bootstrap.servers": self.bootstrap, "enable.idempotence": True,
                             "on_delivery": on_delivery})
        produce, poll, topic = producer.produce, producer.poll, self.topic
        rows = 0
        for batch in iterator:
            values = _column(batch, "value") or []
            keys = _column(batch, "key") or [None] * len(values)
            for value, key in zip(values, keys, strict=True):
                try:
                    produce(topic, value, key)
                except BufferError:
                    produce_when_room(produce, poll, topic, value, key)
            rows += len(values)
            poll(0)
        if producer.flush(120) or failed:
            raise DeliveryFailed(f"plain baseline: {len(failed)} deliveries failed: {failed[:3]}")
        return RowCount(rows)


class NoopDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return NOOP

    def writer(self, schema: StructType, overwrite: bool) -> _NoopWriter:
        return _NoopWriter()

    def streamWriter(self, schema: StructType, overwrite: bool) -> _NoopStreamWriter:
        now = time.time() * 1000
        tag = str(self.options.get("topic", NOOP))
        timing_log.record({"phase": "prepare", "prefix": tag, "streaming": True,
                           "for_commit": timing_log.in_commit_runner(), "start_ms": now,
                           "end_ms": now, **timing_log.process_state()})
        return _NoopStreamWriter(tag)


class PlainDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return PLAIN

    def writer(self, schema: StructType, overwrite: bool) -> _PlainWriter:
        return _PlainWriter(dict(self.options))


def register(spark: Any) -> None:
    spark.dataSource.register(NoopDataSource)
    spark.dataSource.register(PlainDataSource)


def produce_when_room(produce: Any, poll: Any, topic: str, value: bytes, key: bytes | None) -> None:
    """The slow path of a plain producer's loop: the queue is full, so serve delivery reports until
    produce() takes the record (the hot loop keeps its own try, so it pays no extra call)."""
    while True:
        poll(0.05)
        try:
            produce(topic, value, key)
            return
        except BufferError:
            continue
