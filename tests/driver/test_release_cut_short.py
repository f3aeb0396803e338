"""Issue 30, item 1: a stranded-commit release cut short must never lose the committed batch silently.

A broker kill dropped the markers of a committed batch (tests/broker/test_restart_mid_commit.py);
the check records `Released` and runs `ControlClient.release_stranded`: InitProducerId (epoch
e+1), AddPartitionsToTxn of the stuck partitions, EndTxn(commit). When that EndTxn never reaches
the broker (dropped by the control client's fault injector, twopc/control/faults.py, or the driver
killed between the requests), the id stays Ongoing at e+1 holding the stuck partitions. Whatever
ends that transaction other than a commit (the coordinator's timeout, an operator's fence) writes
ABORT markers of the stranded producer id there: the committed records end as aborted. Today the
next check judges the half-done release a live writer and leaves it, then, once the abort moved the
last stable offsets, clears the hold and recovery reports nothing: the read_committed audit finds
the whole batch missing.

What must happen instead (the tests' final assertions): a half-done release is finished (EndTxn
commit at the epoch DescribeTransactions reports, since a `Released` record names that id and those
partitions), and a hold is cleared only once the log check proves each span ended committed; an
aborted one raises a loud DataLossError.

The release's own transaction timeout is 60 s in production (`release_stranded`'s default); the
in-process tests shorten it (RELEASE_TIMEOUT_MS) so that the coordinator's abort comes in seconds.
"""

from __future__ import annotations

import functools
import json
import os
import signal
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from checkpoint import open_log
from tests.broker.test_restart_mid_commit import StuckCommit, _stranded_commit
from tests.driver.support import Scenario, started_driver
from tests.driver.test_stranded_running import _handle_of
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient, EndTxnRequest, LogOutcome, TxnState
from twopc.control import faults as f
from twopc.errors import DataLossError, StrandedUnreleased
from twopc.log.session import Session
from twopc.ops.audit import audit_topic, partition_offsets, wait_until_stable
from twopc.protocol.log_records import Committed, Orphans, Prepared, Released, Stranded, from_body

pytestmark = [pytest.mark.integration, pytest.mark.only_variants("kafka4-tv2", "kafka4-tv0")]

RELEASE_TIMEOUT_MS = 6000


def _committed_in_log(broker: KafkaUnderTest, stuck: StuckCommit, make_topic: Callable[..., str],
                      tmp_path: Path, control: ControlClient, prefix: str | None = None,
                      job: bool = False) -> Scenario:
    """A query (or with `job`, the batch jobs of a family; id prefix `prefix`, by default one
    that covers the stranded id without making it a pool id) whose log holds the stranded
    transaction as committed batch 0 (intent, then committed: EndTxn had answered)."""
    scenario = Scenario(broker, (make_topic(2), make_topic(2)),
                        str(tmp_path / "log"),
                        prefix=prefix or stuck.transactional_id.rsplit("-", 1)[0])
    if job:
        scenario.owner_kind, scenario.owner_id = "job", scenario.prefix
    coord = scenario.driver(control)
    coord.bind()
    session = Session(coord.log)
    session.append(Committed("0", session.append(Prepared("0", (_handle_of(stuck, control),))),
                             ()))
    return scenario


@pytest.fixture
def clients(broker: KafkaUnderTest) -> Iterator[Callable[..., ControlClient]]:
    """Control clients on the broker: `clients(faulty=True)` has a 1 s retry budget (a fault on
    every attempt exhausts it quickly) and a release whose transaction times out after
    RELEASE_TIMEOUT_MS."""
    made: list[ControlClient] = []

    def make(faulty: bool = False) -> ControlClient:
        extra = {"twopc.control.retry.timeout.ms": "1000"} if faulty else {}
        client = ControlClient(broker.config(**extra))
        if faulty:
            client.release_stranded = functools.partial(  # type: ignore[method-assign]
                ControlClient.release_stranded, client, timeout_ms=RELEASE_TIMEOUT_MS)
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()


