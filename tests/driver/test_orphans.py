"""Every commit path fences the losing attempts (issue 17, item 7), against a real broker.

A losing attempt (a speculative or failed task attempt that pre-committed but never reached
commit()) holds back read_committed consumers of its partitions until its timeout. The fresh commit
names such open ids of the pool in its `committed` record and fences them (docs/design.md section 2,
driver step 5); so must a commit that settles its batch through recovery's passes, and the commit
of a batch whose partitions all came back empty.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from twopc_testing.offsets import stable_group_offsets

from tests.driver.support import Scenario, finish, started_driver
from twopc.control import ControlClient, EndTxnRequest, TxnState
from twopc.protocol.handle import ResultKind, WriteResult
from twopc.protocol.offsets import SourceOffsets

pytestmark = pytest.mark.integration

# Long enough that the broker's timeout never fences a orphan during a test: only twopc can.
ORPHAN_TIMEOUT_MS = 120_000


def _orphan(scenario: Scenario, batch: str) -> str:
    """An attempt of Spark partition 1 that pre-committed and lost (attempt 1: slot 1)."""
    [orphan] = scenario.write(batch, [scenario.txn(batch, 1, attempt=1, tag="-orphan")],
                             timeout_ms=ORPHAN_TIMEOUT_MS)
    assert orphan.handle is not None
    return orphan.handle.transactional_id


def _open(control: ControlClient, tid: str) -> bool:
    return control.describe_transactions([tid])[tid].state is TxnState.ONGOING


def test_a_commit_that_settles_its_own_open_intent_fences_the_orphans(
        scenario: Scenario, control: ControlClient) -> None:
    results = scenario.write("0")
    orphan = _orphan(scenario, "0")
    assert scenario.drive("commit", "0", results, crash_at="coordinator.after_intent") == {
        "killed": True}
    # Spark calls commit() again (or a new driver process does): it settles the open intent first.
    report = scenario.driver(control).commit("0", results)
    assert report.status == "already_committed"
    assert not _open(control, orphan), f"the losing attempt {orphan} is still open"
    assert report.orphans == (orphan,)
    scenario.expect("0")
    scenario.audit()


def test_a_commit_settled_by_the_log_check_fences_the_orphans(
        scenario: Scenario, control: ControlClient) -> None:
    """An EndTxn answer that proves nothing sends the commit through recovery's passes."""
    results = scenario.write("0")
    orphan = _orphan(scenario, "0")
    first = results[0].handle
    assert first is not None
    call = {"log": scenario.log_url, "bootstrap": scenario.broker.bootstrap_servers,
            "owner_id": scenario.owner_id, "prefix": scenario.prefix, "action": "commit",
            "batch": "0", "results": [r.to_obj() for r in results]}
    wake = scenario.log_url + ".wake"
    with started_driver(call, {"TWOPC_PAUSE_AT": "coordinator.after_intent",
                               "TWOPC_PAUSE_UNTIL": wake}) as driver:
        assert driver.stderr is not None
        assert any("paused at" in line for line in driver.stderr), "never paused"
        # Meanwhile the first transaction is committed and its id re-initialised (as a zombie
        # attempt would): the driver's EndTxn on it then answers PRODUCER_FENCED.
        tid = first.transactional_id
        done = control.end_txns([EndTxnRequest(tid, first.producer_id, first.epoch, True)])
        assert done[tid].committed, done
        assert control.fence([tid])[tid].fenced
        with open(wake, "w"):
            pass
        out = finish(driver)
    assert out["rc"] == 0 and out["ok"]["status"] == "committed", out
    assert not _open(control, orphan), f"the losing attempt {orphan} is still open"
    assert out["ok"]["orphans"] == [orphan], out
    scenario.expect("0")
    scenario.audit()


@pytest.mark.parametrize("with_offsets", [False, True], ids=["plain", "source-offsets"])
def test_a_batch_of_empty_partitions_fences_the_orphans(
        with_offsets: bool, scenario: Scenario, control: ControlClient,
        make_topic: Callable[..., str]) -> None:
    """Also with twopc.commitSourceOffsets: the batch then has an intent (its offsets) and a plain
    commit of them before its outcome."""
    orphan = _orphan(scenario, "0")
    empty = [WriteResult(ResultKind.EMPTY, "0", p, 0) for p in range(scenario.partitions)]
    source, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    offsets = SourceOffsets(group, ((source, 0, 3), (source, 1, 4))) if with_offsets else None
    report = scenario.driver(control).commit("0", empty, offsets)
    assert report.status == "empty"
    assert not _open(control, orphan), f"the losing attempt {orphan} is still open"
    assert report.orphans == (orphan,)
    if with_offsets:
        assert stable_group_offsets(scenario.broker.config(), group,
                                    [(source, 0), (source, 1)]) == {(source, 0): 3, (source, 1): 4}
    scenario.audit()  # nothing of batch 0 visible, nothing left open


@pytest.mark.all_variants
def test_a_losing_attempt_ahead_of_the_commit_on_its_partition_holds_nothing_back(
        scenario: Scenario, control: ControlClient, make_topic: Callable[..., str]) -> None:
    """The losing attempt wrote to partition 1's topic-partition before the winner did: its open
    transaction holds that partition's last stable offset below the winner's records until it is
    fenced. The commit's proof that its records ended committed must not be asked while it is
    open (a review found it then: the id held, the batch's source offsets waiting a check), nor
    report the batch before it is proven."""
    orphan = _orphan(scenario, "0")
    results = scenario.write("0")
    source, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    offsets = SourceOffsets(group, ((source, 0, 5), (source, 1, 6)))
    report = scenario.driver(control).commit("0", results, offsets)
    assert report.status == "committed" and report.orphans == (orphan,)
    assert not report.notes, report.notes  # nothing waits
    assert not _open(control, orphan), f"the losing attempt {orphan} is still open"
    held = scenario.driver(control).coordinator.open_call().state.stranded
    assert not held, f"held after the commit: {sorted(held)}"
    assert stable_group_offsets(scenario.broker.config(), group,
                                [(source, 0), (source, 1)]) == {(source, 0): 5, (source, 1): 6}
    scenario.expect("0")
    scenario.audit()
