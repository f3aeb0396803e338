"""Rescaling between restarts (issue 31 A.2), against a real broker: the Spark write's partition
count changes, the output topic gains partitions, the transactional id prefix changes. Each time
no transaction stays open pinning a last stable offset, no batch is dropped or doubled (the
exactly-once audit), and what cannot be repaired is refused with a typed error saying what to do.

A batch's rows are always the same ids (a deterministic source); a run with `n` Spark partitions
gives partition `p` the rows `i` with `i % n == p`, so a re-run with another count spreads the
same rows differently, as a changed `repartition(n)` or source partitioning does.

The tests marked `all_variants` run on every broker variant in the default suite; the others (the
partition-count ones among them: the suite's time) on the default broker, and on every variant
with TWOPC_MATRIX=full.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from confluent_kafka.admin import AdminClient, NewPartitions

from tests.driver.support import DriverUnderTest, Scenario, wait_not_ongoing
from twopc.control import ControlClient, TxnState
from twopc.errors import DataLossError, PrefixChanged, QueryMismatch
from twopc.protocol.copies import RepairPolicy, RepairSettings
from twopc.protocol.handle import Handle, ResultKind, WriteResult
from twopc.protocol.pool import in_pool, transactional_id
from twopc.protocol.verdicts import BatchOutcome

pytestmark = pytest.mark.integration

ROWS = 12
SHORT_MS = 10000  # a transaction that times out while the driver is down


def rows_of(scenario: Scenario, batch: str) -> list[str]:
    return [f"{scenario.prefix}-b{batch}-r{i}" for i in range(ROWS)]


def spread(scenario: Scenario, batch: str, n: int, slot: int, kafka_partitions: int = 2,
           only: Sequence[int] | None = None) -> list[dict[str, Any]]:
    """The batch's rows over `n` Spark partitions (Kafka partition `p % kafka_partitions`)."""
    ids = rows_of(scenario, batch)
    return [{"tid": transactional_id(scenario.prefix, p, slot), "topic": scenario.topics[0],
             "partition": p % kafka_partitions, "p": p, "attempt": slot, "ids": ids[p::n]}
            for p in range(n) if only is None or p in only]


def write(scenario: Scenario, batch: str, n: int, slot: int, kafka_partitions: int = 2,
          only: Sequence[int] | None = None, timeout_ms: int | None = None) -> list[WriteResult]:
    """Pre-commit the batch with the real writer (the copies verify against its checksums)."""
    out = scenario.write_real(batch, spread(scenario, batch, n, slot, kafka_partitions, only),
                              timeout_ms=timeout_ms)
    assert out is not None
    return out


def expect(scenario: Scenario, batch: str) -> None:
    scenario.expected.setdefault(scenario.topics[0], set()).update(rows_of(scenario, batch))


def handles_of(results: Sequence[WriteResult]) -> list[Handle]:
    return [r.handle for r in results if r.handle is not None]


def driver(scenario: Scenario, control: ControlClient,
           policy: RepairPolicy = RepairPolicy.AUTO) -> DriverUnderTest:
    return scenario.driver(control, repair=RepairSettings(policy, scenario.broker.config(), 60000))


def open_in_pool(control: ControlClient, prefix: str) -> list[str]:
    """The pool's transactions open now (ListTransactions, at once: not after a timeout)."""
    return sorted(t.transactional_id for t in control.list_transactions(
        prefix, states=[TxnState.ONGOING]) if in_pool(prefix, t.transactional_id))