def _drop_end_txn(tid: str) -> f.FaultPlan:
    return f.FaultPlan((f.Fault("END_TXN", f.Action.DROP_REQUEST, transactional_id=tid),))


def _cut_short_in_process(scenario: Scenario, control: ControlClient, stuck: StuckCommit) -> None:
    """recover() releases the stranded commit, and the release's EndTxn never reaches the broker
    (nor do its retries): recover() says so (StrandedUnreleased, release failed at end_txn)."""
    with f.injected(_drop_end_txn(stuck.transactional_id)) as plan, \
            pytest.raises(StrandedUnreleased, match="release failed at end_txn"):
        scenario.driver(control).recover()
    assert plan.fired and {x.transactional_id for x in plan.fired} == {stuck.transactional_id}


def _observe_half_done(broker: KafkaUnderTest, control: ControlClient, stuck: StuckCommit,
                       facts: dict[str, Any]) -> tuple[int, int]:
    """What the broker shows for a release cut short before its EndTxn (facts for issue 30): the id
    Ongoing at the stranded producer id and epoch e+1 holding exactly the stuck partitions, the
    stranded records still undecided in the log. Returns the described (producer id, epoch)."""
    tid = stuck.transactional_id
    d = control.describe_transactions([tid])[tid]
    parts = sorted((stuck.topic, p) for p in stuck.stuck)
    facts["half_done"] = {"state": d.state.value, "producer_id": d.producer_id,
                          "epoch": d.producer_epoch, "stranded_epoch": stuck.epoch,
                          "partitions": sorted(d.partitions), "timeout_ms": d.timeout_ms}
    producers = control.describe_producers(parts)
    facts["half_done_producers"] = {
        f"{t}[{p}]": [(a.producer_id, a.producer_epoch, a.current_txn_start_offset)
                      for a in s.producers] for (t, p), s in producers.items()}
    facts["half_done_offsets"] = partition_offsets(broker.config(), stuck.topic)
    p0 = min(stuck.stuck)
    check = control.log_check(stuck.topic, p0, stuck.first_offsets[p0], stuck.producer_id,
                              stuck.epoch)
    facts["half_done_log_check"] = check.describe()
    print(json.dumps(facts, default=str))
    assert d.state is TxnState.ONGOING and d.producer_id == stuck.producer_id, d
    assert d.producer_epoch == stuck.epoch + 1, d
    assert sorted(d.partitions) == parts, d
    assert check.outcome is LogOutcome.NOT_YET_STABLE, check.describe()
    return d.producer_id, d.producer_epoch


def _wait_not_ongoing(control: ControlClient, tid: str, epoch: int, limit_s: float) -> str:
    """Until the release's transaction (epoch `epoch`) is no longer Ongoing; its final state."""
    deadline = time.monotonic() + limit_s
    while True:
        d = control.describe_transactions([tid])[tid]
        if not (d.state is TxnState.ONGOING and d.producer_epoch == epoch):
            return f"{d.state.value} epoch {d.producer_epoch}"
        assert time.monotonic() < deadline, f"{tid} still Ongoing at epoch {epoch}: {d}"
        time.sleep(0.2)


def _log_records(scenario: Scenario) -> list[object]:
    return [from_body(r.body) for r in open_log(scenario.log_url).records()]


def _audit_exactly_once(broker: KafkaUnderTest, stuck: StuckCommit) -> None:
    assert wait_until_stable(broker.config(), stuck.topic, 60), "a transaction stays open"
    report = audit_topic(broker.config(), stuck.topic, expected_ids=stuck.ids)
    assert report.passed and report.records == len(stuck.ids), (
        f"committed batch 0 lost: {report.summary()} missing {len(report.missing)} of "
        f"{len(stuck.ids)} ({report.missing[:3]}...)")


