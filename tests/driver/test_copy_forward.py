"""Copy-forward against a real broker (issue 31 B): Flink's loss case, the driver down past the
transaction timeout after its intent, repaired from the log's own copy of the aborted records,
whatever a re-run of a source that cannot replay its rows produces. Every original record ends up
visible exactly once, with its key, headers and timestamp; the re-run's rows never do."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

import pytest
from confluent_kafka import Message, TopicPartition
from confluent_kafka.admin import AdminClient
from twopc_testing.offsets import stable_group_offsets

from tests.driver.support import ROOT, DriverUnderTest, Scenario, wait_not_ongoing
from twopc.control import ControlClient
from twopc.errors import CopyForwardFailed, DataLossError
from twopc.ops.audit import audit_topic
from twopc.protocol.copies import RepairPolicy, RepairSettings
from twopc.protocol.handle import Handle, ResultKind, WriteResult
from twopc.protocol.offsets import SourceOffsets
from twopc.protocol.verdicts import BatchOutcome

pytestmark = pytest.mark.integration

SHORT_MS = 10000  # short enough to wait out, long enough for a loaded machine's driver start
# The rich rows' timestamps: an hour back, so that a copy stamped "now" would show, and recent
# enough for the broker's time retention (records stamped days back can be deleted at once).
TS_BASE = int(time.time() * 1000) - 3600_000


def handles_of(results: list[WriteResult] | None) -> list[Handle]:
    return [r.handle for r in results or [] if r.handle is not None]


def rich(scenario: Scenario, batch: str, p: int, tag: str = "") -> dict[str, Any]:
    return {**scenario.txn(batch, p, tag=tag), "rich": TS_BASE}


def driver(scenario: Scenario, control: ControlClient,
           policy: RepairPolicy = RepairPolicy.AUTO) -> DriverUnderTest:
    return scenario.driver(control, repair=RepairSettings(
        policy, scenario.broker.config(), 60000))


def decided_then_timed_out(scenario: Scenario, control: ControlClient,
                           lost: tuple[int, ...]) -> list[WriteResult]:
    """Batch 0 decided (its intent recorded), then the driver down past the timeout of the
    transactions of the Spark partitions `lost`; recovery commits the others and records it."""
    kept = [p for p in range(scenario.partitions) if p not in lost]
    long = scenario.write_real("0", [rich(scenario, "0", p) for p in kept]) if kept else []
    short = scenario.write_real("0", [rich(scenario, "0", p) for p in lost], timeout_ms=SHORT_MS)
    assert long is not None and short is not None
    # One lost: the driver dies after every EndTxn but the last (the short one's): Flink's case
    # exactly. More: it dies after the intent, and recovery rolls the others forward.
    crash = ("coordinator.after_endtxn_n_minus_1" if len(lost) == 1 and kept
             else "coordinator.after_intent")
    assert scenario.drive("commit", "0", long + short, crash_at=crash,
                          margin_ms=200) == {"killed": True}
    wait_not_ongoing(control, handles_of(short))
    [batch] = scenario.driver(control).recover().batches
    assert batch.outcome is (BatchOutcome.PARTIAL if kept else BatchOutcome.ABORTED)
    return long + short


def rerun_with_other_rows(scenario: Scenario) -> list[WriteResult]:
    """A source that cannot replay: the re-run's rows are others (and one partition is empty)."""
    out = scenario.write_real("0", [rich(scenario, "0", p, tag="-rerun")
                                    for p in range(scenario.partitions - 1)])
    assert out is not None
    return [*out, WriteResult(ResultKind.EMPTY, "0", scenario.partitions - 1, 0)]


def _writers_id(msg: Message) -> str:
    """The record's id, once its key, headers and timestamp are checked to be the writer's."""
    rid = msg.value().decode()
    assert msg.key() == f"k-{rid}".encode()
    assert msg.headers() == [("id", rid.encode()), ("none", None)]
    assert msg.timestamp()[1] == TS_BASE + int(rid.rsplit("-r", 1)[1])
    return rid


