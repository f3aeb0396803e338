"""Review of issue 30 item 4 (one batch job of a family at a time): the lease ends with the job's
`committed` record (state.fold), but the run that appended it still has work after it: verify the
markers, then fence the orphans that record names. Those fences rest on a record this call
appended, not on one that is still the latest: a second job of the family, let in by the ended
lease, recovers (its sweep fences the orphan itself), a task of it takes the freed id and its
intent names the transaction; then the first run's late fence of that id aborts it. The second
job's intent (the commit decision) ends partly committed."""

from __future__ import annotations

import os

import pytest

from checkpoint import open_log
from tests.driver.support import Scenario, finish, started_driver
from tests.driver.test_recovery import _wait_paused
from twopc.control import ControlClient
from twopc.driver.lease import JobLeases
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
        # The lease ended with A's committed record: job B may start.
        leases.acquire("B", "run-b", 600_000)
        b = scenario.driver(control)
        b.recover()  # the sweep fences A's orphan itself
        # B's partition 0 runs a second attempt, which takes slot 1: the id A's record names.
        txns = [scenario.txn("B", p) for p in range(1, scenario.partitions)]
        txns.insert(0, scenario.txn("B", 0, attempt=1))
        results_b = scenario.write("B", txns)
        call_b, env_b = _call(scenario, "B", results_b, "after_intent", wake_b)
        with started_driver(call_b, env_b) as run_b:
            _wait_paused(run_b)  # B's intent names the transaction on slot 1
            _wake(wake_a)
            out_a = finish(run_a)
            _wake(wake_b)
            out_b = finish(run_b)
    assert out_a["rc"] == 0, out_a
    assert out_b["rc"] == 0 and out_b["ok"]["status"] == "committed", (
        f"job B's decided commit was undone by job A's late fence of an id B's intent names: {out_b}")
    assert os.path.exists(wake_b)
