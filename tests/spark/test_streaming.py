"""Streaming writes through kafka2pc and the foreachBatch sink, against a real broker and real Spark."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from twopc.broker.under_test import KafkaUnderTest
from twopc.demo.drivers import write_json_files
from twopc.ops.audit import audit_topic, partition_offsets, wait_until_stable
from twopc.spark import ExactlyOnceKafkaSink

from .helpers import sink_options

pytestmark = [pytest.mark.spark, pytest.mark.integration]

FILES = 4
PER_FILE = 50


def stable(broker: KafkaUnderTest, topic: str) -> None:
    """No open transaction after a committed batch: LSO == HW on every partition, and data arrived."""
    offsets = partition_offsets(broker.config(), topic)
    assert all(lso == hw for lso, hw in offsets.values()), offsets


def start_query(spark: Any, source: Path, spark_checkpoint: Path, options: dict[str, str],
                foreach: ExactlyOnceKafkaSink | None = None) -> Any:
    frame = (
        spark.readStream.schema("value string").option("maxFilesPerTrigger", 1).json(str(source))
        .repartition(4)
    )
    writer = frame.writeStream.option("checkpointLocation", str(spark_checkpoint))
    if foreach is not None:
        return writer.foreachBatch(foreach).start()
    return writer.format("kafka2pc").options(**options).start()


def test_micro_batches_are_exactly_once_and_leave_no_open_transaction(
    spark: Any, broker: KafkaUnderTest, topic: str, tmp_path: Path
) -> None:
    options = sink_options(broker.bootstrap_servers, topic, tmp_path)
    source = tmp_path / "in"
    ids = write_json_files(source, 1, PER_FILE, "s")
    query = start_query(spark, source, tmp_path / "spark-ckpt", options)
    try:
        for file_no in range(1, FILES):
            # One file per micro-batch (maxFilesPerTrigger=1): check the offsets after each commit.
            query.processAllAvailable()
            stable(broker, topic)
            ids += write_json_files(source, 1, PER_FILE, "s", first=file_no)
        query.processAllAvailable()
        stable(broker, topic)
        assert query.lastProgress["batchId"] >= FILES - 1
    finally:
        query.stop()
    report = audit_topic(broker.config(), topic, ids)
    assert report.passed, report.summary()
    assert report.records == FILES * PER_FILE


def test_a_new_spark_checkpoint_against_an_old_twopc_log_is_refused(
    spark: Any, broker: KafkaUnderTest, topic: str, tmp_path: Path
) -> None:
    options = sink_options(broker.bootstrap_servers, topic, tmp_path)
    source = tmp_path / "in"
    ids = write_json_files(source, 2, PER_FILE, "q")
    first = start_query(spark, source, tmp_path / "ckpt-1", options)
    try:
        first.processAllAvailable()
    finally:
        first.stop()
    second = start_query(spark, source, tmp_path / "ckpt-2", options)
    with pytest.raises(Exception, match="is bound to query"):
        second.awaitTermination(timeout=120)
    second.stop()
    report = audit_topic(broker.config(), topic, ids)
    assert report.passed, report.summary()  # the refused query wrote nothing


def test_foreach_batch_sink_is_exactly_once(
    spark: Any, broker: KafkaUnderTest, topic: str, tmp_path: Path
) -> None:
    options = sink_options(broker.bootstrap_servers, topic, tmp_path)
    source = tmp_path / "in"
    ids = write_json_files(source, 3, PER_FILE, "fb")
    query = start_query(spark, source, tmp_path / "ckpt", options, foreach=ExactlyOnceKafkaSink(options))
    try:
        query.processAllAvailable()
        stable(broker, topic)
    finally:
        query.stop()
    report = audit_topic(broker.config(), topic, ids)
    assert report.passed, report.summary()


def test_foreach_batch_writes_again_when_the_guard_fails(
    spark: Any, broker: KafkaUnderTest, topic: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first write of a batch outlives its transactions (the driver stalls past the timeout): the
    check before the intent fails, the batch is aborted whole, and the sink writes it again in the same
    call. foreachBatch runs in this very process, so the stall is injected here."""
    import time

    import twopc.spark.foreach_batch as fb
    from checkpoint import open_log
    from twopc.protocol.log_records import Aborted, from_body

    options = {**sink_options(broker.bootstrap_servers, topic, tmp_path),
               "twopc.transactionTimeoutMs": "3000", "twopc.commitMarginMs": "1000"}
    real_write = fb.write_tasks
    calls: list[int] = []

    def write_then_stall_once(*args: Any, **kwargs: Any) -> Any:
        results = real_write(*args, **kwargs)
        calls.append(len(results))
        if len(calls) == 1:
            time.sleep(3.5)  # past transaction.timeout.ms: the guard must refuse this attempt
        return results

    monkeypatch.setattr(fb, "write_tasks", write_then_stall_once)
    source = tmp_path / "in"
    ids = write_json_files(source, 1, PER_FILE, "g")
    sink = ExactlyOnceKafkaSink(options)
    query = start_query(spark, source, tmp_path / "ckpt", options, foreach=sink)
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert len(calls) == 2, f"the batch was written {len(calls)} times, expected 2"
    assert wait_until_stable(broker.config(), topic, 30)
    report = audit_topic(broker.config(), topic, ids)
    assert report.passed, report.summary()
    log = open_log(options["twopc.checkpoint"])
    kinds = [from_body(r.body) for r in log.records()]
    assert any(isinstance(k, Aborted) for k in kinds), kinds
