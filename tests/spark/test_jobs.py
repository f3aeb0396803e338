"""Batch jobs of one log over their lifetime (issue #17, items 1 and 4), on a real broker and Spark:
a job whose records were purged is still committed, whichever way it was committed and however it
is re-run."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from checkpoint import open_log
from twopc.session import Session
from twopc.spark import write_exactly_once
from twopc.testing.brokers import KafkaUnderTest

from .helpers import errors_of, run_driver, sink_options
from .test_batch import assert_exactly_once, expected, ids_df

pytestmark = [pytest.mark.spark, pytest.mark.integration]

J_ROWS = 40
LATER_JOBS = 11  # the log keeps the last 10 finished jobs (Coordinator.retain_batches)


def job_cfg(broker: KafkaUnderTest, topic: str, tmp_path: Path, prefix: str,
            **options: str) -> dict[str, Any]:
    """A spark_driver.py job "J" on the log and prefix of sink_options(..., prefix)."""
    return {"bootstrap": broker.bootstrap_servers, "topic": topic, "prefix": prefix, "rows": J_ROWS,
            "checkpoint": (tmp_path / "twopc").as_uri(), "job_id": "J", "options": options}


def run_later_jobs(spark: Any, options: dict[str, str]) -> list[str]:
    """LATER_JOBS small jobs on the same log: afterwards J's records are purged from it."""
    ids: list[str] = []
    for i in range(LATER_JOBS):
        report = write_exactly_once(ids_df(spark, f"k{i}", 4, 2), f"K{i}", options)
        assert (report.rows, report.skipped) == (4, False), report
        ids += expected(f"k{i}", 4)
    return ids


def purged(options: dict[str, str], job: str) -> bool:
    return job not in Session(open_log(options["twopc.checkpoint"])).state.batches


@pytest.mark.slow  # a Spark driver process of its own, besides this one
def test_a_job_killed_after_its_committed_record_is_not_written_again_after_the_purge(
    spark: Any, broker: KafkaUnderTest, topic: str, tmp_path: Path
) -> None:
    """Item 1: the driver dies between the Committed record and the job-id index entry."""
    options = sink_options(broker.bootstrap_servers, topic, tmp_path, prefix="idx")
    crashed = run_driver("job", job_cfg(broker, topic, tmp_path, "idx"), env={
        "TWOPC_CRASH_AT": "coordinator.after_committed_record", "TWOPC_CRASH_SCOPE": "session"})
    assert crashed.returncode == -signal.SIGKILL, (crashed.returncode, errors_of(crashed.stderr))
    later = run_later_jobs(spark, options)
    assert purged(options, "J")  # only the index can still tell that J is committed
    again = write_exactly_once(ids_df(spark, "idx", J_ROWS), "J", options)
    assert_exactly_once(broker, topic, expected("idx", J_ROWS) + later)
    assert again.skipped and again.rows == 0, again


def test_a_purged_job_rerun_through_the_data_source_is_already_committed(
    spark: Any, broker: KafkaUnderTest, topic: str, tmp_path: Path
) -> None:
    """Item 4: the tasks skip (the index says committed); the commit must agree, not raise
    BatchAborted ("nothing of it is visible") for records that are visible."""
    options = sink_options(broker.bootstrap_servers, topic, tmp_path)
    df = ids_df(spark, "ds", J_ROWS)
    df.write.format("kafka2pc").options(**options).option("twopc.jobId", "J").mode("append").save()
    later = run_later_jobs(spark, options)
    assert purged(options, "J")
    df.write.format("kafka2pc").options(**options).option("twopc.jobId", "J").mode("append").save()
    assert_exactly_once(broker, topic, expected("ds", J_ROWS) + later)
