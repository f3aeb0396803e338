"""Two batches naming one transactional id (issue 17, item 2), against a real broker.

Two jobs of one family share a log and a prefix. Job A pre-commits on `{prefix}-0-0` and its driver
dies after the intent. If job B's task takes the same id, its InitProducerId aborts A's
transaction; B commits and its driver dies before its `committed` record. Recovery must then give
each recorded handle (transactional id, producer id, epoch) its own verdict: A aborted, B
committed. And a task must not take an id that a pending intent names in the first place
(docs/design.md section 5: an id is reused only after its transaction is resolved and recorded).
"""

from __future__ import annotations

import pyarrow as pa
import pytest

from tests.driver.support import Scenario
from twopc.control import ControlClient
from twopc.protocol.handle import WriteResult
from twopc.protocol.verdicts import BatchOutcome
from twopc.spark.driver import job_owner
from twopc.spark.options import SinkConfig
from twopc.spark.task import task_write

pytestmark = pytest.mark.integration


def job_family(scenario: Scenario) -> Scenario:
    """The batch jobs of one prefix (the Spark sink's job owner: owner id = prefix), writing one
    Spark partition each."""
    scenario.owner_kind = "job"
    scenario.owner_id = scenario.prefix
    scenario.partitions = 1
    return scenario


def test_recovery_gives_each_batch_its_own_verdict_on_a_shared_id(
        scenario: Scenario, control: ControlClient) -> None:
    jobs = job_family(scenario)
    a = jobs.write("job-a")
    assert jobs.drive("commit", "job-a", a, crash_at="coordinator.after_intent") == {
        "killed": True}
    b = jobs.write("job-b")  # the same id: its InitProducerId aborted A's transaction
    ha, hb = a[0].handle, b[0].handle
    assert ha is not None and hb is not None
    assert ha.transactional_id == hb.transactional_id and ha.epoch != hb.epoch
    assert jobs.drive("commit", "job-b", b, crash_at="coordinator.after_all_endtxn") == {
        "killed": True}

    coord = jobs.driver(control)
    report = coord.recover()
    outcomes = {r.batch: r.outcome for r in report.batches}
    assert outcomes == {"job-a": BatchOutcome.ABORTED, "job-b": BatchOutcome.COMMITTED}, (
        report.summary())
    assert not coord.is_committed("job-a") and coord.is_committed("job-b")
    # Job A runs again and commits: every row of both jobs once.
    assert coord.commit("job-a", jobs.write("job-a")).status == "committed"
    jobs.expect("job-a")
    jobs.expect("job-b")
    jobs.audit()


def test_a_task_does_not_take_an_id_that_a_pending_intent_names(
        scenario: Scenario, control: ControlClient) -> None:
    jobs = job_family(scenario)
    config = SinkConfig({"bootstrap.servers": jobs.broker.bootstrap_servers}, jobs.log_url,
                        jobs.prefix, topic=jobs.topic_of(0))
    owner = job_owner(config)

    def task(job: str) -> WriteResult:
        rows = pa.RecordBatch.from_pydict({"value": jobs.ids(job, 0)})
        return task_write(config, owner, job, [rows], task_partition=0, attempt=0)

    a = task("job-a")
    assert a.handle is not None and a.handle.transactional_id == f"{jobs.prefix}-0-0"
    assert jobs.drive("commit", "job-a", [a], crash_at="coordinator.after_intent") == {
        "killed": True}
    # Job B's task, attempt 0 of the same Spark partition, while A's intent is pending.
    b = task("job-b")
    assert b.handle is not None
    assert b.handle.transactional_id != a.handle.transactional_id, (
        "job B's task took the id that job A's pending intent names")
    coord = jobs.driver(control)
    assert coord.commit("job-b", [b]).status == "committed"
    report = coord.recover()  # A's transaction is still open: rolled forward
    assert report.rolled_forward == (a.handle.transactional_id,), report.summary()
    assert coord.is_committed("job-a")
    jobs.expect("job-a")
    jobs.expect("job-b")
    jobs.audit()
