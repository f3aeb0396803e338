"""Recovery's hard cases against a real broker: timeouts, partly committed batches and their repair,
committed-then-fenced, two drivers and a paused old driver."""

from __future__ import annotations

import pytest

from checkpoint import open_log
from tests.driver.support import (
    Scenario,
    finish,
    partly_committed,
    started_driver,
    wait_not_ongoing,
)
from twopc.control import ControlClient
from twopc.errors import DataLossError
from twopc.log.session import Session
from twopc.protocol.handle import Handle, WriteResult
from twopc.protocol.state import BatchStatus
from twopc.protocol.verdicts import BatchOutcome

pytestmark = pytest.mark.integration


def handles_of(results: list[WriteResult]) -> list[Handle]:
    return [r.handle for r in results if r.handle is not None]


@pytest.mark.all_variants
def test_driver_down_past_the_timeout(scenario: Scenario, control: ControlClient) -> None:
    results = scenario.write("0", timeout_ms=4000)
    out = scenario.drive("commit", "0", results, crash_at="coordinator.after_intent",
                         margin_ms=200)
    assert out == {"killed": True}
    wait_not_ongoing(control, handles_of(results))  # the driver stays down past the timeout
    coord = scenario.driver(control)
    report = coord.recover()
    [batch] = report.batches
    assert batch.outcome is BatchOutcome.ABORTED  # found by the log check, never silently lost
    assert all(h.outcome == "aborted" and "log check" in h.reason for h in batch.handles)
    assert not coord.is_committed("0")
    assert coord.commit("0", scenario.write("0")).status == "committed"
    scenario.expect("0")
    scenario.audit()


def test_partly_committed_batch_is_repaired_by_a_deterministic_rerun(
        scenario: Scenario, control: ControlClient) -> None:
    partly_committed(scenario, control)
    coord = scenario.driver(control)
    assert not coord.is_committed("0")  # the re-run must write
    # The same rows, delivered in another order, give the same checksums.
    rerun = scenario.write("0", [{**scenario.txn("0", p), "ids": scenario.ids("0", p)[::-1]}
                                 for p in range(4)])
    report = coord.commit("0", rerun)
    assert report.status == "repaired" and len(report.duplicates) == 3
    assert len(report.committed) == 1
    scenario.expect("0")
    scenario.audit()


def test_changed_rerun_raises_data_loss_then_operator_resolves(
        scenario: Scenario, control: ControlClient) -> None:
    partly_committed(scenario, control)
    coord = scenario.driver(control)
    changed = scenario.write("0", [scenario.txn("0", 0, tag="-changed")]
                             + [scenario.txn("0", p) for p in range(1, 4)])
    with pytest.raises(DataLossError) as info:
        coord.commit("0", changed)
    err = info.value
    assert err.batch == "0" and [p.task_partition for p in err.partitions] == [0]
    assert err.partitions[0].committed_records == scenario.rows
    assert Session(open_log(scenario.log_url)).state.batch("0").status is BatchStatus.PARTIAL
    # The operator keeps what is visible (partition 3's rows of batch 0 are lost, knowingly).
    coord.resolve("0", "committed", "ops: accept loss of partition 3, ticket 42")
    assert coord.is_committed("0")
    coord.recover()
    assert coord.commit("1", scenario.write("1")).status == "committed"  # the query goes on
    for p in range(3):
        scenario.expected.setdefault(scenario.topic_of(p), set()).update(scenario.ids("0", p))
    scenario.expect("1")
    scenario.audit()


def test_committed_then_fenced_is_recognised_as_committed(scenario: Scenario,
                                                          control: ControlClient) -> None:
    results = scenario.write("0")
    assert scenario.drive("commit", "0", results, crash_at="coordinator.after_all_endtxn") == {
        "killed": True}
    # Something re-initialises every id before recovery (the coordinator forgets the outcome).
    fenced = control.fence([h.transactional_id for h in handles_of(results)])
    assert all(f.fenced for f in fenced.values())
    coord = scenario.driver(control)
    report = coord.recover()
    assert report.batches[0].outcome is BatchOutcome.COMMITTED
    assert all(h.pass1 == "undecided" and h.reason == "log check"
               for h in report.batches[0].handles)
    assert coord.is_committed("0")
    scenario.expect("0")
    scenario.audit()


def _paused_call(scenario: Scenario, results: list[WriteResult], point: str) -> dict[str, object]:
    return {"call": {"log": scenario.log_url, "bootstrap": scenario.broker.bootstrap_servers,
                     "owner_id": scenario.owner_id, "prefix": scenario.prefix,
                     "action": "commit", "batch": "0", "results": [r.to_obj() for r in results]},
            "env": {"TWOPC_PAUSE_AT": f"coordinator.{point}",
                    "TWOPC_PAUSE_UNTIL": scenario.log_url + ".wake"}}


def _wake(scenario: Scenario) -> None:
    with open(scenario.log_url + ".wake", "w"):
        pass


def _wait_paused(proc: object) -> None:
    stderr = proc.stderr  # type: ignore[attr-defined]
    for line in stderr:
        if "paused at" in line:
            return
    raise AssertionError("the driver never reached its pause point")


def test_paused_driver_before_intent_cannot_commit(scenario: Scenario,
                                                   control: ControlClient) -> None:
    """Driver A passes its guard and stalls; driver B recovers (fencing A's open transactions),
    re-runs and commits. A wakes: its intent append loses, it stops, it commits nothing."""
    results = scenario.write("0")
    spec = _paused_call(scenario, results, "before_intent")
    with started_driver(spec["call"], spec["env"]) as old:  # type: ignore[arg-type]
        _wait_paused(old)
        b = scenario.driver(control)
        assert b.recover().orphans_fenced  # A's open transactions, named by nothing
        assert b.commit("0", scenario.write("0")).status == "committed"
        _wake(scenario)
        out = finish(old)
    assert out["rc"] == 3 and out["error"] == "LogOwnershipLost", out
    scenario.expect("0")
    scenario.audit()


@pytest.mark.all_variants
def test_paused_driver_after_intent_only_touches_what_it_recorded(
        scenario: Scenario, control: ControlClient) -> None:
    """A records its intent and stalls; B rolls A's intent forward and goes on with batch 1. A wakes:
    its EndTxn reaches only its own (already committed) transactions; its next append loses."""
    results = scenario.write("0")
    spec = _paused_call(scenario, results, "after_intent")
    with started_driver(spec["call"], spec["env"]) as old:  # type: ignore[arg-type]
        _wait_paused(old)
        b = scenario.driver(control)
        assert b.recover().rolled_forward
        assert b.is_committed("0")
        assert b.commit("1", scenario.write("1")).status == "committed"
        _wake(scenario)
        out = finish(old)
    assert out["rc"] == 3 and out["error"] == "LogOwnershipLost", out
    scenario.expect("0")
    scenario.expect("1")
    scenario.audit()


def test_two_drivers_commit_the_same_batch(scenario: Scenario, control: ControlClient) -> None:
    """Two drivers with the same messages: one wins the intent, the other stops."""
    results = scenario.write("0")
    spec = _paused_call(scenario, results, "before_intent")
    with started_driver(spec["call"], spec["env"]) as first:  # type: ignore[arg-type]
        _wait_paused(first)
        assert scenario.driver(control).commit("0", results).status == "committed"
        _wake(scenario)
        out = finish(first)
    assert out["error"] == "LogOwnershipLost"
    scenario.expect("0")
    scenario.audit()
