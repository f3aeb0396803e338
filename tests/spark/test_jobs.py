"""Batch jobs of one log over their lifetime (issue #17, items 1, 4 and 5), on a real broker and Spark:
a job whose records were purged is still committed, whichever way it was committed and however it
is re-run, and `write_exactly_once`'s report says what this run itself made visible."""

from __future__ import annotations

import json
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from checkpoint import open_log
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient, TxnState
from twopc.log.session import Session
from twopc.spark import write_exactly_once

from .helpers import background_driver, errors_of, run_driver, sink_options
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


def result_of(done: Any) -> dict[str, Any]:
    assert done.returncode == 0, errors_of(done.stderr)
    line = next(x for x in done.stdout.splitlines() if x.startswith("RESULT "))
    found: dict[str, Any] = json.loads(line[len("RESULT "):])
    return found


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


@pytest.mark.slow  # a Spark driver process of its own, besides this one
def test_the_report_of_a_run_that_lost_the_race_to_a_concurrent_run_counts_nothing(
    spark: Any, broker: KafkaUnderTest, topic: str, tmp_path: Path
) -> None:
    """Item 5: run B pre-commits part of J, pauses; run A writes and commits all of J; B goes on
    (its later tasks see J committed and skip). B's transaction is fenced as a duplicate: its
    report must not count its rows."""
    options = sink_options(broker.bootstrap_servers, topic, tmp_path, prefix="race")
    wake = tmp_path / "wake"
    env = {"TWOPC_PAUSE_AT": "spark.task.precommitted.attempt0", "TWOPC_PAUSE_UNTIL": str(wake),
           "TWOPC_PAUSE_SECONDS": "240"}
    # local[1]: B's tasks run one at a time; the first pre-commits and pauses, the others wait.
    cfg_b = {**job_cfg(broker, topic, tmp_path, "race"), "master": "local[1]"}
    with background_driver("job", cfg_b, env) as run_b:
        run_b.wait_for("twopc: paused at spark.task.precommitted.attempt0", 240)
        run_a = write_exactly_once(ids_df(spark, "race", J_ROWS), "J", options)
        assert (run_a.rows, run_a.transactions, run_a.skipped) == (J_ROWS, 4, False), run_a
        wake.touch()
        report_b = result_of(run_b.finish(240))["report"]
    assert "paused" in run_b.stderr  # B's tasks really wrote before A committed
    assert report_b["skipped"] and (report_b["rows"], report_b["transactions"]) == (0, 0), report_b
    assert "already committed" in report_b["text"]
    assert_exactly_once(broker, topic, expected("race", J_ROWS))


@pytest.mark.slow  # a Spark driver process of its own, besides this one
def test_the_report_of_a_repairing_run_counts_only_what_it_committed(
    spark: Any, broker: KafkaUnderTest, topic: str, tmp_path: Path, control: ControlClient
) -> None:
    """Item 5: the first run dies after one of its four commits; its other transactions time out.
    The re-run repairs the job: it commits three partitions and fences the one already visible."""
    timing = {"twopc.transactionTimeoutMs": "15000", "twopc.commitMarginMs": "1000"}
    options = {**sink_options(broker.bootstrap_servers, topic, tmp_path, prefix="rep"), **timing}
    crashed = run_driver("job", job_cfg(broker, topic, tmp_path, "rep", **timing), env={
        "TWOPC_CRASH_AT": "coordinator.after_endtxn_1", "TWOPC_CRASH_SCOPE": "session"})
    assert crashed.returncode == -signal.SIGKILL, (crashed.returncode, errors_of(crashed.stderr))
    wait_until_none_ongoing(control, [f"rep-{p}-0" for p in range(4)], 60)
    again = write_exactly_once(ids_df(spark, "rep", J_ROWS), "J", options)
    per_partition = J_ROWS // 4
    assert (again.rows, again.transactions, again.skipped) == (3 * per_partition, 3, False), again
    assert "repair" in str(again)
    assert_exactly_once(broker, topic, expected("rep", J_ROWS))


def wait_until_none_ongoing(control: ControlClient, ids: list[str], limit_s: float) -> None:
    deadline = time.monotonic() + limit_s
    while any(d.state is TxnState.ONGOING for d in control.describe_transactions(ids).values()):
        assert time.monotonic() < deadline, f"{ids}: still open after {limit_s} s"
        time.sleep(0.5)