def timed_out_after_intent(scenario: Scenario, control: ControlClient, n: int,
                           lost: Sequence[int]) -> list[WriteResult]:
    """Batch 0 written with `n` Spark partitions and decided (its intent recorded); the driver
    then stays down past the timeout of partitions `lost`; recovery records the batch partial."""
    kept = [p for p in range(n) if p not in lost]
    long = write(scenario, "0", n, 0, only=kept)
    short = write(scenario, "0", n, 0, only=lost, timeout_ms=SHORT_MS)
    results = sorted(long + short, key=lambda r: r.task_partition)
    # The short ones last: the driver dies after every EndTxn but the last (Flink's case).
    assert scenario.drive("commit", "0", long + short, margin_ms=200,
                          crash_at="coordinator.after_endtxn_n_minus_1") == {"killed": True}
    wait_not_ongoing(control, handles_of(short))
    [batch] = scenario.driver(control).recover().batches
    assert batch.outcome is BatchOutcome.PARTIAL
    return results


def nothing_open_then_next_batch(scenario: Scenario, control: ControlClient,
                                 coord: DriverUnderTest, n: int) -> None:
    """Batch 0 settled: nothing of the pool is open now, batch 1 commits with `n` partitions,
    and the audit finds both batches exactly once."""
    assert open_in_pool(control, scenario.prefix) == []
    assert coord.commit("1", write(scenario, "1", n, 0)).status == "committed"
    expect(scenario, "0")
    expect(scenario, "1")
    scenario.audit()


# ---- (1) the Spark write's partition count changes ------------------------------------------


@pytest.mark.parametrize(("new_n", "crash_at"), [(2, "coordinator.after_intent"),
                                                 (6, "coordinator.after_endtxn_1")])
def test_a_rerun_with_another_partition_count_after_a_crash_past_the_intent(
        scenario: Scenario, control: ControlClient, new_n: int, crash_at: str) -> None:
    """The driver dies after its intent with 4 partitions; the restarted query re-runs the batch
    with `new_n`: the intent is rolled forward, every transaction of the re-run is a duplicate
    (fenced at once), and the next batches commit with `new_n`."""
    first = write(scenario, "0", 4, 0)
    assert scenario.drive("commit", "0", first, crash_at=crash_at) == {"killed": True}
    rerun = write(scenario, "0", new_n, 1)
    coord = driver(scenario, control)
    report = coord.commit("0", rerun)
    assert report.status == "already_committed", report
    assert len(report.duplicates) == new_n
    nothing_open_then_next_batch(scenario, control, coord, new_n)


def test_tasks_of_partitions_a_restart_no_longer_has_are_fenced(
        scenario: Scenario, control: ControlClient) -> None:
    """The driver dies before its intent with 6 partitions pre-committed; the restart has 2, so
    no task of it takes the ids of partitions 2 to 5 again (an init there would fence them):
    recovery's sweep must, before the re-run writes, and the batch commits once."""
    first = write(scenario, "0", 6, 0)
    assert scenario.drive("commit", "0", first,
                          crash_at="coordinator.before_intent") == {"killed": True}
    assert len(open_in_pool(control, scenario.prefix)) == 6
    coord = driver(scenario, control)
    report = coord.recover()
    assert sorted(report.orphans_fenced) == [transactional_id(scenario.prefix, p, 0)
                                             for p in range(6)]
    assert open_in_pool(control, scenario.prefix) == []
    assert coord.commit("0", write(scenario, "0", 2, 0)).status == "committed"
    expect(scenario, "0")
    scenario.audit()


@pytest.mark.parametrize("new_n", [2, 6])
def test_a_partly_committed_batch_rerun_with_another_partition_count(
        scenario: Scenario, control: ControlClient, new_n: int) -> None:
    """Partition 3 of 4 timed out after the intent: partitions 0-2 are visible. A re-run with
    another partition count cannot reproduce them: with twopc.repairPolicy=rerun that is a
    DataLossError naming the changed partitioning, the re-run fenced at once; with auto (the
    default) the aborted part is copied forward from the log and the batch ends exactly once."""
    timed_out_after_intent(scenario, control, 4, (3,))
    rerun = write(scenario, "0", new_n, 1)
    with pytest.raises(DataLossError,
                       match=r"re-run has \d Spark partitions.*partition count (may have )?changed"):
        driver(scenario, control, RepairPolicy.RERUN).commit("0", rerun)
    assert open_in_pool(control, scenario.prefix) == []
    coord = driver(scenario, control)
    report = coord.commit("0", write(scenario, "0", new_n, 2))
    assert report.status == "copied", report
    assert len(report.committed) == 1 and len(report.duplicates) == new_n
    nothing_open_then_next_batch(scenario, control, coord, new_n)


