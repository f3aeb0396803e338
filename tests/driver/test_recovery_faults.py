"""A recovery's own requests lost, on the real broker: the roll-forward of an open intent.

The driver is SIGKILLed right after its intent (the commit decision), then a recovery rolls the
intent forward with EndTxn(commit). Those EndTxns can be lost like any request: never sent (every
retry), or sent and committed with every answer lost. Neither may pass as a decision: an answer
lost after the commit is decided by the log (pass 2) and proven; a request never sent leaves the
transactions open, and the recovery says it cannot decide (UndecidedError) rather than guess,
until a later recovery commits them. A transaction aborted from outside before a roll-forward
whose answers are then lost is decided aborted by the log: the batch is partly committed, and its
re-run repairs it. docs/design.md sections 4 and 8.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.driver.support import Scenario, abort_from_outside
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient
from twopc.control import faults as f
from twopc.driver.recovery_report import BatchReport
from twopc.errors import UndecidedError
from twopc.protocol.handle import WriteResult
from twopc.protocol.verdicts import BatchOutcome

pytestmark = [pytest.mark.integration, pytest.mark.all_variants]


@pytest.fixture
def faulty(broker: KafkaUnderTest) -> Iterator[ControlClient]:
    """A control client whose retries give up within 1 s (a dropped request fails fast)."""
    with ControlClient(broker.config(**{"twopc.control.retry.timeout.ms": "1000"})) as client:
        yield client


def _intent_left_open(scenario: Scenario) -> list[WriteResult]:
    results = scenario.write("0")
    assert scenario.drive("commit", "0", results,
                          crash_at="coordinator.after_intent") == {"killed": True}
    return results


def _rolled_forward_with_answers_lost(scenario: Scenario, faulty: ControlClient) -> BatchReport:
    lost = f.FaultPlan((f.Fault("END_TXN", f.Action.DROP_ANSWER),))
    with f.injected(lost) as plan:
        report = scenario.driver(faulty).recover()
    assert plan.fired, "no EndTxn was sent: nothing was rolled forward"
    [batch] = report.batches
    return batch


def test_a_roll_forward_whose_answers_are_lost_is_decided_by_the_log(
        scenario: Scenario, faulty: ControlClient) -> None:
    _intent_left_open(scenario)
    batch = _rolled_forward_with_answers_lost(scenario, faulty)
    assert batch.outcome is BatchOutcome.COMMITTED, batch
    assert all("log check" in h.reason for h in batch.handles), batch
    scenario.expect("0")
    scenario.audit()


def test_a_roll_forward_never_sent_is_undecided_until_a_later_recovery(
        scenario: Scenario, faulty: ControlClient) -> None:
    _intent_left_open(scenario)
    lost = f.FaultPlan((f.Fault("END_TXN", f.Action.DROP_REQUEST),))
    with f.injected(lost) as plan, pytest.raises(UndecidedError, match="batch 0"):
        scenario.driver(faulty, settle_wait_ms=2000).recover()
    assert plan.fired, "no EndTxn was attempted"
    report = scenario.driver(faulty).recover()
    assert [b.outcome for b in report.batches] == [BatchOutcome.COMMITTED], report.summary()
    scenario.expect("0")
    scenario.audit()


def test_a_lost_roll_forward_of_a_transaction_aborted_from_outside_leaves_it_to_the_rerun(
        scenario: Scenario, faulty: ControlClient) -> None:
    """Aborted from outside before the roll-forward, whose answers are then lost: the log shows
    the transaction's records aborted, so pass 2 decides it aborted and the batch partly
    committed (not committed, and never reported so), which the re-run repairs. (With the
    answers received, the coordinator's "committed" makes it a loss raised instead:
    test_outside_abort_before_commit.py.)"""
    results = _intent_left_open(scenario)
    abort_from_outside(scenario, results[1])
    batch = _rolled_forward_with_answers_lost(scenario, faulty)
    assert batch.outcome is BatchOutcome.PARTIAL, batch
    assert batch.lost_partitions == [1], batch
    coord = scenario.driver(faulty)
    assert not coord.is_committed("0")
    assert coord.commit("0", scenario.write("0")).status == "repaired"
    scenario.expect("0")
    scenario.audit()