def assert_records_exact(scenario: Scenario) -> None:
    """The visible records are exactly the expected ids, once each, with the writer's keys,
    headers and timestamps (task.py's rich): the audit's read, checking each record."""
    for topic in scenario.topics:
        want = scenario.expected.get(topic, set())
        report = audit_topic(scenario.broker.config(), topic, sorted(want), id_of=_writers_id)
        assert report.passed and set(report.counts) == want, (topic, report.summary())


@pytest.mark.all_variants
@pytest.mark.parametrize("lost", [(3,), (0, 1, 2, 3)], ids=["partial", "all-aborted"])
def test_flink_loss_case_is_copied_forward(scenario: Scenario, control: ControlClient,
                                           lost: tuple[int, ...]) -> None:
    decided_then_timed_out(scenario, control, lost)
    coord = driver(scenario, control)
    assert not coord.is_committed("0")  # the re-run writes, with other rows
    report = coord.commit("0", rerun_with_other_rows(scenario))
    assert report.status == "copied", report
    assert len(report.committed) == len(lost) and len(report.duplicates) == 3
    assert coord.is_committed("0")
    # A later re-run (a crash before Spark's own commit log) finds it committed: no second copy.
    again = coord.commit("0", rerun_with_other_rows(scenario))
    assert again.status == "already_committed"
    coord.recover()
    scenario.expect("0")  # the originals, every partition, exactly once; no "-rerun" row
    scenario.audit()
    assert_records_exact(scenario)


def refused_loudly(scenario: Scenario, control: ControlClient, why: str,
                   visible: Iterable[int]) -> None:
    """The copy of batch 0 refused under `copy` (CopyForwardFailed) and under `auto` (the re-run
    repair as before copy-forward; the re-run differs, so DataLossError), each naming `why`; then
    exactly the decided records of the Spark partitions `visible` are visible, none of the
    re-runs', and no transaction is left open (the re-runs' were fenced, not left to time out)."""
    rerun = rerun_with_other_rows(scenario)
    with pytest.raises(CopyForwardFailed, match=why):
        driver(scenario, control, RepairPolicy.COPY).commit("0", rerun)
    wait_not_ongoing(control, handles_of(rerun), limit_s=5)
    again = rerun_with_other_rows(scenario)
    with pytest.raises(DataLossError, match=f"not copied forward.*{why}"):
        driver(scenario, control).commit("0", again)
    wait_not_ongoing(control, handles_of(again), limit_s=5)
    scenario.expect("0", partitions=visible)
    scenario.audit()


def test_gone_records_fail_loudly_or_fall_back_to_the_rerun(
        scenario: Scenario, control: ControlClient) -> None:
    results = decided_then_timed_out(scenario, control, (3,))
    [lost] = [h for h in handles_of(results) if h.task_partition == 3]
    span = lost.spans[0]
    admin = AdminClient(scenario.broker.config())
    for f in admin.delete_records([TopicPartition(span.topic, span.partition,
                                                  span.first_offset + 1)]).values():
        f.result(30)
    refused_loudly(scenario, control, "log start", visible=(0, 1, 2))
    # Refused the copies (compaction, a re-created topic): test_copy_forward_refusals.py.


COPY_CRASH_POINTS = [
    "copy.after_duplicates",  # the re-run's transactions recorded and fenced, no `copying` yet
    "copy.after_record",
    # Inside a copy's writer (the driver process writes only copies): its records produced, or
    # flushed to the log, in a transaction not yet pre-committed.
    "writer.after_produce",
    "writer.after_flush",
    "copy.after_write",
    "coordinator.after_intent",
    "coordinator.after_endtxn_1",
    "coordinator.after_committed_record",
]


