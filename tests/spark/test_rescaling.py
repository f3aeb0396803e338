"""Rescaling between restarts through Spark (issue 31 A.2), on a real broker: the query's or job's
partition count changes, the output topic gains partitions, the transactional id prefix changes,
each after the driver was SIGKILLed in the middle of a commit. The audit finds every record
exactly once and none missing, no transaction of the pool stays open, and what cannot be repaired
is refused with a typed error naming what to do. The core protocol's side, cheaper and with more
cases: tests/driver/test_rescaling.py."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient, TxnState
from twopc.demo.drivers import write_json_files
from twopc.errors import DataLossError, PrefixChanged
from twopc.protocol.pool import in_pool
from twopc.spark import write_exactly_once

from .helpers import errors_of, run_driver, sink_options
from .test_batch import assert_exactly_once, expected, ids_df
from .test_jobs import J_ROWS, job_cfg, wait_until_none_ongoing

pytestmark = [pytest.mark.spark, pytest.mark.integration]

# Short enough that a killed run's transactions expire within the test.
TIMING = {"twopc.transactionTimeoutMs": "15000", "twopc.commitMarginMs": "1000"}


def open_in_pool(control: ControlClient, prefix: str) -> list[str]:
    """The pool's transactions open now (not after a timeout would have ended them)."""
    return sorted(t.transactional_id for t in control.list_transactions(
        prefix, states=[TxnState.ONGOING]) if in_pool(prefix, t.transactional_id))


def grow(broker: KafkaUnderTest, topic: str, partitions: int) -> None:
    admin = AdminClient(broker.config())
    for f in admin.create_partitions([NewPartitions(topic, partitions)]).values():
        f.result(30)


# case: (where the first run dies, its options, wait for its transactions to expire, the
# restart's partition count, the topic's partitions before the restart or None)
CASES: dict[str, tuple[str, dict[str, str], bool, int, int | None]] = {
    # Open transactions of partitions 2 and 3 that no task of the restart takes again: the
    # restart's recovery must fence them (a 60 s timeout: they would outlive the restart).
    "fewer-before-intent": ("coordinator.before_intent", {}, False, 2, None),
    # Partly visible with 4 partitions, re-run with 2: only copy-forward can repair it.
    "fewer-partly-committed": ("coordinator.after_endtxn_1", TIMING, True, 2, None),
    # Decided on a 4-partition topic, which then grows to 8; the restart has 6 partitions.
    "more-topic-grown": ("coordinator.after_intent", {}, False, 6, 8),
}


@pytest.mark.slow  # two Spark driver processes
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_query_restarted_rescaled(case: str, broker: KafkaUnderTest, topic: str,
                                    tmp_path: Path, control: ControlClient) -> None:
    """A streaming query (`repartition(4)`) killed at a commit step of its first micro-batch,
    then restarted from the same checkpoints rescaled as `case` says."""
    point, options, expire, partitions, topic_partitions = CASES[case]
    source = tmp_path / "in"
    ids = write_json_files(source, 2, 40, "m")
    cfg = {"bootstrap": broker.bootstrap_servers, "topic": topic, "source": str(source),
           "checkpoint": (tmp_path / "twopc").as_uri(), "spark_checkpoint": str(tmp_path / "spark"),
           "prefix": "rs", "partitions": 4, "options": options}
    crashed = run_driver("stream", cfg, env={"TWOPC_CRASH_AT": point,
                                             "TWOPC_CRASH_SCOPE": "session"})
    assert crashed.returncode == -signal.SIGKILL, (crashed.returncode, errors_of(crashed.stderr))
    if expire:
        wait_until_none_ongoing(control, [f"rs-{p}-0" for p in range(4)], 60)
    else:
        assert open_in_pool(control, "rs") != []  # what the restart has to settle or fence
    if topic_partitions is not None:
        grow(broker, topic, topic_partitions)
    restarted = run_driver("stream", {**cfg, "partitions": partitions})
    assert restarted.returncode == 0, errors_of(restarted.stderr)
    assert open_in_pool(control, "rs") == []
    assert_exactly_once(broker, topic, ids)


