"""The crash matrix: a driver process SIGKILLed at each named point, a new one recovers and re-runs,
the audit proves exactly once. Batches of 4 handles across 2 topics, plus a losing attempt. The
writer's crash points: a task process (the real writer) SIGKILLed at each, then recovery and a re-run."""

from __future__ import annotations

import pytest

from tests.driver.support import Scenario
from twopc.control import ControlClient, TxnState
from twopc.protocol.handle import ResultKind, WriteResult

pytestmark = pytest.mark.integration

DRIVER_POINTS = [
    "before_intent",
    "after_intent",
    "after_endtxn_1",
    "after_endtxn_n_minus_1",
    "after_all_endtxn",
    "after_committed_record",
    "during_sweep",
]


def rerun_if_needed(scenario: Scenario, control: ControlClient, batch: str) -> str:
    """What a restarted query does: recover, then tasks skip (if committed) or write, then commit."""
    coord = scenario.driver(control)
    coord.recover()
    if coord.is_committed(batch):
        skipped = [WriteResult(ResultKind.SKIPPED, batch, p, 0) for p in range(scenario.partitions)]
        return coord.commit(batch, skipped).status
    return coord.commit(batch, scenario.write(batch)).status


@pytest.mark.parametrize("point", DRIVER_POINTS)
def test_driver_killed_at(point: str, scenario: Scenario, control: ControlClient) -> None:
    txns = [scenario.txn("0", p) for p in range(scenario.partitions)]
    txns.append(scenario.txn("0", 1, attempt=1, tag="-orphan"))  # never reaches commit()
    written = scenario.write("0", txns)
    results = written[:-1]
    assert scenario.drive("commit", "0", results, crash_at=f"coordinator.{point}") == {
        "killed": True}
    status = rerun_if_needed(scenario, control, "0")
    # Before the intent nothing was decided: the batch is written again. From the intent on, the
    # decision was commit: recovery rolls it forward and the re-run writes nothing.
    assert status == ("committed" if point == "before_intent" else "already_committed")
    scenario.expect("0")
    scenario.audit()


@pytest.mark.parametrize("point", ["after_record", "after_rollforward", "after_outcome"])
def test_recovery_killed_at(point: str, scenario: Scenario, control: ControlClient) -> None:
    results = scenario.write("0")
    assert scenario.drive("commit", "0", results, crash_at="coordinator.after_intent") == {
        "killed": True}
    assert scenario.drive("recover", "0", crash_at=f"recovery.{point}") == {"killed": True}
    assert rerun_if_needed(scenario, control, "0") == "already_committed"
    scenario.expect("0")
    scenario.audit()


def test_recovery_killed_during_the_sweep(scenario: Scenario, control: ControlClient) -> None:
    results = scenario.write("0")
    assert scenario.drive("commit", "0", results, crash_at="coordinator.before_intent") == {
        "killed": True}
    # The recovery names the four open transactions as orphans, fences, and dies.
    assert scenario.drive("recover", "0", crash_at="recovery.during_sweep") == {"killed": True}
    assert rerun_if_needed(scenario, control, "0") == "committed"
    scenario.expect("0")
    scenario.audit()


def test_commit_in_a_fresh_process_after_a_crash_settles_first(scenario: Scenario,
                                                               control: ControlClient) -> None:
    """No recover() call: Spark's abort() (or a retried commit()) meets the open intent itself."""
    results = scenario.write("0")
    assert scenario.drive("commit", "0", results, crash_at="coordinator.after_endtxn_1") == {
        "killed": True}
    out = scenario.drive("abort", "0", results)
    assert out["rc"] == 0 and out["ok"]["fenced"] == []
    assert scenario.driver(control).is_committed("0")
    scenario.expect("0")
    scenario.audit()


WRITER_POINTS = ["after_begin", "after_produce", "after_flush", "after_identify"]


@pytest.mark.parametrize("point", WRITER_POINTS)
def test_writer_task_killed_at(point: str, scenario: Scenario, control: ControlClient) -> None:
    """A task process using the real writer SIGKILLed at each writer crash point."""
    done = scenario.write_real("0", [scenario.txn("0", p) for p in range(3)])
    assert done is not None and all(r.handle is not None for r in done)
    killed = scenario.txn("0", 3)
    assert scenario.write_real("0", [killed], crash_at=f"writer.{point}") is None
    state = control.describe_transactions([killed["tid"]])[killed["tid"]].state
    if point == "after_begin":
        assert state is TxnState.EMPTY  # begin_transaction is local: no partition, nothing open
    elif point in ("after_flush", "after_identify"):
        assert state is TxnState.ONGOING  # every record on the broker, holding the LSO back
    # The driver never saw a result (the task died): a new driver process recovers first. Its sweep
    # fences every open transaction of the pool, the killed task's and the three orphaned ones.
    out = scenario.drive("recover", "0")
    assert out["rc"] == 0, out
    assert control.list_transactions(scenario.prefix, states=[TxnState.ONGOING]) == []
    # The restarted query writes the whole batch again (attempt numbers restart at 0).
    rerun = scenario.write_real("0")
    assert rerun is not None
    out = scenario.drive("commit", "0", rerun)
    assert out["rc"] == 0 and out["ok"]["status"] == "committed", out
    scenario.expect("0")
    scenario.audit()