@pytest.mark.parametrize("point", COPY_CRASH_POINTS)
def test_copy_killed_at(point: str, scenario: Scenario, control: ControlClient) -> None:
    """The driver SIGKILLed at each step of the copy's commit; the next run copies once."""
    decided_then_timed_out(scenario, control, (2, 3))
    out = scenario.drive("commit", "0", rerun_with_other_rows(scenario), crash_at=point,
                         repair_policy="auto")
    assert out == {"killed": True}, out
    coord = driver(scenario, control)
    coord.recover()
    results = ([WriteResult(ResultKind.SKIPPED, "0", p, 0) for p in range(scenario.partitions)]
               if coord.is_committed("0") else rerun_with_other_rows(scenario))
    assert coord.commit("0", results).status in ("copied", "already_committed")
    coord.recover()
    scenario.expect("0")
    scenario.audit()


def test_operator_copies_forward_with_twopc_recover(scenario: Scenario,
                                                    control: ControlClient) -> None:
    """`twopc recover --repair copy`: the batch is committed from the log's copy with no re-run;
    the restarted query's tasks then skip it."""
    decided_then_timed_out(scenario, control, (1, 3))
    proc = subprocess.run(
        [sys.executable, "-m", "twopc.cli", "recover", "--checkpoint", scenario.log_url,
         "--bootstrap-servers", scenario.broker.bootstrap_servers, "--json", "--no-progress",
         "--repair", "copy"],
        capture_output=True, text=True, cwd=ROOT, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    out = json.loads(proc.stdout)
    [copied] = out["copied"]
    assert copied["batch"] == "0" and len(copied["transactions"]) == 2
    assert out["not_copied"] == [] and out["stuck"] == []
    coord = scenario.driver(control)
    assert coord.is_committed("0")
    skipped = [WriteResult(ResultKind.SKIPPED, "0", p, 0) for p in range(scenario.partitions)]
    assert coord.commit("0", skipped).status == "already_committed"
    scenario.expect("0")
    scenario.audit()


# ---- with source offsets: they move only with every record (issue 30 item 2), copies too --------

LATE = 1  # the Spark partition whose transaction times out


@pytest.mark.parametrize("killed_at", [None, "coordinator.after_endtxn_1"],
                         ids=["copied", "copy-killed-after-first-endtxn"])
def test_copy_forward_moves_the_source_offsets_only_with_every_record(
        scenario: Scenario, control: ControlClient, make_topic: Callable[..., str],
        killed_at: str | None) -> None:
    """twopc.commitSourceOffsets: batch 1 decided, the driver down after its first EndTxn while
    partition LATE's transaction times out; recovery finds the batch partial and the group stays
    at batch 0's offsets (they wait in their own transaction, which recovery fences). A re-run of
    other rows is then repaired by copy-forward (or the driver is killed after the copy's EndTxn:
    recovery rolls it forward); the group reaches batch 1's offsets once every original record is
    visible, after the copy's markers are checked."""
    source, group = make_topic(2), f"g-{uuid.uuid4().hex[:8]}"
    parts = [(source, 0), (source, 1)]
    coord = driver(scenario, control)
    first = SourceOffsets(group, ((source, 0, 5), (source, 1, 5)))
    assert coord.commit("0", scenario.write("0"), first).status == "committed"
    scenario.expect("0")
    others = [p for p in range(scenario.partitions) if p != LATE]
    # The real writer: the copies are verified against its checksums (precommit.py's are not).
    kept = scenario.write_real("1", [scenario.txn("1", p) for p in others])
    late = scenario.write_real("1", [scenario.txn("1", LATE)], timeout_ms=SHORT_MS)
    assert kept is not None and late is not None
    results = sorted(kept + late, key=lambda r: r.task_partition)
    offsets = SourceOffsets(group, ((source, 0, 20), (source, 1, 9)))
    assert scenario.drive("commit", "1", results, margin_ms=200, offsets=offsets.to_obj(),
                          crash_at="coordinator.after_endtxn_1") == {"killed": True}
    wait_not_ongoing(control, handles_of(results[LATE:LATE + 1]))
    [batch] = scenario.driver(control).recover().batches
    assert batch.outcome is BatchOutcome.PARTIAL and batch.lost_partitions == [LATE]
    assert stable_group_offsets(scenario.broker.config(), group, parts) == {
        (source, 0): 5, (source, 1): 5}
    # A source that cannot replay: the re-run's rows are others.
    rerun = scenario.write("1", [scenario.txn("1", p, tag="-rerun")
                                 for p in range(scenario.partitions)])
    if killed_at is None:
        report = driver(scenario, control).commit("1", rerun, offsets)
        assert report.status == "copied" and len(report.committed) == 1, report
    else:
        out = scenario.drive("commit", "1", rerun, offsets=offsets.to_obj(),
                             repair_policy="auto", crash_at=killed_at)
        assert out == {"killed": True}, out
        driver(scenario, control).recover()
    assert driver(scenario, control).is_committed("1")
    assert stable_group_offsets(scenario.broker.config(), group, parts) == {
        (source, 0): 20, (source, 1): 9}
    scenario.expect("1")  # the originals, every partition exactly once; no "-rerun" row
    scenario.audit()


@pytest.mark.parametrize("policy", [RepairPolicy.AUTO, RepairPolicy.COPY])
def test_a_rerun_that_reproduces_only_the_visible_part_is_not_committed_for_the_lost_one(
        policy: RepairPolicy, scenario: Scenario, control: ControlClient) -> None:
    """Partitions 0-2 visible, partition 3 decided and aborted by the timeout. The re-run
    reproduces 0-2 exactly but partition 3 with other rows: the decided records of partition 3
    are copied forward, not replaced by the re-run's (found by review: the re-run repair
    committed them, silently, even under `copy`)."""
    decided_then_timed_out(scenario, control, (3,))
    rerun = scenario.write_real("0", [rich(scenario, "0", p) for p in range(3)]
                                + [rich(scenario, "0", 3, tag="-rerun")])
    assert rerun is not None
    report = driver(scenario, control, policy).commit("0", rerun)
    assert report.status == "copied", report
    scenario.expect("0")
    scenario.audit()
    assert_records_exact(scenario)


def test_a_superseded_intent_is_not_copied_beside_the_later_one(
        scenario: Scenario, control: ControlClient) -> None:
    """Intent 1 (Spark partitions 0-3) aborted by the timeout; the re-run, committed afresh under
    `rerun`, holds the same rows in partitions 0-2 (partition 3's rows in partition 1: another
    partitioning); its intent is aborted by the timeout too. The next run (auto) copies intent 2's
    transactions only (found by review: intent 1's partition 3 came back beside them, twice)."""
    first = scenario.write_real("0", [scenario.txn("0", p) for p in range(4)],
                                timeout_ms=SHORT_MS)
    assert first is not None
    assert scenario.drive("commit", "0", first, crash_at="coordinator.after_intent",
                          margin_ms=200) == {"killed": True}
    wait_not_ongoing(control, handles_of(first))
    [b] = scenario.driver(control).recover().batches
    assert b.outcome is BatchOutcome.ABORTED

    def repartitioned() -> list[dict[str, object]]:
        return [scenario.txn("0", 0),
                {**scenario.txn("0", 1), "ids": scenario.ids("0", 1) + scenario.ids("0", 3)},
                scenario.txn("0", 2)]

    second = scenario.write_real("0", repartitioned(), timeout_ms=SHORT_MS)
    assert second is not None
    assert scenario.drive("commit", "0", second, crash_at="coordinator.after_intent",
                          margin_ms=200, repair_policy="rerun") == {"killed": True}
    wait_not_ongoing(control, handles_of(second))
    [b] = scenario.driver(control).recover().batches
    assert b.outcome is BatchOutcome.ABORTED
    third = scenario.write_real("0", repartitioned())
    assert third is not None
    report = driver(scenario, control).commit("0", third)
    assert report.status == "copied" and len(report.committed) == 3, report
    scenario.expect("0")
    scenario.audit()  # every row of the batch exactly once
