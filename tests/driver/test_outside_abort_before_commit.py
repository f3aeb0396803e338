"""An outside abort of a pre-committed transaction before the driver's commit (found by a review
of the fault matrix: nothing covered it). `kafka-transactions.sh abort` writes an ABORT marker of
the producer id to the partition and tells the transaction coordinator nothing: the coordinator
still says Ongoing, so guard 3 passes, EndTxn(commit) is answered, its COMMIT marker lands after
the ABORT, and the last stable offset passes the records. Every check that asks whether the
records *ended* is satisfied while they ended aborted.

What must hold: the commit never reports a batch committed whose records the log shows aborted;
it raises StrandedCommitAborted (a DataLossError) naming the transaction, at this call and at
every later check until an operator acknowledges it; the rest of the batch is visible once.
docs/design.md section 8, "Ended is not committed"."""

from __future__ import annotations

import pytest
from twopc_testing.kafka_tools import abort_hanging

from tests.driver.support import Scenario, abort_from_outside, partly_committed, wait_not_ongoing
from twopc.control import ControlClient
from twopc.errors import ResolutionRefused, StrandedCommitAborted
from twopc.protocol.handle import Handle, ResultKind, WriteResult
from twopc.protocol.verdicts import BatchOutcome

pytestmark = [pytest.mark.integration, pytest.mark.all_variants]


def test_an_outside_abort_before_the_commit_is_a_loud_data_loss(scenario: Scenario,
                                                                 control: ControlClient) -> None:
    results = scenario.write("0")
    victim = results[1].handle
    assert victim is not None
    [span] = victim.spans
    said = abort_hanging(scenario.broker.bootstrap_servers, span.topic, span.partition,
                         span.first_offset)
    coord = scenario.driver(control)
    with pytest.raises(StrandedCommitAborted, match="batch 0") as info:
        coord.commit("0", results)
    assert {h.transactional_id for _, h, _ in info.value.lost} == {victim.transactional_id}, said
    # Loud at every later check (a restarted query's recovery, here twice), not once.
    for _ in range(2):
        with pytest.raises(StrandedCommitAborted, match="batch 0"):
            scenario.driver(control).recover()
    acknowledged = scenario.driver(control).recovery.acknowledge_loss(
        "0", "test: aborted from outside before its commit")
    assert acknowledged == (victim.transactional_id,)
    scenario.driver(control).recover()  # acknowledged: quiet from now on
    # The rest of the batch is visible once; the aborted transaction's records are not.
    scenario.expect("0", partitions=[0, 2, 3])
    scenario.audit()


def test_an_outside_abort_while_the_driver_is_down_after_its_intent(scenario: Scenario,
                                                                   control: ControlClient) -> None:
    """The driver SIGKILLed after its intent, the transaction aborted from outside, then the
    recovery of the streaming writer's planning process (`first_look=False`: it makes no first
    look at older batches) rolls the intent forward: the batch it just sent EndTxn(commit) for is
    proven from the log all the same, before it could move any source offsets past it."""
    results = scenario.write("0")
    assert scenario.drive("commit", "0", results,
                          crash_at="coordinator.after_intent") == {"killed": True}
    victim = abort_from_outside(scenario, results[2])
    for _ in range(2):  # loud at every check until acknowledged
        with pytest.raises(StrandedCommitAborted, match="batch 0") as info:
            scenario.driver(control).recover(first_look=False)
        assert {h.transactional_id for _, h, _ in info.value.lost} == {victim.transactional_id}
    scenario.driver(control).recovery.acknowledge_loss("0", "test: aborted from outside")
    scenario.driver(control).recover(first_look=False)
    scenario.expect("0", partitions=[0, 1, 3])
    scenario.audit()



def _repair_aborted_from_outside(scenario: Scenario, control: ControlClient) -> Handle:
    """A deterministic re-run of partly committed batch 0, its transaction for partition 3
    aborted from outside before the repair's EndTxn: the repair raises that loss, and so does the
    next recovery. Returns the aborted transaction's handle."""
    rerun = scenario.write("0")
    victim = abort_from_outside(scenario, rerun[3])
    with pytest.raises(StrandedCommitAborted, match="batch 0") as info:
        scenario.driver(control).commit("0", rerun)
    assert [(h.transactional_id, h.epoch) for _, h, _ in info.value.lost] == [
        (victim.transactional_id, victim.epoch)]
    with pytest.raises(StrandedCommitAborted, match="batch 0"):
        scenario.driver(control).recover()
    return victim


def test_an_outside_abort_of_a_repairs_transaction_before_its_commit(scenario: Scenario,
                                                                   control: ControlClient) -> None:
    """Batch 0 partly committed (partition 3 aborted by its timeout); a deterministic re-run
    repairs it, and its transaction for partition 3 is aborted from outside before the repair's
    EndTxn. The repair's check ran before that EndTxn (the re-run's duplicates are fenced first)
    and proved the batch's visible transactions then: the repair's own transaction must be
    proven after its commit all the same (a review found it skipped: the call remembered the
    batch proven, not the transactions)."""
    partly_committed(scenario, control)
    _repair_aborted_from_outside(scenario, control)
    scenario.driver(control).recovery.acknowledge_loss("0", "test: a repair aborted from outside")
    scenario.driver(control).recover()
    scenario.expect("0", partitions=[0, 1, 2])
    scenario.audit()


