"""The commit's reads lost, on the real broker: guard 3's DescribeTransactions before the intent,
and the sweep's listing of the pool's open ids after the EndTxns (docs/design.md section 2).

Neither may leave the batch half-visible or twice-visible: the guard's lost answer fails the
commit before anything is decided (Spark's abort fences the transactions, the re-run writes the
batch again); the listing's, after the EndTxns, fails the commit with the intent open, which is
the commit decision: Spark's abort rolls it forward, and the re-run's tasks find the batch
committed and skip.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.driver.support import DriverUnderTest, Scenario
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient
from twopc.control import faults as f
from twopc.control.errors import ControlError
from twopc.protocol.handle import ResultKind, WriteResult

pytestmark = [pytest.mark.integration, pytest.mark.all_variants]


@pytest.fixture
def faulty(broker: KafkaUnderTest) -> Iterator[ControlClient]:
    """A control client whose retries give up within 1 s (a dropped request fails fast)."""
    with ControlClient(broker.config(**{"twopc.control.retry.timeout.ms": "1000"})) as client:
        yield client


def _commit_failing(scenario: Scenario, faulty: ControlClient, fault: f.Fault
                    ) -> tuple[DriverUnderTest, list[WriteResult]]:
    """Batch 0 written, and its commit failing on `fault` (a ControlError)."""
    results = scenario.write("0")
    coord = scenario.driver(faulty)
    with f.injected(f.FaultPlan((fault,))) as plan, pytest.raises(ControlError):
        coord.commit("0", results)
    assert plan.fired, f"never asked: {fault}"
    return coord, results


def test_the_guards_describe_lost_fails_the_commit_before_its_intent(
        scenario: Scenario, faulty: ControlClient) -> None:
    coord, results = _commit_failing(
        scenario, faulty, f.Fault("DESCRIBE_TRANSACTIONS", f.Action.DROP_ANSWER))
    assert coord.coordinator.open_call().batch_state("0").intent == (), "an intent was recorded"
    report = coord.abort("0", results)  # Spark's abort of the failed batch
    assert len(report.fenced) == len(results), report
    rerun = scenario.write("0")
    assert coord.commit("0", rerun).status == "committed"
    scenario.expect("0")
    scenario.audit()


def test_the_sweeps_listing_lost_after_the_endtxns_leaves_the_decision_to_the_abort(
        scenario: Scenario, faulty: ControlClient) -> None:
    # The first commit of a process lists the pool (ListTransactions); DescribeTransactions,
    # the guard's, passes.
    coord, results = _commit_failing(
        scenario, faulty, f.Fault("LIST_TRANSACTIONS", f.Action.DROP_REQUEST))
    state = coord.coordinator.open_call().batch_state("0")
    assert state.intent and not state.committed, "the intent is the decision, not yet recorded done"
    assert coord.abort("0", results).recovery is not None
    assert coord.is_committed("0")
    skipped = [WriteResult(ResultKind.SKIPPED, "0", p, 0) for p in range(scenario.partitions)]
    assert coord.commit("0", skipped).status == "already_committed"
    scenario.expect("0")
    scenario.audit()


