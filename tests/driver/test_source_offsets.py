"""Source offsets committed with each batch (twopc.commitSourceOffsets), on the real broker: they
move once the batch is committed and its markers proven, in a transaction of their own; a driver
SIGKILLed mid-commit leaves them pending (never past the batch's records) and recovery moves them;
an aborted batch leaves them unchanged, a refused commit aborts the batch whole, and a batch without
records still moves them."""

from __future__ import annotations

import uuid
from collections.abc import Callable

import pytest
from twopc_testing.offsets import stable_group_offsets

from checkpoint import open_log
from tests.driver.support import Scenario
from twopc.control import ControlClient
from twopc.protocol.handle import ResultKind, WriteResult
from twopc.protocol.log_records import Aborted, Prepared, from_body
from twopc.protocol.offsets import SourceOffsets, SourceOffsetsRefused, alone_id

pytestmark = pytest.mark.integration


def group_offsets(scenario: Scenario, group: str, source: str) -> dict[tuple[str, int], int]:
    return stable_group_offsets(scenario.broker.config(), group, [(source, 0), (source, 1)])


def ends(group: str, source: str, a: int, b: int) -> SourceOffsets:
    return SourceOffsets(group, ((source, 0, a), (source, 1, b)))


def prepared(scenario: Scenario, batch: str) -> Prepared:
    found = [r for r in (from_body(rec.body) for rec in open_log(scenario.log_url).records())
             if isinstance(r, Prepared) and r.batch == batch]
    assert found, f"no intent of batch {batch}"
    return found[-1]


@pytest.mark.all_variants
def test_offsets_move_with_each_committed_batch(scenario: Scenario, control: ControlClient,
                                                make_topic: Callable[..., str]) -> None:
    source, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    never = {(source, 0): -1, (source, 1): -1}
    assert group_offsets(scenario, group, source) == never
    coord = scenario.driver(control)
    for batch, (a, b) in enumerate([(10, 7), (25, 7), (40, 31)]):
        results = scenario.write(str(batch))
        report = coord.commit(str(batch), results, ends(group, source, a, b))
        assert report.status == "committed"
        assert group_offsets(scenario, group, source) == {(source, 0): a, (source, 1): b}
        # The intent names the offsets and the id of their own transaction.
        intent = prepared(scenario, str(batch))
        assert intent.offsets == ends(group, source, a, b).deferred_on(scenario.prefix)
        scenario.expect(str(batch))
    scenario.audit()


@pytest.mark.parametrize("point", ["before_intent", "after_intent", "after_endtxn_1",
                                   "after_endtxn_n_minus_1", "after_all_endtxn"])
def test_driver_killed_mid_commit(point: str, scenario: Scenario, control: ControlClient,
                                  make_topic: Callable[..., str]) -> None:
    source, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    coord = scenario.driver(control)
    assert coord.commit("0", scenario.write("0"), ends(group, source, 5, 5)).status == "committed"
    scenario.expect("0")
    results = scenario.write("1")
    offsets = ends(group, source, 20, 9)
    assert scenario.drive("commit", "1", results, crash_at=f"coordinator.{point}",
                          offsets=offsets.to_obj()) == {"killed": True}
    # The group stays at batch 0, whatever of batch 1 is visible: batch 1's offsets wait in their
    # own transaction, begun before the intent, which only a proven commit ends.
    with pytest.raises(AssertionError, match="pending"):
        stable_group_offsets(scenario.broker.config(), group, [(source, 0)], wait_s=1)
    coord = scenario.driver(control)
    coord.recover()
    if point == "before_intent":
        # No decision: recovery fenced the batch (the offsets' transaction too): they stayed.
        assert group_offsets(scenario, group, source) == {(source, 0): 5, (source, 1): 5}
        assert coord.commit("1", scenario.write("1"), offsets).status == "committed"
    else:
        skipped = [WriteResult(ResultKind.SKIPPED, "1", p, 0) for p in range(scenario.partitions)]
        assert coord.commit("1", skipped, offsets).status == "already_committed"
    assert group_offsets(scenario, group, source) == {(source, 0): 20, (source, 1): 9}
    scenario.expect("1")
    scenario.audit()