def test_a_release_whose_end_txn_was_dropped_is_finished_by_the_next_check(
        broker: KafkaUnderTest, make_topic: Callable[..., str], tmp_path: Path,
        clients: Callable[..., ControlClient]) -> None:
    stuck = _stranded_commit(broker, make_topic)
    faulty = clients(faulty=True)
    scenario = _committed_in_log(broker, stuck, make_topic, tmp_path, faulty)
    _cut_short_in_process(scenario, faulty, stuck)
    facts: dict[str, Any] = {"variant": broker.variant}
    _, epoch = _observe_half_done(broker, faulty, stuck, facts)
    # The next check runs while the release's transaction is still open: it must finish it.
    second: Exception | None = None
    try:
        scenario.driver(faulty).recover()
    except Exception as exc:  # today: StrandedUnreleased, "Ongoing with epoch e+1: a live writer"
        second = exc
    facts["second_check"] = repr(second)
    # Then the release's transaction ends (committed by the check, or aborted by its timeout), and
    # a restarted driver recovers.
    facts["release_ended_as"] = _wait_not_ongoing(faulty, stuck.transactional_id, epoch,
                                                  RELEASE_TIMEOUT_MS / 1000 + 30)
    third = scenario.driver(clients()).recover()
    facts["third_check"] = third.summary() or "nothing to recover"
    print(json.dumps(facts, default=str))
    _audit_exactly_once(broker, stuck)
    assert second is None, f"the half-done release was not finished: {second}"


def test_recoverys_own_sweep_must_not_fence_a_half_done_release(
        broker: KafkaUnderTest, make_topic: Callable[..., str], tmp_path: Path,
        clients: Callable[..., ControlClient]) -> None:
    """As production names ids: the stranded commit's id is one of the query's pool
    (`{prefix}-{p}-{slot}`). Recovery releases it first, and its sweep then lists the pool's open
    transactions and fences those no pending intent names: the half-done release is one of them
    (a held id is not protected), and the fence's ABORT markers end the committed records. No
    timeout is needed: one dropped EndTxn and the same recover() call lose the batch."""
    prefix = f"q{uuid.uuid4().hex[:8]}"
    stuck = _stranded_commit(broker, make_topic, transactional_id=f"{prefix}-0-0")
    faulty = clients(faulty=True)
    scenario = _committed_in_log(broker, stuck, make_topic, tmp_path, faulty, prefix)
    facts: dict[str, Any] = {"variant": broker.variant}
    first: Exception | None = None
    with f.injected(_drop_end_txn(stuck.transactional_id)) as plan:
        try:
            scenario.driver(faulty).recover()
        except Exception as exc:  # the release failed: StrandedUnreleased (loud, so far)
            first = exc
    assert plan.fired
    facts["first_check"] = repr(first)[:300]
    facts["swept"] = [r.ids for r in _log_records(scenario) if isinstance(r, Orphans)]
    facts["after_first_check"] = str(faulty.describe_transactions(
        [stuck.transactional_id])[stuck.transactional_id])
    second: Exception | None = None
    try:
        scenario.driver(clients()).recover()
    except Exception as exc:
        second = exc
    facts["second_check"] = repr(second)[:300]
    print(json.dumps(facts, default=str))
    _audit_exactly_once(broker, stuck)
    assert second is None, f"the half-done release was not finished: {second}"


def test_a_release_aborted_by_its_timeout_is_a_loud_data_loss(
        broker: KafkaUnderTest, make_topic: Callable[..., str], tmp_path: Path,
        clients: Callable[..., ControlClient]) -> None:
    """No check runs while the half-done release is open (the driver is down): its timeout
    aborts it, and the committed batch with it. The next recovery must say so."""
    stuck = _stranded_commit(broker, make_topic)
    faulty = clients(faulty=True)
    scenario = _committed_in_log(broker, stuck, make_topic, tmp_path, faulty)
    _cut_short_in_process(scenario, faulty, stuck)
    facts: dict[str, Any] = {"variant": broker.variant}
    _, epoch = _observe_half_done(broker, faulty, stuck, facts)
    facts["release_ended_as"] = _wait_not_ongoing(faulty, stuck.transactional_id, epoch,
                                                  RELEASE_TIMEOUT_MS / 1000 + 30)
    _assert_loud_loss(broker, scenario, clients(), stuck, facts)


