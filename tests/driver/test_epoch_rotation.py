"""Producer epoch exhaustion and producer-id rotation (issue 31, A.1), against the real brokers.

Every task's `init_transactions` raises its transactional id's epoch by one (twopc's commits do not:
EndTxn v4 takes the old path, `endTransactionWithTV1`, on every cluster), so an id of the pool used
once per micro-batch reaches 32,766 after 32,766 batches: about nine hours at a 1 s trigger. The
next InitProducerId gives the id a new producer id at epoch 0 (`prepareProducerIdRotation`). On a
transaction-version-2 cluster the coordinator's own aborts (timeout, fencing an Ongoing id) take the
new path and bump the epoch: at 32766 that abort itself rotates the producer id (KAFKA-20090's path;
CompleteAbort with the new id at epoch 0). On kafka4-tv0 and kafka3.9 the abort leaves epoch 32767
and the next InitProducerId rotates.

Each test drives one id of the pool to epoch 32765 (tests/driver/epochs.py, about 15-25 s), so that
a plain `init_transactions` would be answered with 32766, the last epoch before exhaustion, then
runs twopc across the rotation with the exactly-once audit. The default suite runs the quick
ones and two of the four crash cases; the other two, the stranded release and the coordinator's
aborts are `slow`:
`.venv/bin/python -m pytest tests/driver/test_epoch_rotation.py -m slow` (every variant:
`TWOPC_MATRIX=full`).

A committed transaction at epoch 32766 could not be released if its markers were dropped (section
8 of docs/design.md): the release's InitProducerId rotates the producer id, and only the same
producer id's markers end the stranded transaction. So the writer never pre-commits a transaction
above epoch 32766 - RELEASE_RESERVE (twopc/protocol/epochs.py): near the end it has the broker
rotate the producer id before its init (twopc/executor/headroom.py). The two release tests prove
it (they failed before the guard: strict xfail before commit 9992f25).
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest
from twopc_testing.txn_producer import run_txn_producer

from tests.driver.epochs import EXHAUSTED, drive_epochs, drive_one, rotate
from tests.driver.support import Scenario, wait_not_ongoing
from twopc.control import (
    ControlClient,
    EndTxnRequest,
    OutcomeKind,
    TransactionDescription,
    TxnState,
)
from twopc.control.logcheck import LogOutcome
from twopc.errors import StrandedUnreleased
from twopc.log.session import Session
from twopc.ops.audit import partition_offsets, wait_until_stable
from twopc.protocol.epochs import HIGHEST_HANDLE_EPOCH, releasable
from twopc.protocol.handle import Handle, ResultKind, WriteResult
from twopc.protocol.log_records import Prepared
from twopc.protocol.pool import transactional_id
from twopc.protocol.verdicts import BatchOutcome

pytestmark = pytest.mark.integration

# Driven to this epoch, an idle id answers the writer's init_transactions with EXHAUSTED (32766).
BEFORE_EDGE = EXHAUSTED - 1


class Unreleased(AssertionError):
    """A committed transaction that twopc could not release (how the release tests fail)."""


def _drive_edge(scenario: Scenario, p: int = 0, slot: int = 0) -> tuple[str, int]:
    """Drive the id of partition `p`, `slot` to BEFORE_EDGE: (id, its producer id)."""
    tid = transactional_id(scenario.prefix, p, slot)
    driven = drive_epochs(scenario.broker.bootstrap_servers, [tid], BEFORE_EDGE)[tid]
    return tid, driven.producer_id


def _handle(results: list[WriteResult] | None, p: int) -> Handle:
    assert results is not None
    [h] = [r.handle for r in results if r.handle is not None and r.task_partition == p]
    return h


def _handles(results: list[WriteResult]) -> list[Handle]:
    return [r.handle for r in results if r.handle is not None]


def _identified(control: ControlClient, h: Handle) -> None:
    """The handle names what the coordinator answered: Ongoing with its producer id and epoch
    (the writer already required librdkafka's `eos` statistics to say the same)."""
    desc = control.describe_transactions([h.transactional_id])[h.transactional_id]
    assert desc.state is TxnState.ONGOING and desc.holds(h.producer_id, h.epoch), (desc, h)


def _after_markers(control: ControlClient, tid: str, limit_s: float = 30) -> TransactionDescription:
    """The id's description once its transaction's markers are written (no Prepare* state)."""
    deadline = time.monotonic() + limit_s
    while True:
        desc = control.describe_transactions([tid])[tid]
        if desc.state not in (TxnState.PREPARE_ABORT, TxnState.PREPARE_COMMIT,
                              TxnState.PREPARE_EPOCH_FENCE) or time.monotonic() > deadline:
            return desc
        time.sleep(0.1)


def _log_says_committed(control: ControlClient, handles: list[Handle]) -> None:
    for h in handles:
        for s in h.spans:
            found = control.log_check(s.topic, s.partition, s.first_offset, h.producer_id,
                                      h.epoch, s.topic_id)
            assert found.committed, (h.transactional_id, h.producer_id, h.epoch, found.describe())


def _ok(out: dict[str, Any]) -> str:
    assert out.get("rc") == 0 and "ok" in out, out
    status: str = out["ok"]["status"]
    return status


@pytest.mark.all_variants
def test_prepare_and_commit_across_the_rotation(scenario: Scenario,
                                                control: ControlClient) -> None:
    _, pid = _drive_edge(scenario)
    first = scenario.write_real("0")
    assert first is not None
    h0 = _handle(first, 0)
    _identified(control, h0)
    assert _ok(scenario.drive("commit", "0", first)) == "committed"

    second = scenario.write_real("1")
    assert second is not None
    h1 = _handle(second, 0)
    _identified(control, h1)
    # The writer rotated the id before batch 0's init (a plain init would have given `pid` at
    # 32766, which no release could follow): both batches are on the new producer id.
    assert h0.producer_id != pid and releasable(h0.epoch), (pid, h0)
    assert h1.producer_id == h0.producer_id and h1.epoch == h0.epoch + 1, (h0, h1)
    assert _ok(scenario.drive("commit", "1", second)) == "committed"

    # The log check finds each transaction by its own producer id and epoch, either side of it.
    _log_says_committed(control, _handles(first) + _handles(second))
    # The old producer id's state on the partition stays, its transaction closed, beside the new.
    [state] = control.describe_producers([(s.topic, s.partition) for s in h0.spans]).values()
    open_from = {a.producer_id: a.current_txn_start_offset for a in state.producers}
    assert open_from.get(h0.producer_id) == -1 and open_from.get(h1.producer_id) == -1, state
    # Recovery's stranded check looks at both batches after the rotation: nothing held open.
    report = scenario.driver(control).recover()
    assert report.batches == [] and report.stranded.checked == len(_handles(first)) * 2
    assert not report.stranded.unreleased and report.stranded.released == (), report.summary()
    scenario.expect("0")
    scenario.expect("1")
    scenario.audit()


# Each case drives an id to the edge (~20 s) on each variant: two run in the default suite (the
# roll-forward after a crash between EndTxns, and the log's decision once the edge id was fenced
# and walked across its rotation), the other two with the slow ones.
@pytest.mark.all_variants
@pytest.mark.parametrize("case", [pytest.param("after_intent", marks=pytest.mark.slow),
                                  "after_endtxn_1",
                                  pytest.param("timeout", marks=pytest.mark.slow),
                                  "fenced"])
def test_crash_after_the_intent_at_the_edge(case: str, scenario: Scenario,
                                            control: ControlClient) -> None:
    """The driver SIGKILLed after the intent (or after the edge id's EndTxn, which goes first);
    with `timeout` the transactions then time out, with `fenced` the edge id is fenced (as a
    zombie's init_transactions would): the coordinator aborts the edge id's transaction, and the
    idle id is then walked across its producer-id rotation (the writer's guard keeps handles away
    from 32766, where the abort itself used to rotate it). Recovery must find the handle's own
    producer: roll forward, the log's commit, or the log's abort."""
    edge, pid = _drive_edge(scenario)
    timeout_ms = 6000 if case == "timeout" else None
    results = scenario.write_real("0", timeout_ms=timeout_ms)
    h0 = _handle(results, 0)
    _identified(control, h0)
    assert h0.producer_id != pid and releasable(h0.epoch), (pid, h0)
    assert results is not None
    point = "after_endtxn_1" if case == "after_endtxn_1" else "after_intent"
    assert scenario.drive("commit", "0", results, crash_at=f"coordinator.{point}",
                          margin_ms=200) == {"killed": True}
    if case == "timeout":
        wait_not_ongoing(control, _handles(results))
    elif case == "fenced":
        fenced = control.fence([edge])[edge]
        assert fenced.error is None, fenced
    if case in ("timeout", "fenced"):
        after = _after_markers(control, edge)
        assert after.state in (TxnState.EMPTY, TxnState.COMPLETE_ABORT), after
        assert not after.holds(h0.producer_id, h0.epoch), after
        # The writer rotated the id before its init, so the handle is far from the end and the
        # abort kept its producer id. Walk the idle id across its rotation now: recovery must
        # still find the handle's own producer (in the log) when the coordinator knows another.
        crossed = rotate(scenario.broker.bootstrap_servers, edge, h0.producer_id)
        assert crossed.producer_id not in (pid, h0.producer_id), crossed

    coord = scenario.driver(control)
    report = coord.recover()
    [batch] = report.batches
    by_partition = {h.task_partition: h for h in batch.handles}
    if case in ("after_intent", "after_endtxn_1"):
        assert batch.outcome is BatchOutcome.COMMITTED, report.summary()
    else:
        # The coordinator knows another producer id or epoch now: the log decides.
        assert by_partition[0].outcome == "aborted" and "log check" in by_partition[0].reason, \
            by_partition[0]
        expected = BatchOutcome.ABORTED if case == "timeout" else BatchOutcome.PARTIAL
        assert batch.outcome is expected, report.summary()

    if coord.is_committed("0"):
        skipped = [WriteResult(ResultKind.SKIPPED, "0", p, 0) for p in range(scenario.partitions)]
        assert coord.commit("0", skipped).status == "already_committed"
    else:
        rerun = scenario.write_real("0")
        h_rerun = _handle(rerun, 0)
        assert h_rerun.producer_id != pid, (pid, h_rerun)  # written after the rotation
        assert rerun is not None
        assert coord.commit("0", rerun).status in ("committed", "repaired")
    # And the next batch, on the rotated id.
    following = scenario.write_real("1")
    assert following is not None and _handle(following, 0).producer_id != pid
    assert coord.commit("1", following).status == "committed"
    scenario.expect("0")
    scenario.expect("1")
    scenario.audit()


@pytest.mark.all_variants
def test_a_committed_handle_at_the_edge_stays_releasable(scenario: Scenario,
                                                         control: ControlClient) -> None:
    """What section 8 relies on, on every variant (kafka3.9 cannot be made to drop markers): a
    committed transaction can still be ended by its own producer id, so a commit whose markers a
    broker dropped can be released. Releasing a commit whose markers landed writes markers only."""
    _, pid = _drive_edge(scenario)
    results = scenario.write_real("0")
    h0 = _handle(results, 0)
    assert h0.producer_id != pid and releasable(h0.epoch), (pid, h0)  # rotated before the init
    assert results is not None
    assert _ok(scenario.drive("commit", "0", results)) == "committed"
    released = control.release_stranded(h0.transactional_id,
                                        [(s.topic, s.partition) for s in h0.spans],
                                        producer_id=h0.producer_id)
    if not released.released:
        raise Unreleased(f"handle {h0.producer_id}/{h0.epoch}: {released}")
    scenario.expect("0")
    scenario.audit()


# A SIGKILL right after EndTxn catches the markers in flight only sometimes (they land 2-8 ms after
# the answer; how often it strands a commit depends on the machine's load, as for
# tests/broker/test_restart_mid_commit.py). That helper also sets min.insync.replicas=2 to hold the
# markers back, but Kafka 4.3.1 caps it at the replica count (Partition.effectiveMinIsr): on a
# one-replica topic it holds nothing back (measured: markers written at once), so it is not used.
MAX_STRAND_ATTEMPTS = 10


def _strand(scenario: Scenario, attempt: int, tid: str) -> Handle | None:
    """Pre-commit partition 0 with the real writer on a fresh id driven to the edge, record the
    intent (as commit() does), EndTxn, and SIGKILL the broker while the markers are on their way,
    as a driver killed after its EndTxn would leave it. The handle if the restarted broker dropped
    the markers, else None (then the batch committed normally; recovery records it)."""
    broker = scenario.broker
    batch = str(attempt)
    txn = scenario.txn(batch, 0, slot=attempt)
    assert txn["tid"] == tid
    h = _handle(scenario.write_real(batch, [txn]), 0)
    scenario.expected.setdefault(txn["topic"], set()).update(txn["ids"])
    topic, partition = txn["topic"], txn["partition"]
    with ControlClient(broker.config()) as control:
        coord = scenario.driver(control)
        coord.bind()
        Session(coord.log).append(Prepared(batch, (h,)))
        ended = control.end_txns([EndTxnRequest(h.transactional_id, h.producer_id, h.epoch,
                                                commit=True)], precheck=False)
        broker.kill()  # at once: the markers land within milliseconds of the answer
    assert ended[h.transactional_id].committed, ended
    broker.restart()
    if wait_until_stable(broker.config(), topic, 0.0):
        return None
    with ControlClient(broker.config()) as control:
        for _ in range(300):
            # In this order: CompleteCommit is written only after every marker was acknowledged,
            # and a marker moves the last stable offset at once, so CompleteCommit read before
            # an offset still below the high watermark proves a dropped marker.
            state = control.describe_transactions([h.transactional_id])[h.transactional_id]
            lso, hw = partition_offsets(broker.config(), topic)[partition]
            if lso >= hw:
                return None
            if state.state is TxnState.COMPLETE_COMMIT:
                return h
            time.sleep(0.2)
    pytest.fail(f"{h.transactional_id}: neither completed nor stranded after the restart")


@pytest.mark.slow  # a broker kill to strand the commit, then the release: minutes
@pytest.mark.timeout(2400)
@pytest.mark.only_variants("kafka4-tv2", "kafka4-tv0")
def test_a_stranded_commit_at_the_edge_is_released(scenario: Scenario) -> None:
    """Section 8 across the rotation: the writer's transaction at the edge is committed, a broker
    SIGKILL drops its markers, recovery must release it (same producer id, a new transaction on
    the stuck partition) and the audit must find every row once. (kafka3.9 does not drop them.)"""
    ids = [transactional_id(scenario.prefix, 0, slot) for slot in range(MAX_STRAND_ATTEMPTS)]
    for attempt in range(MAX_STRAND_ATTEMPTS):
        if attempt % 4 == 0:  # driven four at a time: one id's requests cannot overlap
            drive_epochs(scenario.broker.bootstrap_servers, ids[attempt:attempt + 4], BEFORE_EDGE)
        stuck = _strand(scenario, attempt, ids[attempt])
        with ControlClient(scenario.broker.config()) as control:
            # Before the writer's guard: "release failed at init_producer_id: PRODUCER_ID_CHANGED".
            try:
                report = scenario.driver(control).recover()
            except StrandedUnreleased as exc:
                held = "?" if stuck is None else f"{stuck.producer_id}/{stuck.epoch}"
                raise Unreleased(f"handle {held}: {exc}") from exc
        assert [b.outcome for b in report.batches] == [BatchOutcome.COMMITTED], report.summary()
        if stuck is None:
            assert not report.stranded.unreleased, report.summary()
            continue
        if report.stranded.released != (stuck.transactional_id,):
            raise Unreleased(f"handle {stuck.producer_id}/{stuck.epoch}: {report.summary()}")
        assert not report.stranded.unreleased, report.summary()
        scenario.audit()
        return
    # No attempt stranded a commit (a matter of timing and load): nothing was shown either way,
    # and a skip would pass for a result. Measured: 0 of 10 attempts at a load average of 15 on
    # two cores; stranded within the run at load 5 (kafka4-tv2, 94 s).
    pytest.fail(f"markers delivered in all {MAX_STRAND_ATTEMPTS} attempts: no commit stranded, "
                "so the release across the rotation was not tested; run it on a quieter machine")


@pytest.mark.all_variants
def test_an_idle_id_rotates_after_epoch_32766(scenario: Scenario,
                                              control: ControlClient) -> None:
    """The facts the tests above rest on, asserted on each variant: from epoch 32765 one
    InitProducerId answers 32766 with the same producer id, the next a new producer id at epoch 0;
    an EndTxn with the old producer id then answers INVALID_PRODUCER_ID_MAPPING."""
    tid, pid = _drive_edge(scenario, 3, 9)
    bootstrap = scenario.broker.bootstrap_servers
    at_edge = drive_epochs(bootstrap, [tid], EXHAUSTED)[tid]
    assert (at_edge.producer_id, at_edge.epoch, at_edge.calls) == (pid, EXHAUSTED, 1)
    rotated = rotate(bootstrap, tid, pid)
    assert rotated.producer_id != pid and rotated.epoch == 0 and rotated.calls == 1, rotated
    desc = control.describe_transactions([tid])[tid]
    assert desc.state is TxnState.EMPTY and desc.holds(rotated.producer_id, 0), desc
    late = control.end_txns([EndTxnRequest(tid, pid, EXHAUSTED, commit=True)])[tid]
    assert (late.kind, late.error) == (OutcomeKind.PRODUCER_ID_CHANGED,
                                       "INVALID_PRODUCER_ID_MAPPING"), late


@pytest.mark.slow
@pytest.mark.all_variants
@pytest.mark.parametrize("end", ["fence", "timeout"])
def test_the_coordinator_aborting_at_the_edge(end: str, scenario: Scenario,
                                              control: ControlClient) -> None:
    """A transaction open at 32766 (librdkafka, another process) fenced or timed out: where the
    id and the old producer end up, on each variant. Transaction version 2 bumps the epoch in the
    coordinator's abort and rotates there (CompleteAbort, new producer id, epoch 0; a fence's
    retried InitProducerId then answers epoch 1); version 0 aborts at 32767 (the fence's bump)
    and a fence's retry rotates (epoch 0). Either way the old producer's records are aborted in
    the log, and its own EndTxn can no longer commit them."""
    tid, pid = _drive_edge(scenario, 2, 9)
    topic = scenario.topics[0]
    opened = run_txn_producer(scenario.broker.bootstrap_servers, topic, "open", 3,
                              transactional_id=tid, partition=1, timeout_ms=3000,
                              id_prefix=f"{scenario.prefix}-edge-")
    assert (opened["producer_id"], opened["producer_epoch"]) == (pid, EXHAUSTED), opened
    [(first, _)] = opened["offsets"].values()
    tv2 = scenario.broker.transaction_version == 2
    if end == "fence":
        fenced = control.fence([tid])[tid]
        assert fenced.error is None and fenced.producer_id != pid, fenced
        assert fenced.epoch == (1 if tv2 else 0), fenced
        after = _after_markers(control, tid)
        assert after.state is TxnState.EMPTY and after.holds(fenced.producer_id, fenced.epoch)
    else:
        deadline = time.monotonic() + 30
        while control.describe_transactions([tid])[tid].state is TxnState.ONGOING:
            assert time.monotonic() < deadline, "not aborted by its timeout"
            time.sleep(0.1)
        after = _after_markers(control, tid)
        assert after.state is TxnState.COMPLETE_ABORT, after
        if tv2:
            assert after.producer_id != pid and after.producer_epoch == 0, after
        else:
            assert after.holds(pid, EXHAUSTED + 1), after
    late = control.end_txns([EndTxnRequest(tid, pid, EXHAUSTED, commit=True)])[tid]
    if end == "timeout" and not tv2:
        assert (late.kind, late.error) == (OutcomeKind.UNCONFIRMED, "PRODUCER_FENCED"), late
    else:
        assert (late.kind, late.error) == (OutcomeKind.PRODUCER_ID_CHANGED,
                                           "INVALID_PRODUCER_ID_MAPPING"), late
    found = control.log_check(topic, 1, first, pid, EXHAUSTED)
    assert found.outcome is LogOutcome.ABORTED, found.describe()
    # The abort marker carries the fence's epoch: the partition's state of the old producer id.
    [state] = control.describe_producers([(topic, 1)]).values()
    old = [a for a in state.producers if a.producer_id == pid]
    assert [(a.producer_epoch, a.current_txn_start_offset) for a in old] == [(EXHAUSTED + 1, -1)]
    scenario.audit()  # nothing of it visible


@pytest.mark.all_variants
def test_the_writer_rotates_only_near_the_end(scenario: Scenario,
                                              control: ControlClient) -> None:
    """The guard's boundary on the broker: an idle id whose init would stay within the headroom
    even on an Ongoing id (epoch HIGHEST_HANDLE_EPOCH - 3) keeps its producer id; one epoch later
    the writer rotates it before its init (twopc/protocol/epochs.py `rotate_before_init`)."""
    bootstrap = scenario.broker.bootstrap_servers
    keep, turn = transactional_id(scenario.prefix, 0, 0), transactional_id(scenario.prefix, 1, 0)
    with ThreadPoolExecutor(max_workers=2) as pool:
        kept_f = pool.submit(drive_one, bootstrap, keep, HIGHEST_HANDLE_EPOCH - 3)
        turned_f = pool.submit(drive_one, bootstrap, turn, HIGHEST_HANDLE_EPOCH - 2)
        kept, turned = kept_f.result(), turned_f.result()
    results = scenario.write_real("0", [scenario.txn("0", 0), scenario.txn("0", 1)])
    h_keep, h_turn = _handle(results, 0), _handle(results, 1)
    assert (h_keep.producer_id, h_keep.epoch) == (kept.producer_id, HIGHEST_HANDLE_EPOCH - 2)
    assert h_turn.producer_id != turned.producer_id and h_turn.epoch <= 1, (turned, h_turn)
    assert releasable(h_keep.epoch) and releasable(h_turn.epoch)
    assert results is not None
    assert _ok(scenario.drive("commit", "0", results)) == "committed"
    for h in (h_keep, h_turn):  # each stays releasable after its commit
        released = control.release_stranded(h.transactional_id,
                                             [(s.topic, s.partition) for s in h.spans],
                                             producer_id=h.producer_id)
        assert released.released and released.epoch == h.epoch + 1, released
    for p in (0, 1):  # the two partitions written
        scenario.expected.setdefault(scenario.topic_of(p), set()).update(scenario.ids("0", p))
    scenario.audit()
