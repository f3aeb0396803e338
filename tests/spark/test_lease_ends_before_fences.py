"""Issue 30 item 4, found by review: the lease ended with the job's `committed` record, but the
run that appended it still has work after it (verify the markers, fence the orphans that record
names), and those fences rest on a record this call appended, not on one that is still the
latest. A second job let in at that moment recovered (its sweep fenced the orphan itself), a task
of it took the freed id, its intent named that transaction, and the first run's late fence aborted
it: the second job ended partly committed. Now the lease holds until the run's release, after its
fences: the second job is refused until then, and then commits whole.

Found by the torture suite (kafka4-3node, seed 20281201): a run that died after its `committed`
record, before its release, held the family until its lease expired (30 minutes), although the
refusal told the user to run that job again; the re-run found the job committed and left the
lease alone. Now that re-run takes the lease over, finishes what the dead run left and lets the
family go; and a run that was only held up, not dead, sends no fence once another driver has
appended to the log after it (call.py `fence_named`): that driver is in charge."""

from __future__ import annotations

import pytest

from checkpoint import open_log
from tests.driver.support import Scenario, finish, run_driver, started_driver
from tests.driver.test_recovery import _wait_paused
from twopc.control import ControlClient, TxnState
from twopc.driver.lease import JobLeases
from twopc.errors import JobFamilyBusy
from twopc.protocol.handle import WriteResult
from twopc.spark.driver import job_owner, prepare
from twopc.spark.options import SinkConfig

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


def _family(scenario: Scenario) -> SinkConfig:
    """The scenario as a family of batch jobs run through the Spark glue's `prepare`."""
    scenario.owner_kind, scenario.owner_id = "job", scenario.prefix
    return SinkConfig({"bootstrap.servers": scenario.broker.bootstrap_servers}, scenario.log_url,
                      scenario.prefix, topic=scenario.topic_of(0))


def _open_in_pool(control: ControlClient, prefix: str) -> list[str]:
    return sorted(t.transactional_id for t in control.list_transactions(
        prefix, states=[TxnState.ONGOING]))


def _commit_of_a_with_an_orphan(scenario: Scenario, config: SinkConfig
                                ) -> tuple[list[WriteResult], dict[str, object]]:
    """Job A's run takes the family, its tasks write every partition, plus a losing attempt of
    partition 0 on slot 1: an orphan that A's `committed` record names and its run then fences."""
    assert prepare(config, job_owner(config), "A", "run-a") is False
    results_a = scenario.write("A")
    scenario.write("A", [scenario.txn("A", 0, attempt=1, tag="-lost")])
    call_a, _ = _call(scenario, "A", results_a, "after_committed_record", "")
    return results_a, call_a


def test_a_committed_jobs_rerun_takes_over_the_claim_its_dead_run_left(
        scenario: Scenario, control: ControlClient) -> None:
    config = _family(scenario)
    owner = job_owner(config)
    _, call_a = _commit_of_a_with_an_orphan(scenario, config)
    assert run_driver(call_a, crash_at="coordinator.after_committed_record") == {"killed": True}
    scenario.expect("A")
    assert len(_open_in_pool(control, scenario.prefix)) == 1  # the orphan, never fenced
    # A's run died: it looks the same as one held up, so B is refused.
    with pytest.raises(JobFamilyBusy, match="job B was not started: job A "):
        prepare(config, owner, "B", "run-b")
    # What the refusal says to do: run A again. It writes nothing, finishes what the dead run
    # left (the orphan's fence) and lets the family go (before: B refused for 30 minutes).
    assert prepare(config, owner, "A", "run-a2") is True
    assert _open_in_pool(control, scenario.prefix) == []
    assert prepare(config, owner, "B", "run-b") is False
    out_b = run_driver({**call_a, "batch": "B",
                        "results": [r.to_obj() for r in scenario.write("B")]})
    assert out_b["rc"] == 0 and out_b["ok"]["status"] == "committed", out_b
    scenario.expect("B")
    scenario.audit()


def test_a_held_up_run_sends_no_fence_once_a_rerun_took_its_job_over(
        scenario: Scenario, control: ControlClient) -> None:
    """A's run is held up (not dead) after its `committed` record; A's re-run takes the family
    over and lets it go; B starts, and its partition 0 runs a second attempt on slot 1, the id
    A's record named as an orphan. A wakes while B's transaction is open: it must not fence it
    (A reports its job committed, by another driver), and B commits whole."""
    config = _family(scenario)
    owner = job_owner(config)
    _, call_a = _commit_of_a_with_an_orphan(scenario, config)
    wake_a, wake_b = scenario.log_url + ".wake-a", scenario.log_url + ".wake-b"
    env_a = {"TWOPC_PAUSE_AT": "coordinator.after_committed_record", "TWOPC_PAUSE_UNTIL": wake_a}
    with started_driver(call_a, env_a) as run_a:
        _wait_paused(run_a)
        scenario.expect("A")
        assert prepare(config, owner, "A", "run-a2") is True  # takes over, fences, lets go
        assert prepare(config, owner, "B", "run-b") is False
        txns = [scenario.txn("B", p) for p in range(1, scenario.partitions)]
        txns.insert(0, scenario.txn("B", 0, attempt=1))
        results_b = scenario.write("B", txns)
        call_b, env_b = _call(scenario, "B", results_b, "after_intent", wake_b)
        with started_driver(call_b, env_b) as run_b:
            _wait_paused(run_b)  # B's intent names its transaction on slot 1, still open
            _wake(wake_a)
            out_a = finish(run_a)
            _wake(wake_b)
            out_b = finish(run_b)
    assert out_a["rc"] == 0 and out_a["ok"]["status"] == "committed", out_a
    assert out_b["rc"] == 0 and out_b["ok"]["status"] == "committed", out_b
    scenario.expect("B")
    scenario.audit()