def test_a_half_done_release_aborted_by_an_operator_is_a_loud_data_loss(
        broker: KafkaUnderTest, make_topic: Callable[..., str], tmp_path: Path,
        clients: Callable[..., ControlClient]) -> None:
    """The driver is SIGKILLed between the release's AddPartitionsToTxn and its EndTxn (its
    EndTxn held back by a delay, from the armed fault file); an operator then fences the id
    that holds the partitions open (`twopc txn fence`, or `kafka-transactions.sh abort`)."""
    stuck = _stranded_commit(broker, make_topic)
    control = clients()
    scenario = _committed_in_log(broker, stuck, make_topic, tmp_path, control)
    fired = str(tmp_path / "fired.jsonl")
    _kill_driver_in_end_txn(scenario, stuck, tmp_path, fired)
    facts: dict[str, Any] = {"variant": broker.variant}
    records = _log_records(scenario)
    assert [r.ids for r in records if isinstance(r, Released)] == [(stuck.transactional_id,)]
    _observe_half_done(broker, control, stuck, facts)
    fenced = control.fence([stuck.transactional_id])[stuck.transactional_id]
    assert fenced.fenced, fenced
    facts["fenced_to_epoch"] = fenced.epoch
    _assert_loud_loss(broker, scenario, control, stuck, facts)


def _kill_driver_in_end_txn(scenario: Scenario, stuck: StuckCommit, tmp_path: Path,
                            fired: str) -> None:
    """recover() in a driver process whose release EndTxn is held back (the armed fault file),
    SIGKILLed there: after its AddPartitionsToTxn, before its EndTxn reached the broker."""
    control_file = str(tmp_path / "faults.json")
    f.write_control(control_file, f.FaultPlan((f.Fault(
        "END_TXN", f.Action.DELAY, transactional_id=stuck.transactional_id, delay_s=300),),
        log=fired))
    call = {"log": scenario.log_url, "bootstrap": scenario.broker.bootstrap_servers,
            "owner_id": scenario.owner_id, "owner_kind": scenario.owner_kind,
            "prefix": scenario.prefix, "action": "recover", "batch": "", "results": []}
    env = {f.CONTROL_ENV: control_file, f.ARM_ENV: f.ARM_VALUE}
    with started_driver(call, env) as proc:
        deadline = time.monotonic() + 60
        while not f.read_fired(fired):
            assert proc.poll() is None, "the driver ended before its release's EndTxn"
            assert time.monotonic() < deadline, "the release's EndTxn was never reached"
            time.sleep(0.05)
        os.killpg(proc.pid, signal.SIGKILL)  # our own child's process group
        proc.wait()


def _assert_loud_loss(broker: KafkaUnderTest, scenario: Scenario, control: ControlClient,
                      stuck: StuckCommit, facts: dict[str, Any]) -> None:
    """The release's transaction was aborted: the stranded records are aborted in the log. The
    next recovery must raise a DataLossError naming batch 0, and must not clear the hold; the
    audit then finds exactly the reported records missing, nothing else."""
    tid = stuck.transactional_id
    facts["after_abort"] = str(control.describe_transactions([tid])[tid])
    assert wait_until_stable(broker.config(), stuck.topic, 30)
    facts["after_abort_offsets"] = partition_offsets(broker.config(), stuck.topic)
    checks = {p: control.log_check(stuck.topic, p, stuck.first_offsets[p], stuck.producer_id,
                                   stuck.epoch) for p in sorted(stuck.stuck)}
    facts["after_abort_log_check"] = {p: c.describe() for p, c in checks.items()}
    print(json.dumps(facts, default=str))
    assert all(c.outcome is LogOutcome.ABORTED for c in checks.values()), facts
    coord = scenario.driver(control)
    with pytest.raises(DataLossError) as raised:
        report = coord.recover()
        print("recover() said:", report.summary() or "nothing to recover")
    assert "batch 0" in str(raised.value) and tid in str(raised.value), raised.value
    cleared = [r.cleared for r in _log_records(scenario) if isinstance(r, Stranded)]
    assert not any(tid in c for c in cleared), f"the hold on {tid} was cleared: {cleared}"
    report = audit_topic(broker.config(), stuck.topic, expected_ids=stuck.ids)
    # Missing: the records of the partitions whose markers were dropped (on each, the stranded
    # transaction's records are all of the fresh topic's below its high watermark then); those of
    # partitions whose markers landed stay visible (a kill does not always drop every marker).
    lost = sum(hw - stuck.first_offsets[p] for p, (_, hw) in stuck.stuck.items())
    assert set(report.missing) <= set(stuck.ids) and len(report.missing) == lost, (
        report.summary(), stuck.stuck)
    assert not report.duplicates, report.summary()