def test_copy_forward_copies_only_the_last_decided_attempt(
        scenario: Scenario, control: ControlClient) -> None:
    """Three runs of batch 0 with 4, 2 and 3 partitions. Run 1 is decided and wholly aborted (the
    driver down past the timeout); run 2 (twopc.repairPolicy=rerun, so no copy) is decided with 2
    partitions and only its partition 0 becomes visible. What is left to copy is run 2's
    partition 1, which holds every row partition 0 lacks; run 1's partitions 2 and 3 hold rows
    that are visible already. Run 3 (auto) cannot reproduce partition 0, so it copies: run 1's
    handles must not be among the copies (they were: every row of them twice)."""
    first = write(scenario, "0", 4, 0, timeout_ms=SHORT_MS)
    assert scenario.drive("commit", "0", first, margin_ms=200,
                          crash_at="coordinator.after_intent") == {"killed": True}
    wait_not_ongoing(control, handles_of(first))
    [b] = scenario.driver(control).recover().batches
    assert b.outcome is BatchOutcome.ABORTED
    second = write(scenario, "0", 2, 1, only=[0]) + write(scenario, "0", 2, 1, only=[1],
                                                          timeout_ms=SHORT_MS)
    assert scenario.drive("commit", "0", second, margin_ms=200,
                          crash_at="coordinator.after_endtxn_1") == {"killed": True}
    wait_not_ongoing(control, handles_of(second[1:]))
    [b] = scenario.driver(control).recover().batches
    assert b.outcome is BatchOutcome.PARTIAL
    report = driver(scenario, control).commit("0", write(scenario, "0", 3, 2))
    assert report.status == "copied", report
    assert report.committed == (transactional_id(scenario.prefix, 1, 1),)
    assert open_in_pool(control, scenario.prefix) == []
    expect(scenario, "0")
    scenario.audit()


# ---- (2) the output topic gains partitions ----------------------------------------------------


def grow(scenario: Scenario, topic: str, partitions: int) -> None:
    admin = AdminClient(scenario.broker.config())
    for f in admin.create_partitions([NewPartitions(topic, partitions)]).values():
        f.result(30)


@pytest.mark.all_variants
def test_the_topic_gains_partitions_while_the_driver_is_down_after_its_intent(
        scenario: Scenario, control: ControlClient) -> None:
    """Batch 0 decided on a 2-partition topic, the driver killed after its first EndTxn; the
    topic grows to 4 partitions; the restart rolls the intent forward, its re-run writes into all
    4 (duplicates, fenced) and batch 1 commits into all 4."""
    topic = scenario.topics[0]
    first = write(scenario, "0", 4, 0)
    assert scenario.drive("commit", "0", first,
                          crash_at="coordinator.after_endtxn_1") == {"killed": True}
    grow(scenario, topic, 4)
    coord = driver(scenario, control)
    coord.recover()
    assert coord.is_committed("0")
    report = coord.commit("0", write(scenario, "0", 4, 1, kafka_partitions=4))
    assert report.status == "already_committed" and len(report.duplicates) == 4
    report = coord.commit("1", write(scenario, "1", 4, 0, kafka_partitions=4))
    assert report.status == "committed"
    assert {s.partition for r in write(scenario, "2", 4, 1, kafka_partitions=4)
            if r.handle for s in r.handle.spans} == {0, 1, 2, 3}
    assert coord.commit("2", []).status == "empty"  # batch 2's tasks lost: fenced as orphans
    assert open_in_pool(control, scenario.prefix) == []
    expect(scenario, "0")
    expect(scenario, "1")
    scenario.audit()


