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

from tests.driver.support import Scenario, partly_committed
from twopc.control import ControlClient
from twopc.errors import StrandedCommitAborted

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
    victim = results[2].handle
    assert victim is not None
    [span] = victim.spans
    abort_hanging(scenario.broker.bootstrap_servers, span.topic, span.partition,
                  span.first_offset)
    for _ in range(2):  # loud at every check until acknowledged
        with pytest.raises(StrandedCommitAborted, match="batch 0") as info:
            scenario.driver(control).recover(first_look=False)
        assert {h.transactional_id for _, h, _ in info.value.lost} == {victim.transactional_id}
    scenario.driver(control).recovery.acknowledge_loss("0", "test: aborted from outside")
    scenario.driver(control).recover(first_look=False)
    scenario.expect("0", partitions=[0, 1, 3])
    scenario.audit()



def test_an_outside_abort_of_a_repairs_transaction_before_its_commit(scenario: Scenario,
                                                                   control: ControlClient) -> None:
    """Batch 0 partly committed (partition 3 aborted by its timeout); a deterministic re-run
    repairs it, and its transaction for partition 3 is aborted from outside before the repair's
    EndTxn. The repair's check ran before that EndTxn (the re-run's duplicates are fenced first)
    and proved the batch's visible transactions then: the repair's own transaction must be
    proven after its commit all the same (a review found it skipped: the call remembered the
    batch proven, not the transactions)."""
    partly_committed(scenario, control)
    rerun = scenario.write("0")
    victim = rerun[3].handle
    assert victim is not None
    [span] = victim.spans
    abort_hanging(scenario.broker.bootstrap_servers, span.topic, span.partition,
                  span.first_offset)
    with pytest.raises(StrandedCommitAborted, match="batch 0") as info:
        scenario.driver(control).commit("0", rerun)
    assert [(h.transactional_id, h.epoch) for _, h, _ in info.value.lost] == [
        (victim.transactional_id, victim.epoch)]
    with pytest.raises(StrandedCommitAborted, match="batch 0"):
        scenario.driver(control).recover()
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
    victim = results[1].handle
    assert victim is not None
    [span] = victim.spans
    abort_hanging(scenario.broker.bootstrap_servers, span.topic, span.partition,
                  span.first_offset)
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
