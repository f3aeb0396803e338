"""The coordinator against a real broker: commit, idempotence, guards, abort, binding."""

from __future__ import annotations

import subprocess
import sys

import pytest

from checkpoint import open_log
from tests.driver.support import ROOT, DriverUnderTest, Scenario
from twopc.control import ControlClient, TxnState
from twopc.errors import GuardFailed, QueryMismatch
from twopc.log.session import Session
from twopc.protocol.handle import ResultKind, WriteResult
from twopc.protocol.state import BatchStatus

pytestmark = pytest.mark.integration


@pytest.mark.all_variants
def test_commit_orphans_retry_and_rerun(scenario: Scenario, control: ControlClient) -> None:
    results = scenario.write("0")
    # A losing (speculative) attempt of partition 1 that never reaches commit().
    orphan = scenario.write("0", [scenario.txn("0", 1, attempt=1, tag="-orphan")])[0]
    assert orphan.handle is not None
    coord = scenario.driver(control)
    coord.bind()
    assert not coord.is_committed("0")
    report = coord.commit("0", results)
    assert report.status == "committed" and len(report.committed) == 4
    assert report.orphans == (orphan.handle.transactional_id,)
    assert coord.is_committed("0")
    # Spark retries commit() with the same messages (crash before its own commit log): no-op.
    again = coord.commit("0", results)
    assert again.status == "already_committed" and again.duplicates == ()
    # A re-run of the committed batch (its executors did not check): its transactions are fenced.
    rerun = scenario.write("0", [scenario.txn("0", p, attempt=2, tag="-dup")
                                 for p in range(scenario.partitions)])
    dup = coord.commit("0", rerun)
    assert dup.status == "already_committed" and len(dup.duplicates) == 4
    scenario.expect("0")
    scenario.audit()


def test_empty_batch_and_empty_results(scenario: Scenario, control: ControlClient) -> None:
    coord = scenario.driver(control)
    empty = [WriteResult(ResultKind.EMPTY, "3", p, 0) for p in range(3)]
    assert coord.commit("3", empty).status == "empty"
    assert coord.is_committed("3")
    assert coord.commit("3", empty).status == "already_committed"


def test_zombie_fails_the_guard_and_nothing_is_visible(scenario: Scenario,
                                                        control: ControlClient) -> None:
    results = scenario.write("0")
    h = results[2].handle
    assert h is not None
    # A zombie attempt re-initialises the same transactional id during the pre-commit.
    zombie = subprocess.run(
        [sys.executable, "-m", "twopc_testing.txn_producer", "--bootstrap",
         scenario.broker.bootstrap_servers, "--topic", scenario.topics[0], "--transactional-id",
         h.transactional_id, "--count", "2", "--end", "open", "--id-prefix", "zombie-"],
        capture_output=True, text=True, cwd=ROOT, timeout=60, check=True)
    assert zombie.returncode == 0
    coord = scenario.driver(control)
    with pytest.raises(GuardFailed, match="zombie") as info:
        coord.commit("0", results)
    assert set(info.value.reasons) == {h.transactional_id}
    state = Session(open_log(scenario.log_url)).state.batch("0")
    assert state.status is BatchStatus.ABORTED
    # every handle of the batch (and so the zombie's open transaction on the same id) is fenced
    described = control.describe_transactions([r.handle.transactional_id for r in results
                                                if r.handle])
    assert all(d.state is not TxnState.ONGOING for d in described.values())
    scenario.audit()  # nothing of batch 0 is visible, nothing is left open


def test_guard_refuses_a_transaction_without_time_left(scenario: Scenario,
                                                       control: ControlClient) -> None:
    results = scenario.write("0")
    # A driver whose margin exceeds the whole timeout: no handle may be committed.
    coord = scenario.driver(control, margin_ms=scenario.timeout_ms + 1000)
    with pytest.raises(GuardFailed, match="margin"):
        coord.commit("0", results)
    # Spark then calls abort(): nothing more to fence (already fenced), and the re-run commits.
    coord.abort("0", results)
    rerun = scenario.write("0")
    assert scenario.driver(control).commit("0", rerun).status == "committed"
    scenario.expect("0")
    scenario.audit()


def test_abort_without_intent_fences_the_handles(scenario: Scenario,
                                                 control: ControlClient) -> None:
    results = scenario.write("0")
    coord = scenario.driver(control)
    report = coord.abort("0", [*results, None])
    assert len(report.fenced) == 4
    scenario.audit()


def test_binding_refuses_another_query(scenario: Scenario, control: ControlClient) -> None:
    scenario.driver(control).bind()
    other = DriverUnderTest(open_log(scenario.log_url), control, "query", "another-query",
                            scenario.prefix)
    with pytest.raises(QueryMismatch, match="another-query"):
        other.bind()
    with pytest.raises(QueryMismatch):
        other.is_committed("0")
    with pytest.raises(QueryMismatch):
        other.commit("0", [])