def test_a_partly_committed_batch_repaired_after_the_topic_grew(
        scenario: Scenario, control: ControlClient) -> None:
    """Partition 3 timed out after the intent, then the topic grew from 2 to 4 partitions. The
    re-run's rows now go to other Kafka partitions (3 to the new partition 3): the checksum
    covers topic, key, value and headers, not the partition, so the re-run still proves the
    visible partitions the same, and its partition 3 repairs the batch."""
    timed_out_after_intent(scenario, control, 4, (3,))
    grow(scenario, scenario.topics[0], 4)
    rerun = write(scenario, "0", 4, 1, kafka_partitions=4)
    report = driver(scenario, control).commit("0", rerun)
    assert report.status == "repaired", report
    [repair] = [r.handle for r in rerun if r.handle and r.handle.transactional_id
                in report.committed]
    assert repair.task_partition == 3 and [s.partition for s in repair.spans] == [3]
    assert open_in_pool(control, scenario.prefix) == []
    expect(scenario, "0")
    scenario.audit()


# ---- (3) the transactional id prefix changes --------------------------------------------------


@pytest.mark.all_variants
def test_a_changed_prefix_is_refused_and_the_old_one_settles_the_log(
        scenario: Scenario, control: ControlClient) -> None:
    """The driver dies after its intent; the query restarts with another prefix. The log's
    transactions are under the old prefix, and the new one's sweep would not see what the old
    runs left open: refused (PrefixChanged, a QueryMismatch) before anything is sent or
    appended. A restart with the old prefix settles everything at once."""
    first = write(scenario, "0", 4, 0)
    assert scenario.drive("commit", "0", first,
                          crash_at="coordinator.after_intent") == {"killed": True}
    old = scenario.prefix
    records = sorted(scenario.driver(control).log.records(), key=lambda r: r.seq)
    renamed = DriverUnderTest(scenario.driver(control).log, control, "query", scenario.owner_id,
                              f"{old}-renamed", margin_ms=2000)
    for attempt in (renamed.recover, lambda: renamed.commit("0", [])):
        with pytest.raises(PrefixChanged, match=rf"prefix '{old}'.*'{old}-renamed'") as err:
            attempt()
        assert isinstance(err.value, QueryMismatch)
        assert "twopc.transactionalIdPrefix" in str(err.value)
    with pytest.raises(PrefixChanged):
        renamed.is_committed("0")  # the executors' gate refuses too
    # Nothing appended, nothing ended: the intent's transactions are as the crash left them.
    assert [r.seq for r in renamed.log.records()] == [r.seq for r in records]
    assert open_in_pool(control, old) == sorted(transactional_id(old, p, 0) for p in range(4))
    coord = driver(scenario, control)
    coord.recover()
    assert open_in_pool(control, old) == []
    skipped = [WriteResult(ResultKind.SKIPPED, "0", p, 0) for p in range(4)]
    assert coord.commit("0", skipped).status == "already_committed"
    expect(scenario, "0")
    scenario.audit()


def test_a_job_family_with_a_changed_prefix_is_refused(
        scenario: Scenario, control: ControlClient) -> None:
    """Batch jobs: the family is its prefix, so the log of jobs under `old` refuses a job under
    another prefix by name, before its lease or anything else is written."""
    scenario.owner_kind = "job"
    scenario.owner_id = scenario.prefix
    coord = scenario.driver(control)
    assert coord.commit("job-1", write(scenario, "job-1", 2, 0)).status == "committed"
    renamed = DriverUnderTest(coord.log, control, "job", "other", "other", margin_ms=2000)
    with pytest.raises(PrefixChanged, match=f"prefix '{scenario.prefix}'"):
        renamed.commit("job-2", [])
    expect(scenario, "job-1")
    scenario.audit()
