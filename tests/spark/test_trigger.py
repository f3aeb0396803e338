"""The trigger interval against the transaction timeout, at start, in real Spark (no broker: the
check comes before any connection). kafka2pc takes the interval from twopc.triggerIntervalMs (a
Python data source cannot see its query's trigger); the foreachBatch sink reads the query's own
trigger from Spark's JVM."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from twopc.demo.drivers import write_json_files
from twopc.spark import ExactlyOnceKafkaSink
from twopc.spark.option_checks import query_trigger_ms

from .helpers import sink_options

pytestmark = pytest.mark.spark


def frame(spark: Any, source: Path) -> Any:
    write_json_files(source, 1, 5, "t")  # there at start: batch 0 runs at once
    return spark.readStream.schema("value string").json(str(source))


def failure_of(query: Any) -> str:
    """The error the query stopped with (it must stop on its first batch)."""
    with pytest.raises(Exception) as caught:
        query.awaitTermination(300)
    query.stop()
    return str(caught.value)


def test_kafka2pc_refuses_a_trigger_interval_option_too_long_for_the_timeout(
        spark: Any, tmp_path: Path) -> None:
    options = {**sink_options("127.0.0.1:9", "t", tmp_path), "twopc.triggerIntervalMs": "40000"}
    query = (frame(spark, tmp_path / "in").writeStream.format("kafka2pc").options(**options)
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="40 seconds").start())
    text = failure_of(query)
    assert "TriggerIntervalError" in text, text[-3000:]
    assert "option twopc.triggerIntervalMs: a trigger interval of 40000 ms is more than 30000 ms" \
        in text


def test_the_foreach_batch_sink_refuses_the_query_trigger_too_long_for_the_timeout(
        spark: Any, tmp_path: Path) -> None:
    options = sink_options("127.0.0.1:9", "t", tmp_path)
    sink = ExactlyOnceKafkaSink({**options, "twopc.transactionTimeoutMs": "20000"})
    query = (frame(spark, tmp_path / "in").writeStream.foreachBatch(sink)
             .option("checkpointLocation", str(tmp_path / "ckpt"))
             .trigger(processingTime="15 seconds").start())
    text = failure_of(query)
    assert "TriggerIntervalError" in text, text[-3000:]
    assert ("the query's trigger (processingTime 15000 ms): a trigger interval of 15000 ms is "
            "more than 10000 ms") in text
    assert "twopc.transactionTimeoutMs to at least 30000 ms" in text


@pytest.mark.parametrize(("trigger", "expected"), [({"processingTime": "7 seconds"}, 7000),
                                                   ({"availableNow": True}, None)])
def test_the_query_trigger_as_foreach_batch_reads_it(spark: Any, tmp_path: Path,
                                                     trigger: dict[str, Any],
                                                     expected: int | None) -> None:
    seen: list[int | None] = []

    def probe(batch_df: Any, batch_id: int) -> None:
        query_id = batch_df.sparkSession.sparkContext.getLocalProperty("sql.streaming.queryId")
        seen.append(query_trigger_ms(batch_df.sparkSession, query_id))

    query = (frame(spark, tmp_path / "in").writeStream.foreachBatch(probe)
             .option("checkpointLocation", str(tmp_path / "ckpt")).trigger(**trigger).start())
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert seen and set(seen) == {expected}