def test_a_recovery_that_finds_the_commit_done_proves_it(scenario: Scenario,
                                                         control: ControlClient) -> None:
    """The transaction aborted from outside, then the driver sends every EndTxn(commit) (the
    coordinator accepts them) and is SIGKILLed before its `committed` record and its check. The
    streaming planner's recovery (`first_look=False`) finds every transaction CompleteCommit and
    records the batch committed without sending an EndTxn: what it records committed is proven
    from the log as what it commits is (a review found it unproven: nothing was sent)."""
    results = scenario.write("0")
    victim = abort_from_outside(scenario, results[1])
    assert scenario.drive("commit", "0", results,
                          crash_at="coordinator.after_all_endtxn") == {"killed": True}
    for _ in range(2):
        with pytest.raises(StrandedCommitAborted, match="batch 0") as info:
            scenario.driver(control).recover(first_look=False)
        assert {h.transactional_id for _, h, _ in info.value.lost} == {victim.transactional_id}
    scenario.driver(control).recovery.acknowledge_loss("0", "test: aborted from outside")
    scenario.driver(control).recover(first_look=False)
    scenario.expect("0", partitions=[0, 2, 3])
    scenario.audit()


def test_a_rerun_of_a_committed_micro_batch_looks_before_it_answers(scenario: Scenario,
                                                                   control: ControlClient) -> None:
    """The transaction aborted from outside, the driver commits (the coordinator accepts) and is
    SIGKILLed right after its `committed` record, before its check. The restarted query re-runs
    the micro-batch Spark had not recorded: the planner's recovery (`first_look=False`) finds it
    committed, the tasks skip, and `commit()` answers "already committed" with no duplicates to
    fence. That answer is what lets Spark record the batch: it must look first (a second review
    found it answering with no look at all)."""
    results = scenario.write("0")
    victim = abort_from_outside(scenario, results[2])
    assert scenario.drive("commit", "0", results,
                          crash_at="coordinator.after_committed_record") == {"killed": True}
    scenario.driver(control).recover(first_look=False)
    skipped = [WriteResult(ResultKind.SKIPPED, "0", p, 0) for p in range(scenario.partitions)]
    for _ in range(2):  # the query's every restart re-runs it, and is told every time
        with pytest.raises(StrandedCommitAborted, match="batch 0") as info:
            scenario.driver(control).commit("0", skipped)
        assert {h.transactional_id for _, h, _ in info.value.lost} == {victim.transactional_id}
    scenario.driver(control).recovery.acknowledge_loss("0", "test: aborted from outside")
    assert scenario.driver(control).commit("0", skipped).status == "already_committed"
    scenario.expect("0", partitions=[0, 1, 3])
    scenario.audit()


def test_a_second_loss_in_an_acknowledged_batch_is_acknowledged_on_its_own(
        scenario: Scenario, control: ControlClient) -> None:
    """Batch 0's transaction for partition 1 aborted from outside before its commit, and the
    driver killed before the EndTxn of partition 3 (which its timeout then aborts): the batch is
    partly committed and its first loss raised and acknowledged. Its repair's transaction for
    partition 3 is then aborted from outside too: a second loss in the same batch. It is raised,
    and the operator must be able to acknowledge it (a review found the batch's one index entry
    refusing it, so every check raised it for good)."""
    long = scenario.write("0", [scenario.txn("0", p) for p in range(3)])
    short = scenario.write("0", [scenario.txn("0", 3)], timeout_ms=4000)
    first = abort_from_outside(scenario, long[1])
    assert scenario.drive("commit", "0", long + short, margin_ms=200,
                          crash_at="coordinator.after_endtxn_n_minus_1") == {"killed": True}
    wait_not_ongoing(control, [r.handle for r in short if r.handle is not None])
    with pytest.raises(StrandedCommitAborted, match="batch 0") as info:
        scenario.driver(control).recover()
    assert {h.transactional_id for _, h, _ in info.value.lost} == {first.transactional_id}
    assert scenario.driver(control).recovery.acknowledge_loss(
        "0", "test: partition 1 aborted from outside") == (first.transactional_id,)
    report = scenario.driver(control).recover()
    assert report.batches == [] or report.batches[0].outcome is BatchOutcome.PARTIAL
    second = _repair_aborted_from_outside(scenario, control)
    assert scenario.driver(control).recovery.acknowledge_loss(
        "0", "test: the repair aborted from outside") == (second.transactional_id,)
    with pytest.raises(ResolutionRefused, match="acknowledged already"):
        scenario.driver(control).recovery.acknowledge_loss("0", "test: once more")
    scenario.driver(control).recover()  # both acknowledged: quiet
    scenario.expect("0", partitions=[0, 2])
    scenario.audit()