def test_refused_offsets_abort_the_batch_whole(scenario: Scenario, control: ControlClient,
                                               make_topic: Callable[..., str]) -> None:
    source, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    coord = scenario.driver(control)
    assert coord.commit("0", scenario.write("0"), ends(group, source, 3, 4)).status == "committed"
    scenario.expect("0")
    # A source topic this cluster does not have (a source on another cluster, not mirrored here).
    missing = SourceOffsets(group, ((source, 0, 9), (f"absent-{uuid.uuid4().hex[:6]}", 0, 9)))
    with pytest.raises(SourceOffsetsRefused, match="UNKNOWN_TOPIC_OR_PARTITION"):
        coord.commit("1", scenario.write("1"), missing)
    # TxnOffsetCommit took source-0 into the offsets' transaction; the fence took it out again.
    assert group_offsets(scenario, group, source) == {(source, 0): 3, (source, 1): 4}
    [aborted] = [r for r in (from_body(x.body) for x in open_log(scenario.log_url).records())
                 if isinstance(r, Aborted) and r.batch == "1"]
    assert "UNKNOWN_TOPIC_OR_PARTITION" in aborted.reason
    # The re-run after the cause is gone commits batch 1 and its offsets together.
    assert coord.commit("1", scenario.write("1"), ends(group, source, 11, 12)).status == "committed"
    assert group_offsets(scenario, group, source) == {(source, 0): 11, (source, 1): 12}
    scenario.expect("1")
    scenario.audit()


@pytest.mark.parametrize("crash", [None, "coordinator.after_intent"])
def test_a_batch_without_records_moves_the_offsets(crash: str | None, scenario: Scenario,
                                                   control: ControlClient,
                                                   make_topic: Callable[..., str]) -> None:
    source, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    empty = [WriteResult(ResultKind.EMPTY, "0", p, 0) for p in range(scenario.partitions)]
    offsets = ends(group, source, 6, 2)
    if crash is None:
        assert scenario.driver(control).commit("0", empty, offsets).status == "empty"
    else:
        assert scenario.drive("commit", "0", empty, crash_at=crash,
                              offsets=offsets.to_obj()) == {"killed": True}
        with pytest.raises(AssertionError, match="pending"):  # in their own transaction, open
            stable_group_offsets(scenario.broker.config(), group, [(source, 0)], wait_s=1)
        scenario.driver(control).recover()  # the intent is the decision: commit them
    assert group_offsets(scenario, group, source) == {(source, 0): 6, (source, 1): 2}
    intent = prepared(scenario, "0")
    # The intent names the id of the offsets' own transaction (issue 30, items 6 and 2).
    assert intent.handles == () and intent.offsets == offsets.deferred_on(scenario.prefix)
    assert intent.offsets.carrier == alone_id(scenario.prefix)
    scenario.audit()


def test_a_late_copy_of_a_batch_without_records_never_moves_the_group_back(
        scenario: Scenario, control: ControlClient, make_topic: Callable[..., str]) -> None:
    """Issue 30, item 6: batch 0 has no records, so its offsets are committed on their own;
    batch 1 has records and carries its offsets in its transaction. Then every request of batch
    0's commit that could move the group or end a transaction reaches the broker again, late (a
    copy from a connection the client gave up on): the group must stay at batch 1."""
    from tests.driver.late_requests import apis, recorded, send_again, state_changing
    from twopc.control.messages import ApiKey

    source, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    coord = scenario.driver(control)
    empty = [WriteResult(ResultKind.EMPTY, "0", p, 0) for p in range(scenario.partitions)]
    with recorded() as sent:
        assert coord.commit("0", empty, ends(group, source, 6, 2)).status == "empty"
    assert group_offsets(scenario, group, source) == {(source, 0): 6, (source, 1): 2}
    assert coord.commit("1", scenario.write("1"), ends(group, source, 20, 9)).status == "committed"
    scenario.expect("1")
    assert group_offsets(scenario, group, source) == {(source, 0): 20, (source, 1): 9}
    late = state_changing(sent)
    assert late, apis(sent)
    # The copies that could commit offsets (not the InitProducerIds, which only fence), then all.
    send_again(control, [r for r in late if r.api is not ApiKey.INIT_PRODUCER_ID])
    assert group_offsets(scenario, group, source) == {(source, 0): 20, (source, 1): 9}, apis(late)
    send_again(control, late)
    assert group_offsets(scenario, group, source) == {(source, 0): 20, (source, 1): 9}, apis(late)
    # Batch 0's offsets went in a transaction of their own, never as a plain OffsetCommit.
    assert "OFFSET_COMMIT" not in apis(sent) and "TXN_OFFSET_COMMIT" in apis(sent), apis(sent)
    scenario.audit()


