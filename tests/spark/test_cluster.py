"""kafka2pc on a Spark standalone cluster: executors in JVMs of their own, each with its own Python
workers, drivers started with spark-submit and twopc shipped with `--py-files` (tests/spark/cluster.py).

Each test runs its own application on the session's cluster (a master and two 1-core workers on
127.0.0.1 and 127.0.0.2) and ends with the exactly-once audit. `storage` puts twopc's checkpoint on
local files or on an S3-compatible server (moto): then driver and executors read and write the log
over HTTP. Faults are real: executor JVMs and whole driver sessions are SIGKILLed.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from twopc_testing.s3 import S3Server

from checkpoint import open_log
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient, TxnState
from twopc.crashpoints import TEST_HOOKS_VALUE, TEST_HOOKS_VAR
from twopc.demo.drivers import kill_session, write_json_files
from twopc.ops.audit import audit_topic

from .cluster import RUN_LIMIT_S, ClusterJob, ClusterSetup, spark_events, submit, task_attempts

pytestmark = [pytest.mark.spark, pytest.mark.integration, pytest.mark.timeout(2400)]

BUCKET = "twopc-spark-cluster"
# Executors start cold (JVM, Python workers, imports): a batch's first transactions may wait minutes
# on a loaded machine before the commit; 5 minutes is within the brokers' transaction.max.timeout.ms.
TIMEOUT_MS = "300000"
FILES = 3
PER_FILE = 40
# The default suite runs three of them on local files (streaming, speculation, an executor killed
# mid-write: 4 to 6 min on a loaded 2-core machine); the rest are slow (docs/cluster-report.md).
slow = pytest.mark.slow


@dataclass
class TwopcLog:
    """Where a test keeps twopc's log, as sink options, and its records read back."""

    url: str
    options: dict[str, str] = field(default_factory=dict)
    storage_options: dict[str, Any] = field(default_factory=dict)

    def bodies(self) -> list[dict[str, Any]]:
        return [r.body for r in open_log(self.url, self.storage_options).records()]

    def kinds(self, kind: str) -> list[dict[str, Any]]:
        return [b for b in self.bodies() if b.get("kind") == kind]


@pytest.fixture(scope="session")
def cluster_bucket(s3_server: S3Server) -> str:
    s3_server.create_bucket(BUCKET)
    return BUCKET


