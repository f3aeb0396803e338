"""Issue 30 item 4, found by review: the lease ended with the job's `committed` record, but the
run that appended it still has work after it (verify the markers, fence the orphans that record
names), and those fences rest on a record this call appended, not on one that is still the
latest. A second job let in at that moment recovered (its sweep fenced the orphan itself), a task
of it took the freed id, its intent named that transaction, and the first run's late fence aborted
it: the second job ended partly committed. Now the lease holds until the run's release, after its
fences: the second job is refused until then, and then commits whole."""

from __future__ import annotations

import pytest

from checkpoint import open_log
from tests.driver.support import Scenario, finish, started_driver
from tests.driver.test_recovery import _wait_paused
from twopc.control import ControlClient
from twopc.driver.lease import JobLeases
from twopc.errors import JobFamilyBusy
from twopc.protocol.handle import WriteResult

pytestmark = pytest.mark.integration


def _call(scenario: Scenario, batch: str, results: list[WriteResult], point: str,
          wake: str) -> tuple[dict[str, object], dict[str, str]]:
    return ({"log": scenario.log_url, "bootstrap": scenario.broker.bootstrap_servers,
             "owner_id": scenario.owner_id, "owner_kind": "job", "prefix": scenario.prefix,
             "action": "commit", "batch": batch, "results": [r.to_obj() for r in results]},
            {"TWOPC_PAUSE_AT": f"coordinator.{point}", "TWOPC_PAUSE_UNTIL": wake})


def _wake(path: str) -> None:
    with open(path, "w"):
        pass


def test_a_finished_jobs_late_orphan_fence_never_aborts_the_next_jobs_transaction(
        scenario: Scenario, control: ControlClient) -> None:
    scenario.owner_kind = "job"
    leases = JobLeases(open_log(scenario.log_url), scenario.driver(control).settings)
    leases.acquire("A", "run-a", 600_000)
    # Job A: every partition once, plus a losing attempt of partition 0 (slot 1): an orphan.
    results_a = scenario.write("A")
    scenario.write("A", [scenario.txn("A", 0, attempt=1, tag="-lost")])
    wake_a, wake_b = scenario.log_url + ".wake-a", scenario.log_url + ".wake-b"
    call_a, env_a = _call(scenario, "A", results_a, "after_committed_record", wake_a)
    with started_driver(call_a, env_a) as run_a:
        _wait_paused(run_a)  # A's `committed` record names the orphan; A is not done yet
        scenario.expect("A")
        # A's run still holds the family: its fences are still to come.
        with pytest.raises(JobFamilyBusy):
            leases.acquire("B", "run-b", 600_000)
        _wake(wake_a)
        out_a = finish(run_a)
    assert out_a["rc"] == 0, out_a
    leases.release("run-a")  # what the Spark glue does once A's commit returned
    leases.acquire("B", "run-b", 600_000)
    b = scenario.driver(control)
    b.recover()
    # B's partition 0 runs a second attempt, which takes slot 1: the id A's record named.
    txns = [scenario.txn("B", p) for p in range(1, scenario.partitions)]
    txns.insert(0, scenario.txn("B", 0, attempt=1))
    results_b = scenario.write("B", txns)
    call_b, env_b = _call(scenario, "B", results_b, "after_intent", wake_b)
    with started_driver(call_b, env_b) as run_b:
        _wait_paused(run_b)  # B's intent names the transaction on slot 1
        _wake(wake_b)
        out_b = finish(run_b)
    assert out_b["rc"] == 0 and out_b["ok"]["status"] == "committed", out_b
    scenario.expect("B")
    scenario.audit()