def test_status_shows_the_group_and_its_offsets(scenario: Scenario, control: ControlClient,
                                                make_topic: Callable[..., str]) -> None:
    from tests.cli.test_status import status_json, twopc

    source, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    bootstrap = ("--bootstrap-servers", scenario.broker.bootstrap_servers)
    coord = scenario.driver(control)
    assert coord.commit("0", scenario.write("0"), ends(group, source, 8, 3)).status == "committed"
    assert group_offsets(scenario, group, source) == {(source, 0): 8, (source, 1): 3}
    code, report = status_json(scenario, *bootstrap)
    assert code == 0, report
    carrier = alone_id(scenario.prefix)
    assert report["source_offsets"] == {
        "group": group, "batch": "0", "carrier": carrier,
        "partitions": [{"topic": source, "partition": 0, "batch_end": 8, "committed": 8,
                        "pending": False},
                       {"topic": source, "partition": 1, "batch_end": 3, "committed": 3,
                        "pending": False}],
        "unmoved": [], "blocked_by": None}
    # Killed mid-commit: the pending batch names its offsets, the group still holds batch 0's,
    # with newer ones pending in their own open transaction.
    offsets = ends(group, source, 12, 9)
    assert scenario.drive("commit", "1", scenario.write("1"),
                          crash_at="coordinator.after_endtxn_n_minus_1",
                          offsets=offsets.to_obj()) == {"killed": True}
    code, report = status_json(scenario, *bootstrap)
    assert code == 1
    [pending] = report["pending"]
    assert SourceOffsets.from_obj(pending["source_offsets"]).offsets == offsets.offsets
    assert [(r["committed"], r["pending"]) for r in report["source_offsets"]["partitions"]] == [
        (8, True), (3, True)]
    text = twopc("status", "--checkpoint", scenario.log_url, *bootstrap)
    assert f"source offsets: group '{group}' at batch 0 (carried by {carrier})" in text.stdout
    assert "newer pending in an open transaction" in text.stdout
    scenario.driver(control).recover()
    assert group_offsets(scenario, group, source) == {(source, 0): 12, (source, 1): 9}
    code, report = status_json(scenario, *bootstrap)
    assert code == 0, report
    assert [(r["batch_end"], r["committed"]) for r in report["source_offsets"]["partitions"]] == [
        (12, 12), (9, 9)]
    scenario.expect("0")
    scenario.expect("1")
    scenario.audit()


def test_a_partly_committed_batch_moves_the_offsets_with_its_repair(
        scenario: Scenario, control: ControlClient, make_topic: Callable[..., str]) -> None:
    from tests.driver.support import wait_not_ongoing
    from twopc.protocol.verdicts import BatchOutcome

    source, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    offsets = ends(group, source, 14, 15)
    # Partitions 0-2 commit; partition 3's transaction times out
    # while the driver is down.
    long = scenario.write("0", [scenario.txn("0", p) for p in range(3)])
    short = scenario.write("0", [scenario.txn("0", 3)], timeout_ms=4000)
    assert scenario.drive("commit", "0", long + short, margin_ms=200, offsets=offsets.to_obj(),
                          crash_at="coordinator.after_endtxn_n_minus_1") == {"killed": True}
    wait_not_ongoing(control, [r.handle for r in short if r.handle is not None])
    coord = scenario.driver(control)
    report = coord.recover()
    assert report.batches[0].outcome is BatchOutcome.PARTIAL
    # Partly visible: the offsets did not move, though three partitions are visible.
    assert group_offsets(scenario, group, source) == {(source, 0): -1, (source, 1): -1}
    # The deterministic re-run repairs the batch; its commit of the lost partition carries them.
    assert coord.commit("0", scenario.write("0"), offsets).status == "repaired"
    assert group_offsets(scenario, group, source) == {(source, 0): 14, (source, 1): 15}
    assert prepared(scenario, "0").offsets is not None
    scenario.expect("0")
    scenario.audit()