def test_a_lost_answer_of_the_release_end_txn_is_harmless(
        broker: KafkaUnderTest, make_topic: Callable[..., str], tmp_path: Path,
        clients: Callable[..., ControlClient]) -> None:
    """The release's EndTxn reaches the broker, which commits, but every answer is lost: the
    release looks failed (loud), and the next check finds the partitions released."""
    stuck = _stranded_commit(broker, make_topic)
    faulty = clients(faulty=True)
    scenario = _committed_in_log(broker, stuck, make_topic, tmp_path, faulty)
    plan = f.FaultPlan((f.Fault("END_TXN", f.Action.DROP_ANSWER,
                                transactional_id=stuck.transactional_id),))
    with f.injected(plan), pytest.raises(StrandedUnreleased, match="release failed at end_txn"):
        scenario.driver(faulty).recover()
    assert plan.fired
    d = faulty.describe_transactions([stuck.transactional_id])[stuck.transactional_id]
    assert d.state in (TxnState.PREPARE_COMMIT, TxnState.COMPLETE_COMMIT), d
    again = scenario.driver(clients()).recover()
    cleared = [r.cleared for r in _log_records(scenario) if isinstance(r, Stranded)]
    assert any(stuck.transactional_id in c for c in cleared), (again.summary(), cleared)
    _audit_exactly_once(broker, stuck)


def test_end_txn_commit_at_the_described_epoch_finishes_a_half_done_release(
        broker: KafkaUnderTest, make_topic: Callable[..., str], tmp_path: Path,
        clients: Callable[..., ControlClient]) -> None:
    """The broker fact the fix rests on (passes today): after a release cut short, EndTxn(commit)
    with the producer id and epoch DescribeTransactions reports commits the release, and its
    markers end the stranded records as committed."""
    stuck = _stranded_commit(broker, make_topic)
    faulty = clients(faulty=True)
    scenario = _committed_in_log(broker, stuck, make_topic, tmp_path, faulty)
    _cut_short_in_process(scenario, faulty, stuck)
    facts: dict[str, Any] = {"variant": broker.variant}
    pid, epoch = _observe_half_done(broker, faulty, stuck, facts)
    before = partition_offsets(broker.config(), stuck.topic)
    out = faulty.end_txns([EndTxnRequest(stuck.transactional_id, pid, epoch, True)])
    facts["end_txn_at_described_epoch"] = str(out[stuck.transactional_id])
    assert out[stuck.transactional_id].committed, out
    assert wait_until_stable(broker.config(), stuck.topic, 30)
    after = partition_offsets(broker.config(), stuck.topic)
    facts["offsets_before_after"] = (before, after)
    checks = {p: faulty.log_check(stuck.topic, p, stuck.first_offsets[p], stuck.producer_id,
                                  stuck.epoch).describe() for p in sorted(stuck.stuck)}
    facts["log_check_after"] = checks
    d = faulty.describe_transactions([stuck.transactional_id])[stuck.transactional_id]
    facts["describe_after"] = str(d)
    print(json.dumps(facts, default=str))
    assert d.state is TxnState.COMPLETE_COMMIT and d.producer_epoch == epoch, d
    assert all(c == "committed" for c in checks.values()), checks
    for p in stuck.stuck:  # one COMMIT marker per released partition
        assert after[p][1] == before[p][1] + 1, (before, after)
    # Recovery then clears the hold (the partitions are stable and the spans committed).
    scenario.driver(clients()).recover()
    _audit_exactly_once(broker, stuck)
