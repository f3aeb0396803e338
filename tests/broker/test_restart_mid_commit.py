"""A broker SIGKILLed while commit markers are pending can record the commit as complete without them.

What Kafka 4.3.1 does (single combined broker+controller, every partition with one replica):

1. After the SIGKILL the restarted controller replays its log, in which the killed incarnation is still
   registered and unfenced, so the restarted broker leads every partition again at once. The transaction
   coordinator loads `PrepareCommit` and queues the markers, but its own listener does not accept
   connections yet, so they cannot be sent.
2. The new incarnation's registration is refused (DUPLICATE_BROKER_REGISTRATION) until the old session
   expires (broker.session.timeout.ms, 9 s); then the controller fences the broker and every partition is
   left without a leader (leader -1).
3. The marker sender retries; `TransactionMarkerChannelManager.addTxnMarkersToBrokerQueue` finds no leader
   endpoint for the data partitions, logs "Couldn't find leader endpoint ... likely deleted already and
   hence can be skipped", drops them and appends `CompleteCommit` to the transaction log.
4. The reloaded coordinator sees `CompleteCommit`: nothing more is ever sent. The data partitions keep the
   producer's transaction open, and their last stable offset stays below the high watermark for good: no
   transaction timeout, retried EndTxn, restart or InitProducerId (fence) ends it.

Step 3 races with the coordinator's resignation, so a run loses the markers often, not always; the helper
below tries until it does. The kill lands mid-commit by timing: it follows the EndTxn answer at once, and
the markers take a few hundred milliseconds to land. (The helper also sets min.insync.replicas=2 on the
one-replica topic, meant to hold them back, but Kafka 4.3.1 caps it at the replica count,
Partition.effectiveMinIsr, so it holds nothing: measured, CompleteCommit 0.5 s after the answer.)

The cure twopc must apply: commit a new transaction on the same transactional id (same producer id, higher
epoch) that includes each stuck partition. Its COMMIT markers end the stranded transaction too, so the
records the application committed become visible, committed rather than aborted. (An abort of the stuck
partitions, e.g. `kafka-transactions.sh abort`, also moves the last stable offset, but hides data whose
commit was acknowledged.)
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

import pytest
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient
from twopc.control.outcomes import EndTxnRequest, TxnState
from twopc.ops.audit import audit_topic, partition_offsets, wait_until_stable

# Kafka 3.9 writes markers despite min.insync.replicas, so the kill cannot be placed mid-commit there.
pytestmark = [pytest.mark.integration, pytest.mark.only_variants("kafka4-tv2", "kafka4-tv0")]

RECORDS = 20
# Each attempt loses the markers with probability about 0.6 (measured 3 of 5 on kafka4-tv2), less on a
# heavily loaded machine (8 of 8 delivered once, under a load average above 10, on kafka4-tv0); fifteen
# attempts all delivering them would mean the broker no longer behaves as documented above.
MAX_ATTEMPTS = 15
SKIP_LOG_LINE = "Couldn't find leader endpoint for partitions"


@dataclass(frozen=True)
class StuckCommit:
    topic: str
    transactional_id: str
    producer_id: int
    epoch: int
    ids: list[str]
    first_offsets: dict[int, int]  # partition -> first offset of the stranded transaction there
    stuck: dict[int, tuple[int, int]]  # partition -> (last stable offset, high watermark), lso < hw
    broker_log: str


def _set_min_isr(broker: KafkaUnderTest, topic: str, value: int) -> None:
    admin = AdminClient(broker.config())
    entry = ConfigEntry("min.insync.replicas", str(value),
                        incremental_operation=AlterConfigOpType.SET)
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic, incremental_configs=[entry])
    for future in admin.incremental_alter_configs([resource]).values():
        future.result(30)


def _producer(broker: KafkaUnderTest, topic: str, tid: str, end: str, count: int, prefix: str,
              partition: int | None = None) -> dict[str, object]:
    args = [sys.executable, "-m", "twopc_testing.txn_producer", "--bootstrap",
            broker.bootstrap_servers, "--topic", topic, "--transactional-id", tid,
            "--count", str(count), "--end", end, "--id-prefix", prefix]
    if partition is not None:
        args += ["--partition", str(partition)]
    proc = subprocess.run(args, capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    out: dict[str, object] = json.loads(proc.stdout.strip().splitlines()[-1])
    return out


def _commit_then_crash(broker: KafkaUnderTest, make_topic: Callable[..., str],
                       attempt: int, tid: str | None = None) -> StuckCommit | None:
    """Commit with EndTxn while markers are held back, SIGKILL and restart the broker; return the
    stranded commit if the restarted coordinator dropped its markers, None if it wrote them."""
    topic = make_topic(partitions=2)
    tid = tid or f"mid-commit-{uuid.uuid4().hex[:8]}"
    prefix = f"a{attempt}-"
    opened = _producer(broker, topic, tid, "open", RECORDS, prefix)
    pid, epoch = int(str(opened["producer_id"])), int(str(opened["producer_epoch"]))
    spans = opened["offsets"]
    assert isinstance(spans, dict) and spans, opened
    first_offsets = {int(p): int(span[0]) for p, span in spans.items()}

    _set_min_isr(broker, topic, 2)
    with ControlClient(broker.config()) as control:
        outcome = control.end_txns([EndTxnRequest(tid, pid, epoch, commit=True)])[tid]
        assert outcome.committed, outcome
        # The precondition of the scenario: decided, markers not yet written.
        before = control.describe_transactions([tid])[tid].state
    if before is TxnState.COMPLETE_COMMIT:
        # The markers were not held back this time (not every attempt holds them; Kafka 3.9 never
        # does): this attempt cannot kill mid-commit, the caller tries again.
        _set_min_isr(broker, topic, 1)
        return None
    assert before is TxnState.PREPARE_COMMIT, before
    broker.kill()
    broker.restart()
    _set_min_isr(broker, topic, 1)

    with ControlClient(broker.config()) as control:
        if not wait_until_stable(broker.config(), topic, 0.0):
            # CompleteCommit is written only after every marker was acknowledged, and a written
            # marker moves the last stable offset at once: CompleteCommit read before an offset
            # below the high watermark proves a dropped marker, whatever the timing.
            for _ in range(300):
                state = control.describe_transactions([tid])[tid].state
                offsets = partition_offsets(broker.config(), topic)
                stuck = {p: o for p, o in offsets.items() if o[0] < o[1]}
                if not stuck:
                    return None
                if state is TxnState.COMPLETE_COMMIT:
                    log = broker.local.nodes[0].log_path.read_text(errors="replace") \
                        if broker.local else ""
                    return StuckCommit(topic, tid, pid, epoch,
                                       [f"{prefix}{i}" for i in range(RECORDS)], first_offsets,
                                       stuck, log)
                assert state is TxnState.PREPARE_COMMIT, state
                time.sleep(0.2)
            pytest.fail(f"{tid} neither completed nor stranded after restart: {offsets}")
    return None


def _stranded_commit(broker: KafkaUnderTest, make_topic: Callable[..., str],
                     transactional_id: str | None = None) -> StuckCommit:
    """A stranded commit (on `transactional_id`, else a fresh id); tries up to MAX_ATTEMPTS."""
    if not broker.can_kill:
        pytest.fail(f"the {broker.variant} Kafka cannot be killed by the tests; run this on ours")
    for attempt in range(MAX_ATTEMPTS):
        stuck = _commit_then_crash(broker, make_topic, attempt, transactional_id)
        if stuck is not None:
            return stuck
    pytest.fail(f"markers delivered in all {MAX_ATTEMPTS} restarts: the broker no longer drops "
                "markers for leaderless partitions; revisit this test and twopc's recovery")


def test_sigkill_mid_commit_can_complete_the_commit_without_its_markers(
    broker: KafkaUnderTest, make_topic: Callable[..., str]
) -> None:
    stuck = _stranded_commit(broker, make_topic)
    assert SKIP_LOG_LINE in stuck.broker_log and stuck.transactional_id in stuck.broker_log
    with ControlClient(broker.config()) as control:
        described = control.describe_transactions([stuck.transactional_id])[stuck.transactional_id]
        assert described.state is TxnState.COMPLETE_COMMIT and described.partitions == ()
        # The data partitions still hold the transaction open, from its first record.
        states = control.describe_producers([(stuck.topic, p) for p in sorted(stuck.stuck)])
        for state in states.values():
            open_txns = [p for p in state.producers if p.producer_id == stuck.producer_id]
            assert [p.current_txn_start_offset for p in open_txns] == \
                [stuck.first_offsets[state.partition]], state
        # Ending it again is a no-op: the coordinator answers "already committed", sends nothing.
        again = control.end_txns([EndTxnRequest(stuck.transactional_id, stuck.producer_id,
                                                stuck.epoch, commit=True)])
        assert again[stuck.transactional_id].committed, again
        # Fencing bumps the epoch of a complete transaction: nothing to abort, no marker either.
        fenced = control.fence([stuck.transactional_id])[stuck.transactional_id]
        assert fenced.error is None and fenced.producer_id == stuck.producer_id, fenced
    offsets = partition_offsets(broker.config(), stuck.topic)
    assert all(offsets[p] == lso_hw for p, lso_hw in stuck.stuck.items()), (offsets, stuck.stuck)
    report = audit_topic(broker.config(), stuck.topic, expected_ids=stuck.ids, settle_s=0)
    assert report.lagging and not report.passed, report.summary()


def test_a_new_commit_on_the_same_transactional_id_releases_the_stranded_commit(
    broker: KafkaUnderTest, make_topic: Callable[..., str]
) -> None:
    stuck = _stranded_commit(broker, make_topic)
    cure_ids: list[str] = []
    for partition in sorted(stuck.stuck):
        prefix = f"cure-{partition}-"
        _producer(broker, stuck.topic, stuck.transactional_id, "commit", 1, prefix, partition)
        cure_ids.append(f"{prefix}0")
    with ControlClient(broker.config()) as control:
        after = control.describe_transactions([stuck.transactional_id])[stuck.transactional_id]
    # Only the same producer id's markers end the stranded transaction.
    assert after.producer_id == stuck.producer_id and after.producer_epoch > stuck.epoch, after
    assert wait_until_stable(broker.config(), stuck.topic, 60), \
        partition_offsets(broker.config(), stuck.topic)
    # Committed, not aborted: every record of the stranded commit is readable, exactly once.
    report = audit_topic(broker.config(), stuck.topic, expected_ids=stuck.ids + cure_ids)
    assert report.passed, report.summary()


def test_release_stranded_ends_the_stranded_commit_with_markers_only(
    broker: KafkaUnderTest, make_topic: Callable[..., str]
) -> None:
    """The control client's cure: InitProducerId, AddPartitionsToTxn(stuck), EndTxn(commit); no
    data record, so the topic holds exactly the stranded commit's records, all visible."""
    stuck = _stranded_commit(broker, make_topic)
    before = partition_offsets(broker.config(), stuck.topic)
    parts = [(stuck.topic, p) for p in sorted(stuck.stuck)]
    with ControlClient(broker.config()) as control:
        lso = control.last_stable_offsets(parts)
        assert lso == {(stuck.topic, p): lso_hw[0] for p, lso_hw in stuck.stuck.items()}
        result = control.release_stranded(stuck.transactional_id, parts,
                                          producer_id=stuck.producer_id)
        assert result.released, result
        assert result.producer_id == stuck.producer_id and result.epoch > stuck.epoch, result
        after = control.describe_transactions([stuck.transactional_id])[stuck.transactional_id]
        assert after.holds(stuck.producer_id, result.epoch), after
    assert wait_until_stable(broker.config(), stuck.topic, 60), \
        partition_offsets(broker.config(), stuck.topic)
    offsets = partition_offsets(broker.config(), stuck.topic)
    for p in stuck.stuck:
        # One COMMIT marker per released partition, nothing else was appended.
        assert offsets[p][1] == before[p][1] + 1, (p, before, offsets)
    report = audit_topic(broker.config(), stuck.topic, expected_ids=stuck.ids)
    assert report.passed and report.records == RECORDS, report.summary()
