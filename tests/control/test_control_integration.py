"""The control client against a real broker: finishing transactions that another process opened.

Each producer runs in its own process and leaves with os._exit after flush (no close(), no EndTxn).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Iterator

import pytest
from confluent_kafka import TopicPartition
from confluent_kafka.admin import AdminClient

from tests.control.helpers import OpenTxn, open_txn, read_committed, settled_log_check
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import (
    ControlClient,
    EndTxnRequest,
    KafkaApiError,
    LogCheckRequest,
    LogOutcome,
    OutcomeKind,
    TxnState,
    UnknownReason,
)
from twopc.ops.audit import wait_until_stable

pytestmark = pytest.mark.integration

COUNT = 20
TOPIC_CODEC = {"none": "uncompressed", "lz4": "lz4", "zstd": "zstd"}


@pytest.fixture
def client(broker: KafkaUnderTest) -> Iterator[ControlClient]:
    with ControlClient(broker.config()) as c:
        yield c


def end(client: ControlClient, txn: OpenTxn, commit: bool) -> OutcomeKind:
    req = EndTxnRequest(txn.transactional_id, txn.producer_id, txn.epoch, commit)
    return client.end_txns([req])[txn.transactional_id].kind


@pytest.mark.all_variants
@pytest.mark.parametrize("compression", ["none", "lz4", "zstd"])
def test_commit_of_a_dropped_producer_is_visible_and_logged(
        broker: KafkaUnderTest, make_topic: Callable[..., str], client: ControlClient,
        compression: str) -> None:
    # librdkafka sends tiny batches uncompressed when that is smaller; the topic's own
    # compression.type makes the broker store them compressed whatever the producer sent.
    topic = make_topic(partitions=2, config={"compression.type": TOPIC_CODEC[compression]})
    txn = open_txn(broker.bootstrap_servers, topic, count=COUNT, compression=compression)
    assert end(client, txn, commit=True) is OutcomeKind.COMMITTED
    assert sorted(read_committed(broker.bootstrap_servers, topic)) == sorted(
        f"r-{i}" for i in range(COUNT))
    check = settled_log_check(client, topic, txn)
    assert check.outcome is LogOutcome.COMMITTED, check.describe()
    assert check.probe is not None and check.probe.first_batch is not None
    assert check.probe.first_batch.compression == {"none": 0, "lz4": 3, "zstd": 4}[compression]


@pytest.mark.all_variants
@pytest.mark.parametrize("compression", ["none", "zstd"])
def test_abort_of_a_dropped_producer_hides_everything(
        broker: KafkaUnderTest, make_topic: Callable[..., str], client: ControlClient,
        compression: str) -> None:
    topic = make_topic(partitions=2, config={"compression.type": TOPIC_CODEC[compression]})
    txn = open_txn(broker.bootstrap_servers, topic, count=COUNT, compression=compression)
    assert end(client, txn, commit=False) is OutcomeKind.ABORTED
    assert read_committed(broker.bootstrap_servers, topic) == []
    check = settled_log_check(client, topic, txn)
    assert check.outcome is LogOutcome.ABORTED, check.describe()
    assert check.probe is not None and check.probe.first_batch is not None
    assert check.probe.first_batch.compression == {"none": 0, "zstd": 4}[compression]


@pytest.mark.all_variants
def test_commit_twice_is_already_committed(broker: KafkaUnderTest, topic: str,
                                           client: ControlClient) -> None:
    txn = open_txn(broker.bootstrap_servers, topic)
    assert end(client, txn, commit=True) is OutcomeKind.COMMITTED
    assert end(client, txn, commit=True) is OutcomeKind.ALREADY_COMMITTED


@pytest.mark.all_variants
def test_commit_after_timeout_is_never_success_and_the_log_says_aborted(
        broker: KafkaUnderTest, topic: str, client: ControlClient) -> None:
    txn = open_txn(broker.bootstrap_servers, topic, timeout_ms=2000)
    # Wait (bounded) for the coordinator's abort sweep to end the transaction.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        d = client.describe_transactions([txn.transactional_id])[txn.transactional_id]
        if (d.state is not TxnState.ONGOING and not d.state.aborting) or (
                d.state is TxnState.COMPLETE_ABORT):
            break
        time.sleep(0.25)
    assert d.state is not TxnState.ONGOING, "the broker never aborted the timed-out transaction"
    out = client.end_txns([EndTxnRequest(txn.transactional_id, txn.producer_id, txn.epoch,
                                         True)])[txn.transactional_id]
    assert not out.committed, out
    assert out.kind in (OutcomeKind.UNCONFIRMED, OutcomeKind.ALREADY_ABORTED), out
    check = settled_log_check(client, topic, txn)
    assert check.outcome is LogOutcome.ABORTED, check.describe()
    assert read_committed(broker.bootstrap_servers, topic) == []


@pytest.mark.all_variants
def test_commit_after_fence_is_unconfirmed_and_the_log_says_aborted(
        broker: KafkaUnderTest, topic: str, client: ControlClient) -> None:
    txn = open_txn(broker.bootstrap_servers, topic)
    fenced = client.fence([txn.transactional_id])[txn.transactional_id]
    assert fenced.fenced and (fenced.producer_id, fenced.epoch) != (txn.producer_id, txn.epoch)
    out = client.end_txns([EndTxnRequest(txn.transactional_id, txn.producer_id, txn.epoch,
                                         True)])[txn.transactional_id]
    assert out.kind is OutcomeKind.UNCONFIRMED and out.error in (
        "PRODUCER_FENCED", "INVALID_PRODUCER_EPOCH"), out
    check = settled_log_check(client, topic, txn)
    assert check.outcome is LogOutcome.ABORTED, check.describe()


@pytest.mark.all_variants
def test_committed_then_fenced_is_committed_in_the_log(
        broker: KafkaUnderTest, topic: str, client: ControlClient) -> None:
    txn = open_txn(broker.bootstrap_servers, topic)
    assert end(client, txn, commit=True) is OutcomeKind.COMMITTED
    assert client.fence([txn.transactional_id])[txn.transactional_id].fenced
    # The coordinator no longer knows this transaction; a late commit cannot be confirmed...
    late = client.end_txns([EndTxnRequest(txn.transactional_id, txn.producer_id, txn.epoch,
                                          True)])[txn.transactional_id]
    assert late.kind is OutcomeKind.UNCONFIRMED, late
    # ...but the log still knows.
    check = settled_log_check(client, topic, txn)
    assert check.outcome is LogOutcome.COMMITTED, check.describe()


def test_deleted_records_make_the_log_check_unknown_with_the_reason(
        broker: KafkaUnderTest, topic: str, client: ControlClient) -> None:
    txn = open_txn(broker.bootstrap_servers, topic)
    assert end(client, txn, commit=True) is OutcomeKind.COMMITTED
    partition, _ = txn.first
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    beyond = txn.offsets[partition][1] + 1
    futures = admin.delete_records([TopicPartition(topic, partition, beyond)])
    for f in futures.values():
        f.result(30)
    check = settled_log_check(client, topic, txn)
    assert check.outcome is LogOutcome.UNKNOWN and check.reason is UnknownReason.BELOW_LOG_START
    assert "log start" in check.describe()


def test_another_producer_or_topic_id_at_the_offset_is_unknown(
        broker: KafkaUnderTest, topic: str, client: ControlClient) -> None:
    txn = open_txn(broker.bootstrap_servers, topic)
    assert end(client, txn, commit=True) is OutcomeKind.COMMITTED
    # EndTxn answers before the markers are written; the log check is for decided offsets.
    assert wait_until_stable(broker.config(), topic, 30)
    partition, first = txn.first
    other = client.log_check(topic, partition, first, txn.producer_id + 1000, txn.epoch)
    assert other.reason is UnknownReason.OTHER_PRODUCER
    wrong_id = "00000000-0000-0000-0000-000000000001"
    moved = client.log_check(topic, partition, first, txn.producer_id, txn.epoch, wrong_id)
    assert moved.reason is UnknownReason.TOPIC_CHANGED
    real_id = client.topic_ids([topic])[topic]
    same = client.log_check(topic, partition, first, txn.producer_id, txn.epoch, real_id)
    assert same.outcome is LogOutcome.COMMITTED, same.describe()


def test_log_checks_of_many_spans_read_the_topic_ids_once(
        broker: KafkaUnderTest, topic: str, client: ControlClient) -> None:
    """A recovery checks every span of thousands of transactions: the recorded topic ids are
    compared with one Metadata answer for all of them, and each span still gets its own verdict
    (a wrong recorded id is TOPIC_CHANGED, the right one is read in the log)."""
    txns = [open_txn(broker.bootstrap_servers, topic) for _ in range(3)]
    for txn in txns:
        assert end(client, txn, commit=True) is OutcomeKind.COMMITTED
    assert wait_until_stable(broker.config(), topic, 30)
    real_id = client.topic_ids([topic])[topic]
    wrong_id = "00000000-0000-0000-0000-000000000001"
    checks = [LogCheckRequest(topic, p, first, txn.producer_id, txn.epoch, tid)
              for txn in txns for p, (first, _) in txn.offsets.items()
              for tid in (real_id, wrong_id)]
    cluster = client._cluster
    asked: list[object] = []
    plain = cluster.refresh_metadata

    async def counted(topics: object = ()) -> object:
        asked.append(topics)
        return await plain(topics)  # type: ignore[arg-type]

    cluster.refresh_metadata = counted  # type: ignore[method-assign,assignment]
    try:
        results = client.log_checks(checks)
    finally:
        cluster.refresh_metadata = plain  # type: ignore[method-assign]
    assert asked == [[topic]]
    for check, result in zip(checks, results, strict=True):
        if check.topic_id == wrong_id:
            assert result.reason is UnknownReason.TOPIC_CHANGED, result.describe()
            assert wrong_id in result.describe() and real_id in result.describe()
        else:
            assert result.outcome is LogOutcome.COMMITTED, result.describe()


@pytest.mark.all_variants
def test_describe_matches_the_producer_and_list_finds_by_prefix(
        broker: KafkaUnderTest, make_topic: Callable[..., str], client: ControlClient) -> None:
    topic = make_topic(partitions=2)
    before_ms = int(time.time() * 1000)
    mine = [open_txn(broker.bootstrap_servers, topic, timeout_ms=45000,
                     tid=f"lst-a-{i}-{before_ms}") for i in range(2)]
    other = open_txn(broker.bootstrap_servers, topic, tid=f"lst-b-{before_ms}")
    try:
        d = client.describe_transactions([t.transactional_id for t in mine])
        for txn in mine:
            got = d[txn.transactional_id]
            assert got.state is TxnState.ONGOING
            assert (got.producer_id, got.producer_epoch) == (txn.producer_id, txn.epoch)
            assert got.timeout_ms == 45000
            assert set(got.partitions) == {(topic, p) for p in txn.offsets}
            # The coordinator's clock and ours are the same machine's here.
            assert before_ms - 5000 <= got.start_ms <= int(time.time() * 1000) + 5000
        listed = client.list_transactions(prefix="lst-a-")
        ids = {t.transactional_id for t in listed}
        assert {t.transactional_id for t in mine} <= ids
        assert other.transactional_id not in ids
        assert all(i.startswith("lst-a-") for i in ids)
        ongoing = client.list_transactions(prefix="lst-", states=[TxnState.ONGOING])
        assert other.transactional_id in {t.transactional_id for t in ongoing}
        # By producer id, without a prefix: who a partition's open transaction belongs to.
        by_pid = client.list_transactions(producer_ids=[mine[1].producer_id])
        assert [(t.transactional_id, t.producer_id) for t in by_pid] == [
            (mine[1].transactional_id, mine[1].producer_id)]
        unknown = client.describe_transactions(["never-used-id"])["never-used-id"]
        assert unknown.state is TxnState.UNKNOWN_ID
    finally:
        client.fence([t.transactional_id for t in [*mine, other]])


@pytest.mark.all_variants
def test_open_among_names_only_the_ongoing_ids_of_a_large_set(
        broker: KafkaUnderTest, make_topic: Callable[..., str], client: ControlClient) -> None:
    """The commit's orphan sweep asks it for a batch's whole pool (docs/design.md section 2, step
    4): hundreds of ids, most of them unknown to the coordinator, some ended, a few open. Every
    open one is named (with its partitions in the answer: the decoder's slow path), nothing else,
    in the order asked, and it agrees with describe_transactions id by id."""
    topic = make_topic(partitions=2)
    tag = uuid.uuid4().hex[:8]
    opened = [open_txn(broker.bootstrap_servers, topic, tid=f"among-{tag}-{i}") for i in (3, 250)]
    ended = open_txn(broker.bootstrap_servers, topic, tid=f"among-{tag}-7")
    assert end(client, ended, commit=True) is OutcomeKind.COMMITTED
    try:
        ids = [f"among-{tag}-{i}" for i in range(513)]
        assert client.start_open_among(ids).result() == [t.transactional_id for t in opened]
        described = client.describe_transactions(ids)
        assert [t for t in ids if described[t].state is TxnState.ONGOING] == [
            t.transactional_id for t in opened]
        assert described[ended.transactional_id].state is not TxnState.ONGOING
        assert described[ids[0]].state is TxnState.UNKNOWN_ID
    finally:
        client.fence([t.transactional_id for t in opened])


def test_unknown_id_and_changed_producer_id_are_typed(
        broker: KafkaUnderTest, topic: str, client: ControlClient) -> None:
    kind = client.end_txns([EndTxnRequest("never-used-2", 12345, 0, True)])["never-used-2"].kind
    assert kind is OutcomeKind.UNKNOWN_ID
    txn = open_txn(broker.bootstrap_servers, topic)
    try:
        wrong = EndTxnRequest(txn.transactional_id, txn.producer_id + 777, txn.epoch, True)
        out = client.end_txns([wrong])[txn.transactional_id]
        assert out.kind is OutcomeKind.PRODUCER_ID_CHANGED, out
    finally:
        client.fence([txn.transactional_id])


def test_many_commits_in_parallel(broker: KafkaUnderTest, topic: str,
                                  client: ControlClient) -> None:
    txns = [open_txn(broker.bootstrap_servers, topic, count=3, id_prefix=f"m{i}-")
            for i in range(8)]
    outcomes = client.end_txns([EndTxnRequest(t.transactional_id, t.producer_id, t.epoch, True)
                                for t in txns])
    assert {o.kind for o in outcomes.values()} == {OutcomeKind.COMMITTED}
    assert len(read_committed(broker.bootstrap_servers, topic)) == 8 * 3


@pytest.mark.all_variants
def test_wait_stable_answers_once_the_markers_landed_and_bounds_its_wait(
        broker: KafkaUnderTest, topic: str, client: ControlClient) -> None:
    txn = open_txn(broker.bootstrap_servers, topic, count=3)
    past = {(topic, p): first for p, (first, _) in txn.offsets.items()}
    try:
        # Held by the open transaction: what the client last saw, after the window it was given.
        held = client.wait_stable(past, 0.05)
        assert all(held[tp] <= first for tp, first in past.items()), held
    finally:
        assert end(client, txn, commit=True) is OutcomeKind.COMMITTED
    # Asked right after the EndTxn answer, while the markers may still be on their way.
    landed = client.wait_stable(past, 30.0)
    assert all(landed[tp] > first for tp, first in past.items()), landed


def test_the_reader_does_not_stop_before_records_still_in_a_transaction(
        broker: KafkaUnderTest, topic: str, client: ControlClient) -> None:
    # The tests' reader must not count a topic as read while a transaction in it is open: after a
    # commit the markers may land seconds later, and stopping at the last stable offset would miss
    # committed records (seen in CI: 18 of 24 read, every EndTxn answered COMMITTED).
    txn = open_txn(broker.bootstrap_servers, topic, count=3)
    try:
        with pytest.raises(AssertionError, match="never reached their end"):
            read_committed(broker.bootstrap_servers, topic, timeout_s=3)
    finally:
        assert end(client, txn, commit=False) is OutcomeKind.ABORTED


def test_coordinators_and_leaders_name_the_brokers_clients_use(broker: KafkaUnderTest, topic: str,
                                                               client: ControlClient) -> None:
    """The node ids librdkafka's own metadata names: the leader of each partition, and (for an id
    with a transaction) the coordinator DescribeTransactions was answered by."""
    txn = open_txn(broker.bootstrap_servers, topic)
    brokers = set(AdminClient(broker.config()).list_topics(timeout=10).brokers)
    coordinators = client.coordinators([txn.transactional_id, "never-used-id"])
    assert set(coordinators.values()) <= brokers
    described = client.describe_transactions([txn.transactional_id])[txn.transactional_id]
    assert coordinators[txn.transactional_id] == described.coordinator_id
    md = AdminClient(broker.config()).list_topics(topic, timeout=10).topics[topic]
    assert client.leaders([(topic, p) for p in md.partitions]) == {
        (topic, p): m.leader for p, m in md.partitions.items()}
    with pytest.raises(KafkaApiError, match="UNKNOWN_TOPIC_OR_PARTITION"):
        client.leaders([(topic, 99)])
    assert end(client, txn, False) is OutcomeKind.ABORTED


def test_requests_started_together_on_a_new_client_leave_no_connection_behind(
        broker: KafkaUnderTest) -> None:
    # Each of them looks for a broker before any is known: each may open a bootstrap connection.
    # close() must close every connection the client opened (no reader left pending, no socket).
    client = ControlClient(broker.config())
    loop = client._loop
    try:
        futures = [client.start_describe_transactions([f"no-such-id-{i}"]) for i in range(8)]
        for f in futures:
            f.result(30)
    finally:
        client.close()
    left = [t for t in asyncio.all_tasks(loop) if not t.done()]
    assert not left, f"tasks still pending after close(): {left}"


def test_high_watermarks_against_last_stable_offsets(
        broker: KafkaUnderTest, make_topic: Callable[..., str], client: ControlClient) -> None:
    topic = make_topic(partitions=2)
    assert client.topic_partitions([topic]) == {topic: [0, 1]}
    with pytest.raises(KafkaApiError, match="UNKNOWN_TOPIC_OR_PARTITION"):
        client.topic_partitions([f"{topic}-never-made"])
    txn = open_txn(broker.bootstrap_servers, topic, count=COUNT)
    try:
        parts = [(topic, 0), (topic, 1)]
        hw, lso = client.high_watermarks(parts), client.last_stable_offsets(parts)
        for p, (first, last) in txn.offsets.items():
            assert lso[(topic, p)] == first and hw[(topic, p)] == last + 1
        assert sum(hw[tp] for tp in parts) == COUNT
    finally:
        client.fence([txn.transactional_id])
    assert wait_until_stable(broker.config(), topic, 30)
    parts = [(topic, 0), (topic, 1)]
    assert client.high_watermarks(parts) == client.last_stable_offsets(parts)