@pytest.fixture(params=["file", pytest.param("s3", marks=slow)])
def storage(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def twopc_log(storage: str, tmp_path: Path, request: pytest.FixtureRequest) -> TwopcLog:
    if storage == "file":
        url = (tmp_path / "twopc").as_uri()
        return TwopcLog(url, {"twopc.checkpoint": url})
    s3: S3Server = request.getfixturevalue("s3_server")
    url = f"s3://{request.getfixturevalue('cluster_bucket')}/{uuid.uuid4().hex}"
    # The flat twopc.storage.* form (lower-case keys are all s3fs needs here); the JSON form
    # twopc.storageOptions is in the S3 streaming test.
    flat = {"key": "testing", "secret": "testing", "endpoint_url": s3.endpoint}
    return TwopcLog(url, {"twopc.checkpoint": url, **{f"twopc.storage.{k}": v for k, v in flat.items()}},
                    flat)


def config(broker: KafkaUnderTest, topic: str, log: TwopcLog, prefix: str,
           **extra: Any) -> dict[str, Any]:
    """spark_driver.py's configuration: twopc's log and options, a long transaction timeout."""
    return {"bootstrap": broker.bootstrap_servers, "topic": topic, "checkpoint": log.url,
            "prefix": prefix, "options": {**log.options, "twopc.transactionTimeoutMs": TIMEOUT_MS},
            **extra}


def stream_config(broker: KafkaUnderTest, topic: str, log: TwopcLog, tmp_path: Path,
                  prefix: str) -> tuple[dict[str, Any], list[str]]:
    source = tmp_path / "in"
    ids = write_json_files(source, FILES, PER_FILE, prefix)
    cfg = config(broker, topic, log, prefix, source=str(source), spark_checkpoint=str(tmp_path / "spark"))
    return cfg, ids


def assert_exactly_once(broker: KafkaUnderTest, topic: str, ids: list[str]) -> None:
    report = audit_topic(broker.config(), topic, ids)
    assert report.passed, report.summary()
    assert report.records == len(ids), report.summary()


def wait_for(condition: Callable[[], Any], what: str, job: ClusterJob,
             timeout_s: float = RUN_LIMIT_S) -> Any:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if job.proc.proc.poll() is not None:
            break
        time.sleep(0.25)
    raise AssertionError(f"never: {what}\n{job.proc.errors()}")


def executors_of(job: ClusterJob) -> set[str]:
    return {a.executor for a in task_attempts(spark_events(job.events))}


# --- exactly once, on executors of their own ----------------------------------------------------


def test_streaming_on_the_cluster_is_exactly_once(
    cluster_setup: ClusterSetup, broker: KafkaUnderTest, topic: str, twopc_log: TwopcLog,
    tmp_path: Path
) -> None:
    cfg, ids = stream_config(broker, topic, twopc_log, tmp_path, "cs")
    job = submit(cluster_setup, "stream", cfg, tmp_path, "stream")
    job.assert_succeeded()
    assert_exactly_once(broker, topic, ids)
    assert len(twopc_log.kinds("committed")) == FILES  # one micro-batch per file
    # The tasks ran on both executors, each a JVM of its own under a worker (submit() sets
    # spark.locality.wait to 0: the reduce tasks of a one-file micro-batch otherwise wait for the
    # executor that ran its one map task).
    assert len(executors_of(job)) == 2, (executors_of(job), job.proc.errors())


@slow
def test_streaming_with_json_storage_options_on_s3(
    cluster_setup: ClusterSetup, broker: KafkaUnderTest, topic: str, s3_server: S3Server,
    cluster_bucket: str, tmp_path: Path
) -> None:
    """The other way to give s3fs its options: one JSON object (keys keep their case)."""
    url = f"s3://{cluster_bucket}/{uuid.uuid4().hex}"
    log = TwopcLog(url, {"twopc.checkpoint": url,
                         "twopc.storageOptions": json.dumps(s3_server.storage_options())},
                   s3_server.storage_options())
    cfg, ids = stream_config(broker, topic, log, tmp_path, "cj")
    submit(cluster_setup, "stream", cfg, tmp_path, "stream").assert_succeeded()
    assert_exactly_once(broker, topic, ids)
    assert len(log.kinds("committed")) == FILES


@slow
def test_batch_on_the_cluster_is_exactly_once(
    cluster_setup: ClusterSetup, broker: KafkaUnderTest, topic: str, twopc_log: TwopcLog,
    tmp_path: Path
) -> None:
    cfg = config(broker, topic, twopc_log, "cb", rows=400, job_id="job-1")
    job = submit(cluster_setup, "batch", cfg, tmp_path, "batch")
    job.assert_succeeded()
    assert_exactly_once(broker, topic, [f"cb-{i}" for i in range(400)])
    assert len(executors_of(job)) == 2, executors_of(job)


# --- speculation ---------------------------------------------------------------------------------

SPECULATION = {
    "spark.speculation": "true",
    "spark.speculation.interval": "200ms",
    "spark.speculation.quantile": "0.75",
    "spark.speculation.multiplier": "3",
    "spark.speculation.minTaskRuntime": "3s",
    # Judge tasks by run time alone (the efficiency check looks at input rates, which vary here).
    "spark.speculation.efficiency.enabled": "false",
}


def test_a_speculative_copy_wins_and_the_orphan_is_fenced(
    cluster_setup: ClusterSetup, broker: KafkaUnderTest, topic: str, twopc_log: TwopcLog,
    tmp_path: Path
) -> None:
    """Attempt 0 of the last partition pre-commits its transaction, then lingers (a pause hook of
    twopc.crashpoints on the executors); Spark launches a speculative attempt 1 on the other host,
    which wins. The commit must name attempt 0's open transaction an orphan and fence it."""
    partitions, rows, last = 8, 800, 7
    prefix = "sp"
    cfg = config(broker, topic, twopc_log, prefix, rows=rows, partitions=partitions, job_id="job-spec")
    conf = {**SPECULATION,
            "spark.executorEnv.TWOPC_PAUSE_AT": f"spark.task.precommitted.partition{last}.attempt0",
            "spark.executorEnv.TWOPC_PAUSE_SECONDS": "600",
            f"spark.executorEnv.{TEST_HOOKS_VAR}": TEST_HOOKS_VALUE}
    job = submit(cluster_setup, "batch", cfg, tmp_path, "speculation", conf=conf)
    job.assert_succeeded()

    # Spark ran both attempts of the last partition, the copy speculatively on another host, and
    # killed the original once the copy succeeded.
    tries = {a.attempt: a for a in task_attempts(spark_events(job.events)) if a.partition == last}
    assert sorted(tries) == [0, 1], tries
    assert tries[1].speculative and tries[1].end_reason == "Success", tries
    assert tries[0].host != tries[1].host, tries
    assert tries[0].end_reason in ("TaskKilled", None), tries
    # The commit decided for the copy and fenced the pre-committed original.
    [prepared] = twopc_log.kinds("prepared")
    assert f"{prefix}-{last}-1" in {h["tid"] for h in prepared["handles"]}
    [committed] = twopc_log.kinds("committed")
    # Committed.orphans, stored under the body key "losers" (log_records.py: stored names stay).
    assert committed["losers"] == [f"{prefix}-{last}-0"], committed
    with ControlClient(broker.config()) as control:
        orphan = control.describe_transactions([f"{prefix}-{last}-0"])[f"{prefix}-{last}-0"]
    assert orphan.state is not TxnState.ONGOING, orphan
    assert_exactly_once(broker, topic, [f"{prefix}-{i}" for i in range(rows)])


# --- an executor JVM SIGKILLed ---------------------------------------------------------------------


def test_an_executor_killed_mid_write(
    cluster_setup: ClusterSetup, broker: KafkaUnderTest, topic: str, twopc_log: TwopcLog,
    tmp_path: Path
) -> None:
    """Both executors' tasks stop after producing their rows, with their transactions open; one
    executor JVM is SIGKILLed there. Spark runs its task again elsewhere; the commit must fence the
    dead attempt's open transaction and commit the retry's."""
    prefix = "ek"
    go = tmp_path / "go"
    cfg = config(broker, topic, twopc_log, prefix, rows=400, job_id="job-kill")
    conf = {"spark.executorEnv.TWOPC_PAUSE_AT": "writer.after_produce",
            "spark.executorEnv.TWOPC_PAUSE_UNTIL": str(go),
            "spark.executorEnv.TWOPC_PAUSE_SECONDS": "600",
            f"spark.executorEnv.{TEST_HOOKS_VAR}": TEST_HOOKS_VALUE}
    job = submit(cluster_setup, "batch", cfg, tmp_path, "kill-mid-write", conf=conf)
    app = job.wait_app()
    with ControlClient(broker.config()) as control:

        def both_open() -> list[str] | None:
            ongoing = control.list_transactions(f"{prefix}-", states=[TxnState.ONGOING])
            return [t.transactional_id for t in ongoing] if len(ongoing) == 2 else None

        open_ids = wait_for(both_open, "both running tasks with an open transaction", job)
    victim = cluster_setup.cluster.executors(app)[0]
    cluster_setup.cluster.kill_executor(victim)
    go.touch()
    job.assert_succeeded()

    attempts = task_attempts(spark_events(job.events))
    lost = [a for a in attempts if a.executor == victim.executor_id and a.end_reason != "Success"]
    assert lost and all(a.end_reason == "ExecutorLostFailure" for a in lost), attempts
    [committed] = twopc_log.kinds("committed")
    [prepared] = twopc_log.kinds("prepared")
    tids = {h["tid"] for h in prepared["handles"]}
    # The killed attempt's transaction was open and is an orphan; its partition committed a retry.
    for orphan in committed["losers"]:
        assert orphan in open_ids and orphan not in tids, (orphan, open_ids, tids)
        partition = orphan.split("-")[1]
        assert any(t.startswith(f"{prefix}-{partition}-") and not t.endswith("-0") for t in tids), tids
    assert len(committed["losers"]) == 1, committed
    assert_exactly_once(broker, topic, [f"{prefix}-{i}" for i in range(400)])


@slow
def test_an_executor_killed_mid_commit(
    cluster_setup: ClusterSetup, broker: KafkaUnderTest, topic: str, twopc_log: TwopcLog,
    tmp_path: Path
) -> None:
    """The driver's commit of micro-batch 0 stops after its first EndTxn; an executor JVM whose tasks
    pre-committed transactions of the batch is SIGKILLed meanwhile. The commit finishes without it
    (EndTxn needs only the recorded ids and epochs), and the next micro-batches run on a new
    executor."""
    go = tmp_path / "go"
    cfg, ids = stream_config(broker, topic, twopc_log, tmp_path, "ec")
    job = submit(cluster_setup, "stream", cfg, tmp_path, "kill-mid-commit",
                 env={"TWOPC_PAUSE_AT": "coordinator.after_endtxn_1", "TWOPC_PAUSE_UNTIL": str(go),
                      "TWOPC_PAUSE_SECONDS": "600"})
    app = job.wait_app()
    job.wait_stderr("twopc: paused at coordinator.after_endtxn_1")
    victim = cluster_setup.cluster.executors(app)[0]
    cluster_setup.cluster.kill_executor(victim)
    go.touch()
    job.assert_succeeded()
    removed = [e for e in spark_events(job.events) if e.get("Event") == "SparkListenerExecutorRemoved"]
    assert victim.executor_id in {e["Executor ID"] for e in removed}, removed
    assert len(twopc_log.kinds("committed")) == FILES
    assert_exactly_once(broker, topic, ids)


# --- the driver SIGKILLed, restarted against the same cluster ------------------------------------


@slow
def test_the_driver_killed_mid_commit_and_restarted(
    cluster_setup: ClusterSetup, broker: KafkaUnderTest, topic: str, twopc_log: TwopcLog,
    tmp_path: Path
) -> None:
    """The driver's whole session (spark-submit's JVM, the Python driver, the driver-side worker
    holding the commit) is SIGKILLed right after the intent of micro-batch 0; its executors go with
    the application. A new driver on the same cluster and checkpoints rolls the intent forward."""
    cfg, ids = stream_config(broker, topic, twopc_log, tmp_path, "dk")
    first = submit(cluster_setup, "stream", cfg, tmp_path, "driver-1",
                   env={"TWOPC_PAUSE_AT": "coordinator.after_intent", "TWOPC_PAUSE_SECONDS": "600"})
    first.wait_app()
    first.wait_stderr("twopc: paused at coordinator.after_intent")
    assert kill_session(first.proc.proc.pid) > 0
    assert first.finish() != 0 and first.result is None
    assert len(twopc_log.kinds("prepared")) == 1 and not twopc_log.kinds("committed")

    submit(cluster_setup, "stream", cfg, tmp_path, "driver-2").assert_succeeded()
    assert twopc_log.kinds("rollforward"), twopc_log.bodies()
    assert len(twopc_log.kinds("committed")) == FILES
    assert_exactly_once(broker, topic, ids)
