"""Batch writes through kafka2pc and write_exactly_once, against a real broker and real Spark."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from checkpoint import open_log
from twopc.broker.under_test import KafkaUnderTest
from twopc.ops.audit import audit_topic, partition_offsets
from twopc.spark import write_exactly_once

from .helpers import run_driver, sink_options

pytestmark = [pytest.mark.spark, pytest.mark.integration]

N = 400


def ids_df(spark: Any, tag: str, n: int = N, partitions: int = 4) -> Any:
    return spark.range(0, n, 1, partitions).selectExpr(f"concat('{tag}-', cast(id as string)) as value")


def expected(tag: str, n: int = N) -> list[str]:
    return [f"{tag}-{i}" for i in range(n)]


def assert_exactly_once(broker: KafkaUnderTest, topic: str, ids: list[str]) -> None:
    report = audit_topic(broker.config(), topic, ids)
    assert report.passed, report.summary()
    assert report.records == len(ids)


def test_job_writes_once_and_a_rerun_writes_nothing(
    spark: Any, broker: KafkaUnderTest, topic: str, tmp_path: Path
) -> None:
    options = sink_options(broker.bootstrap_servers, topic, tmp_path)
    df = ids_df(spark, "a")
    for _ in range(2):  # the second run of the same job id must add nothing
        df.write.format("kafka2pc").options(**options).option("twopc.jobId", "job-a").mode(
            "append"
        ).save()
        assert_exactly_once(broker, topic, expected("a"))


def test_write_exactly_once_reports_rows_and_the_skip(
    spark: Any, broker: KafkaUnderTest, topic: str, tmp_path: Path
) -> None:
    options = sink_options(broker.bootstrap_servers, topic, tmp_path)
    first = write_exactly_once(ids_df(spark, "b"), "job-b", options)
    assert (first.rows, first.transactions, first.skipped) == (N, 4, False)
    again = write_exactly_once(ids_df(spark, "b"), "job-b", options)
    assert again.skipped and again.rows == 0
    assert "already committed" in str(again)
    # Another job id on the same log and prefix is a new job.
    other = write_exactly_once(ids_df(spark, "c", 40), "job-c", options)
    assert (other.rows, other.skipped) == (40, False)
    assert_exactly_once(broker, topic, expected("b") + expected("c", 40))


def test_a_task_killed_after_its_precommit_is_retried_exactly_once(
    broker: KafkaUnderTest, topic: str, tmp_path: Path
) -> None:
    # local[2,2]: every task may fail once. Attempt 0 of every task SIGKILLs its Python worker right
    # after its transaction is pre-committed, so each partition leaves one open orphan transaction.
    cfg = {
        "master": "local[2,2]", "bootstrap": broker.bootstrap_servers, "topic": topic,
        "checkpoint": (tmp_path / "twopc").as_uri(), "prefix": "retry", "rows": N, "job_id": "j1",
    }
    done = run_driver("batch", cfg, env={"TWOPC_CRASH_AT": "spark.task.precommitted.attempt0"})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "RESULT" in done.stdout
    assert_exactly_once(broker, topic, expected("retry"))
    # The crashes really happened: the intent holds the retries' transactions (slot 1) and the
    # commit named attempt 0's open transactions (slot 0) as orphans (body key "losers"), then
    # fenced them.
    bodies = [r.body for r in open_log(cfg["checkpoint"]).records()]
    prepared = [b for b in bodies if b["kind"] == "prepared"]
    committed = [b for b in bodies if b["kind"] == "committed"]
    assert sorted(h["tid"] for h in prepared[0]["handles"]) == [f"retry-{p}-1" for p in range(4)]
    assert sorted(committed[0]["losers"]) == [f"retry-{p}-0" for p in range(4)]


def test_bad_options_and_schema_fail_before_writing(
    spark: Any, broker: KafkaUnderTest, topic: str, tmp_path: Path
) -> None:
    options = sink_options(broker.bootstrap_servers, topic, tmp_path)
    cases: list[tuple[Callable[[], None], str]] = [
        (lambda: spark.range(3).selectExpr("cast(id as string) as key").write.format("kafka2pc")
         .options(**options).option("twopc.jobId", "x").mode("append").save(), "no 'value' column"),
        (lambda: ids_df(spark, "d").write.format("kafka2pc").options(**options)
         .mode("append").save(), "twopc.jobId"),
        (lambda: ids_df(spark, "d").write.format("kafka2pc").options(**options)
         .option("twopc.jobId", "x").option("twopc.transactionTimeoutMs", "soon")
         .mode("append").save(), "must be an integer"),
        (lambda: ids_df(spark, "d").write.format("kafka2pc").options(**options)
         .option("twopc.jobId", "x").option("kafka.no.such.setting", "1")
         .mode("append").save(), "no.such.setting"),
    ]
    for action, needle in cases:
        with pytest.raises(Exception, match=needle):
            action()
    assert all(hw == 0 for _, hw in partition_offsets(broker.config(), topic).values())


def test_bad_rows_fail_and_leave_nothing_visible(
    spark: Any, broker: KafkaUnderTest, make_topic: Callable[..., str], tmp_path: Path
) -> None:
    topic = make_topic(4, config={"max.message.bytes": "2000"})
    options = sink_options(broker.bootstrap_servers, topic, tmp_path)
    null_at_end = ids_df(spark, "e").selectExpr("CASE WHEN value = 'e-399' THEN NULL ELSE value END AS value")
    with pytest.raises(Exception, match="null value"):
        write_exactly_once(null_at_end, "job-null", options)
    too_big = ids_df(spark, "f").selectExpr(
        "CASE WHEN value = 'f-399' THEN repeat('x', 50000) ELSE value END AS value"
    )
    with pytest.raises(Exception, match=r"(?i)too large|size"):
        write_exactly_once(too_big, "job-big", options)
    # abort() fences what the failed tasks left open; its abort markers land just after it answers.
    report = audit_topic(broker.config(), topic, [], settle_s=15)
    assert report.records == 0, report.summary()
    assert not report.lagging, report.summary()