@pytest.mark.slow  # a Spark driver process of its own, besides this one
def test_a_partly_committed_job_rerun_with_fewer_partitions(
        spark: Any, broker: KafkaUnderTest, topic: str, tmp_path: Path,
        control: ControlClient) -> None:
    """The job's first run (4 partitions) dies after one of its four commits and the others
    expire. A re-run with 2 partitions cannot reproduce the visible one: under
    twopc.repairPolicy=rerun that is a DataLossError naming the changed partition count, the
    re-run's transactions fenced at once; under auto (the default) the three expired
    transactions are copied forward from the log."""
    crashed = run_driver("job", job_cfg(broker, topic, tmp_path, "rj", **TIMING), env={
        "TWOPC_CRASH_AT": "coordinator.after_endtxn_1", "TWOPC_CRASH_SCOPE": "session"})
    assert crashed.returncode == -signal.SIGKILL, (crashed.returncode, errors_of(crashed.stderr))
    wait_until_none_ongoing(control, [f"rj-{p}-0" for p in range(4)], 60)
    options = {**sink_options(broker.bootstrap_servers, topic, tmp_path, prefix="rj"), **TIMING}
    with pytest.raises(DataLossError, match="partition count changed"):
        write_exactly_once(ids_df(spark, "rj", J_ROWS, partitions=2), "J",
                           {**options, "twopc.repairPolicy": "rerun"})
    assert open_in_pool(control, "rj") == []
    report = write_exactly_once(ids_df(spark, "rj", J_ROWS, partitions=2), "J", options)
    per_partition = J_ROWS // 4
    assert (report.status, report.rows, report.transactions) == (
        "copied", 3 * per_partition, 3), report
    assert open_in_pool(control, "rj") == []
    assert_exactly_once(broker, topic, expected("rj", J_ROWS))


@pytest.mark.slow  # three Spark driver processes
def test_a_query_restarted_with_another_prefix_is_refused(
        broker: KafkaUnderTest, topic: str, tmp_path: Path, control: ControlClient) -> None:
    """The query dies after its intent; restarted with another twopc.transactionalIdPrefix it is
    refused (PrefixChanged, naming the prefix to restore) before it writes anything; restarted
    with the old prefix it settles the batch and goes on."""
    source = tmp_path / "in"
    ids = write_json_files(source, 2, 40, "m")
    cfg = {"bootstrap": broker.bootstrap_servers, "topic": topic, "source": str(source),
           "checkpoint": (tmp_path / "twopc").as_uri(), "spark_checkpoint": str(tmp_path / "spark"),
           "prefix": "pa"}
    crashed = run_driver("stream", cfg, env={"TWOPC_CRASH_AT": "coordinator.after_intent",
                                             "TWOPC_CRASH_SCOPE": "session"})
    assert crashed.returncode == -signal.SIGKILL, (crashed.returncode, errors_of(crashed.stderr))
    renamed = run_driver("stream", {**cfg, "prefix": "pb"})
    assert renamed.returncode != 0 and "RESULT" not in renamed.stdout
    assert "PrefixChanged" in renamed.stderr, errors_of(renamed.stderr)
    assert "twopc.transactionalIdPrefix=pa" in renamed.stderr, errors_of(renamed.stderr)
    assert open_in_pool(control, "pb") == []  # nothing written under the new prefix
    restarted = run_driver("stream", cfg)
    assert restarted.returncode == 0, errors_of(restarted.stderr)
    assert open_in_pool(control, "pa") == []
    assert_exactly_once(broker, topic, ids)


def test_a_job_family_under_another_prefix_is_refused(
        spark: Any, broker: KafkaUnderTest, topic: str, tmp_path: Path) -> None:
    """Batch jobs of one log are the family of its prefix: a job under another prefix on the
    same twopc.checkpoint is refused before it writes (a job id the log committed would
    otherwise be written again under the new one)."""
    options = sink_options(broker.bootstrap_servers, topic, tmp_path, prefix="fa")
    assert write_exactly_once(ids_df(spark, "fa", 8, 2), "A", options).rows == 8
    with pytest.raises(PrefixChanged, match=r"twopc\.transactionalIdPrefix=fa"):
        write_exactly_once(ids_df(spark, "fa", 8, 2), "A",
                           {**options, "twopc.transactionalIdPrefix": "fb"})
    assert_exactly_once(broker, topic, expected("fa", 8))
