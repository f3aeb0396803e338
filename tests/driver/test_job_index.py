"""Batch jobs stay committed after the purge (issue #17, items 1 and 4), on the real broker.

A job's records leave the log once `retain_batches` later jobs have finished; from then on only the
log's index says that the job committed. Every path that ends a job committed must leave it in the
index, so that a late re-run of the job writes nothing: here each such path runs in a driver process
(SIGKILLed where the path is a crash), two later jobs push the job out of the log
(`retain_batches=1`), and the re-run's transactions must be fenced, not committed.
"""

from __future__ import annotations

import pytest

from checkpoint import open_log
from tests.driver.support import Scenario
from twopc.control import ControlClient
from twopc.log.session import Session
from twopc.protocol.handle import ResultKind, WriteResult

pytestmark = pytest.mark.integration

RETAIN = 1  # the purge keeps the latest finished job only: two later jobs push J out of the log


def commit_later_jobs(scenario: Scenario, names: list[str]) -> None:
    for name in names:
        out = scenario.drive("commit", name, scenario.write(name), retain_batches=RETAIN)
        assert out["rc"] == 0 and out["ok"]["status"] == "committed", out
        scenario.expect(name)


def purged(scenario: Scenario, batch: str) -> bool:
    return batch not in Session(open_log(scenario.log_url)).state.batches


def commit_crashed_after_intent(scenario: Scenario, results: list[WriteResult]) -> None:
    out = scenario.drive("commit", "J", results, crash_at="coordinator.after_intent")
    assert out == {"killed": True}


def ends_by_abort(scenario: Scenario, results: list[WriteResult]) -> None:
    """Spark's abort() meets the open intent and rolls it forward (Coordinator.abort)."""
    commit_crashed_after_intent(scenario, results)
    out = scenario.drive("abort", "J", results, retain_batches=RETAIN)
    assert out["rc"] == 0, out


def ends_by_a_retried_commit(scenario: Scenario, results: list[WriteResult]) -> None:
    """A retried commit() meets the open intent: it settles it first (CommitAction.RECOVER_FIRST)."""
    commit_crashed_after_intent(scenario, results)
    out = scenario.drive("commit", "J", results, retain_batches=RETAIN)
    assert out["rc"] == 0 and out["ok"]["status"] == "already_committed", out


def ends_by_a_crash_after_the_committed_record(scenario: Scenario,
                                               results: list[WriteResult]) -> None:
    out = scenario.drive("commit", "J", results, crash_at="coordinator.after_committed_record")
    assert out == {"killed": True}


PATHS = {
    "abort_rolls_forward": ends_by_abort,
    "retried_commit_recovers_first": ends_by_a_retried_commit,
    "crash_after_committed_record": ends_by_a_crash_after_the_committed_record,
}


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_committed_job_stays_committed_after_the_purge(path: str, scenario: Scenario,
                                                         control: ControlClient) -> None:
    scenario.owner_kind = "job"
    PATHS[path](scenario, scenario.write("J"))
    scenario.expect("J")
    commit_later_jobs(scenario, ["K1", "K2"])
    assert purged(scenario, "J")  # otherwise the log itself would still say J is committed
    # A re-run that writes anyway (its tasks started before J committed, say): the same rows again.
    out = scenario.drive("commit", "J", scenario.write("J"), retain_batches=RETAIN)
    scenario.audit()  # each id once: the re-run's transactions were fenced, not committed
    assert out["rc"] == 0 and out["ok"]["status"] == "already_committed", out
    assert scenario.driver(control, retain_batches=RETAIN).is_committed("J")


def test_a_rerun_of_a_purged_job_whose_tasks_skipped_is_already_committed(
        scenario: Scenario, control: ControlClient) -> None:
    """Item 4: the tasks of the re-run saw the job committed (the index) and wrote nothing; the
    commit must agree with them, not call the job aborted because the log no longer shows it."""
    scenario.owner_kind = "job"
    out = scenario.drive("commit", "J", scenario.write("J"), retain_batches=RETAIN)
    assert out["rc"] == 0 and out["ok"]["status"] == "committed", out
    scenario.expect("J")
    commit_later_jobs(scenario, ["K1", "K2"])
    assert purged(scenario, "J")
    assert scenario.driver(control, retain_batches=RETAIN).is_committed("J")
    skipped = [WriteResult(ResultKind.SKIPPED, "J", p, 0) for p in range(scenario.partitions)]
    out = scenario.drive("commit", "J", skipped, retain_batches=RETAIN)
    assert out["rc"] == 0 and out["ok"]["status"] == "already_committed", out
    scenario.audit()
