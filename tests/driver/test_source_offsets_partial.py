"""Issue 30, item 2: with twopc.commitSourceOffsets, the group must never move past source records
whose output is aborted.

Tasks start in waves, so the earliest transactions of a batch expire first. When one of them times
out after the guard passed, the batch ends partly committed. The offsets used to ride in the
batch's last transaction (the carrier), committed by the fresh commit's last EndTxn and by
recovery's roll-forward whatever became of the others: the group then stood at the batch's end
offsets while some of its records were aborted, and a consumer (or a new query) starting from the
group skipped source records whose output is not there.

Now the offsets go in a transaction of their own, ended only once the batch is committed and its
markers proven (protocol/offsets.py): a partial batch keeps them back, and its repair moves them.
The tests end with the repair and the exactly-once audit.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from twopc_testing.offsets import stable_group_offsets

from tests.driver.support import Scenario, wait_not_ongoing
from twopc.control import ControlClient
from twopc.control import faults as f
from twopc.errors import BatchPartlyCommitted
from twopc.ops.audit import audit_topic
from twopc.protocol.handle import WriteResult
from twopc.protocol.offsets import SourceOffsets
from twopc.protocol.verdicts import BatchOutcome

pytestmark = pytest.mark.integration

SHORT_TIMEOUT_MS = 4000
LATE = 1  # the Spark partition whose transaction times out (not the last one, once the carrier)


def _ends(group: str, source: str, a: int, b: int) -> SourceOffsets:
    return SourceOffsets(group, ((source, 0, a), (source, 1, b)))


def _batch_one(scenario: Scenario) -> list[WriteResult]:
    """Batch 1 in Spark partition order; partition LATE's transaction is written last, with a
    short timeout."""
    others = [p for p in range(scenario.partitions) if p != LATE]
    written = scenario.write("1", [scenario.txn("1", p) for p in others])
    written += scenario.write("1", [scenario.txn("1", LATE)], timeout_ms=SHORT_TIMEOUT_MS)
    out = sorted(written, key=lambda r: r.task_partition)
    assert [r.task_partition for r in out] == list(range(scenario.partitions))
    return out


def _assert_group_not_past_aborted_records(scenario: Scenario, group: str, source: str,
                                           before: dict[tuple[str, int], int]) -> None:
    """The group must still be where batch 0 left it: batch 1's records of partition LATE are
    aborted (read_committed does not see them)."""
    topic = scenario.topic_of(LATE)
    lost = scenario.ids("1", LATE)
    seen = audit_topic(scenario.broker.config(), topic, expected_ids=lost)
    assert sorted(seen.missing) == sorted(lost), seen.summary()  # aborted: the premise
    now = stable_group_offsets(scenario.broker.config(), group, [(source, 0), (source, 1)])
    assert now == before, (
        f"the group moved to {now} (batch 1's end offsets) while Spark partition {LATE}'s "
        f"records of batch 1 are aborted ({len(lost)} missing from {topic}): the group is past "
        "source records whose output is not visible")


def _repair_and_audit(scenario: Scenario, control: ControlClient, group: str, source: str,
                      offsets: SourceOffsets) -> None:
    coord = scenario.driver(control)
    assert coord.commit("1", scenario.write("1"), offsets).status == "repaired"
    assert stable_group_offsets(scenario.broker.config(), group, [(source, 0), (source, 1)]) == {
        (source, 0): 20, (source, 1): 9}
    scenario.expect("1")
    scenario.audit()


def test_the_fresh_commit_keeps_the_offsets_back_after_a_transaction_timed_out(
        scenario: Scenario, control: ControlClient, make_topic: Callable[..., str]) -> None:
    source, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    coord = scenario.driver(control, margin_ms=200)
    assert coord.commit("0", scenario.write("0"), _ends(group, source, 5, 5)).status == "committed"
    scenario.expect("0")
    before = {(source, 0): 5, (source, 1): 5}
    results = _batch_one(scenario)
    late = results[LATE].handle
    assert late is not None
    # The guard passes (seconds left); then the EndTxn of partition LATE is held back past its
    # timeout (broker churn, a slow network): the coordinator aborts it first.
    plan = f.FaultPlan((f.Fault("END_TXN", f.Action.DELAY, transactional_id=late.transactional_id,
                                delay_s=SHORT_TIMEOUT_MS / 1000 + 3),))
    with f.injected(plan), pytest.raises(BatchPartlyCommitted) as raised:
        coord.commit("1", results, _ends(group, source, 20, 9))
    assert plan.fired
    assert raised.value.lost == (LATE,), raised.value
    _assert_group_not_past_aborted_records(scenario, group, source, before)
    _repair_and_audit(scenario, control, group, source, _ends(group, source, 20, 9))


def test_recovery_keeps_the_offsets_back_after_a_transaction_timed_out(
        scenario: Scenario, control: ControlClient, make_topic: Callable[..., str]) -> None:
    source, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    coord = scenario.driver(control)
    assert coord.commit("0", scenario.write("0"), _ends(group, source, 5, 5)).status == "committed"
    scenario.expect("0")
    before = {(source, 0): 5, (source, 1): 5}
    results = _batch_one(scenario)
    offsets = _ends(group, source, 20, 9)
    # The driver dies after its first EndTxn; partition LATE's transaction times out while it is
    # down; the restarted driver recovers the intent.
    assert scenario.drive("commit", "1", results, margin_ms=200, offsets=offsets.to_obj(),
                          crash_at="coordinator.after_endtxn_1") == {"killed": True}
    wait_not_ongoing(control, [r.handle for r in results[LATE:LATE + 1] if r.handle is not None])
    report = scenario.driver(control).recover()
    assert report.batches[0].outcome is BatchOutcome.PARTIAL, report.summary()
    assert report.batches[0].lost_partitions == [LATE], report.summary()
    _assert_group_not_past_aborted_records(scenario, group, source, before)
    _repair_and_audit(scenario, control, group, source, offsets)
