"""Copy-forward through Spark (issue 31 B), on a real broker and real Spark: Flink's loss case (the
driver down past the transaction timeout after its intent) with a source whose re-run returns other
rows. `twopc.repairPolicy` auto (the default) commits what the first run decided from the log's
copy: every original record exactly once, none of the re-run's, nothing open; `rerun` keeps the
re-run repair and its loud DataLossError."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest

from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient
from twopc.demo.drivers import write_json_files
from twopc.errors import DataLossError
from twopc.ops.audit import audit_topic
from twopc.spark import write_exactly_once

from .helpers import errors_of, run_driver, sink_options
from .test_batch import assert_exactly_once, expected, ids_df
from .test_jobs import J_ROWS, job_cfg, wait_until_none_ongoing

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.slow]

# Short enough that the first run's undecided-by-the-broker transactions expire within the test.
TIMING = {"twopc.transactionTimeoutMs": "15000", "twopc.commitMarginMs": "1000"}
# Where the first run dies: after one of its four EndTxn (the rest expire: partly visible), or
# after its intent, before any EndTxn (all four expire: nothing visible).
KILLED_AT = {"partial": ("coordinator.after_endtxn_1", 3),
             "all-aborted": ("coordinator.after_intent", 4)}


def _crash_job(broker: KafkaUnderTest, topic: str, tmp_path: Path, point: str,
               control: ControlClient) -> None:
    crashed = run_driver("job", job_cfg(broker, topic, tmp_path, "cp", **TIMING), env={
        "TWOPC_CRASH_AT": point, "TWOPC_CRASH_SCOPE": "session"})
    assert crashed.returncode == -signal.SIGKILL, (crashed.returncode, errors_of(crashed.stderr))
    wait_until_none_ongoing(control, [f"cp-{p}-0" for p in range(4)], 60)


@pytest.mark.parametrize("case", sorted(KILLED_AT))
def test_a_job_rerun_with_other_rows_commits_the_first_runs_records(
    case: str, spark: Any, broker: KafkaUnderTest, topic: str, tmp_path: Path,
    control: ControlClient
) -> None:
    point, lost = KILLED_AT[case]
    _crash_job(broker, topic, tmp_path, point, control)
    options = {**sink_options(broker.bootstrap_servers, topic, tmp_path, prefix="cp"), **TIMING}
    report = write_exactly_once(ids_df(spark, "other", J_ROWS), "J", options)
    assert_exactly_once(broker, topic, expected("cp", J_ROWS))  # none of "other-*"
    per_partition = J_ROWS // 4
    assert (report.status, report.rows, report.transactions) == (
        "copied", lost * per_partition, lost), report
    assert "copied forward" in str(report), report


def test_a_job_rerun_with_other_rows_under_rerun_policy_raises_data_loss(
    spark: Any, broker: KafkaUnderTest, topic: str, tmp_path: Path, control: ControlClient
) -> None:
    _crash_job(broker, topic, tmp_path, KILLED_AT["partial"][0], control)
    options = {**sink_options(broker.bootstrap_servers, topic, tmp_path, prefix="cp"), **TIMING,
               "twopc.repairPolicy": "rerun"}
    with pytest.raises(DataLossError):
        write_exactly_once(ids_df(spark, "other", J_ROWS), "J", options)
    # Only the first run's visible partition is there (the operator's `twopc recover --repair
    # copy` would finish it: tests/driver/test_copy_forward.py), and nothing of the re-run.
    found = audit_topic(broker.config(), topic, expected("cp", J_ROWS))
    per_partition = J_ROWS // 4
    assert (found.records, found.unique, len(found.missing)) == (
        per_partition, per_partition, J_ROWS - per_partition), found.summary()
    assert not found.lagging, found.summary()


@pytest.mark.parametrize("sink", ["kafka2pc", "foreachBatch"])
def test_a_streaming_batch_rerun_over_changed_files_commits_the_first_runs_records(
    sink: str, broker: KafkaUnderTest, topic: str, tmp_path: Path, control: ControlClient
) -> None:
    """The query dies after its intent's first EndTxn; its other transactions expire; the files
    of that micro-batch are rewritten before the restart (a source that cannot replay). The same
    through the kafka2pc data source and through the foreachBatch sink."""
    source = tmp_path / "in"
    ids = write_json_files(source, 2, 40, "m")
    cfg = {"bootstrap": broker.bootstrap_servers, "topic": topic, "source": str(source),
           "checkpoint": (tmp_path / "twopc").as_uri(), "spark_checkpoint": str(tmp_path / "spark"),
           "prefix": "cps", "options": TIMING, "sink": sink}
    crashed = run_driver("stream", cfg, env={"TWOPC_CRASH_AT": "coordinator.after_endtxn_1",
                                             "TWOPC_CRASH_SCOPE": "session"})
    assert crashed.returncode == -signal.SIGKILL, (crashed.returncode, errors_of(crashed.stderr))
    wait_until_none_ongoing(control, [f"cps-{p}-0" for p in range(4)], 60)
    write_json_files(source, 2, 40, "changed")  # same file names, other rows
    restarted = run_driver("stream", cfg)
    assert restarted.returncode == 0, errors_of(restarted.stderr)
    # Batch 0 (file 0) as first written; batch 1 was never planned before the crash: its file is
    # read as it is now.
    assert_exactly_once(broker, topic, ids[:40] + [f"changed-1-{r}" for r in range(40)])
