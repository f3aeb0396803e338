"""The foundation's claims about real Kafka transactions, on every broker variant.

These are the facts the whole design rests on (docs/design.md section 3), checked against the real broker
rather than assumed: a committed transaction is visible to read_committed consumers, an aborted one is
not, and one left open by a producer that died without close() holds back the last stable offset until
the coordinator times it out.
"""

from __future__ import annotations

import json
import time
import uuid

import pytest
from confluent_kafka import Producer
from twopc_testing.txn_producer import run_txn_producer

from twopc.broker.under_test import KafkaUnderTest
from twopc.ops.audit import audit_topic, partition_offsets, wait_until_stable

pytestmark = [pytest.mark.integration, pytest.mark.all_variants]


def _ids(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


def _run_producer(broker: KafkaUnderTest, topic: str, end: str, count: int, **kw: str) -> dict:
    return run_txn_producer(broker.bootstrap_servers, topic, end, count, **kw)


def test_committed_transaction_is_visible(broker: KafkaUnderTest, topic: str) -> None:
    _run_producer(broker, topic, "commit", 200, id_prefix="c-")
    report = audit_topic(broker.config(), topic, expected_ids=_ids("c-", 200))
    assert report.passed, report.summary()
    assert report.records == 200


def test_aborted_transaction_is_invisible(broker: KafkaUnderTest, topic: str) -> None:
    _run_producer(broker, topic, "abort", 100, id_prefix="a-")
    _run_producer(broker, topic, "commit", 10, id_prefix="c-")
    report = audit_topic(broker.config(), topic, expected_ids=_ids("c-", 10))
    assert report.passed, report.summary()
    assert not set(report.counts) & set(_ids("a-", 100)), "aborted records were visible"


def test_open_transaction_holds_back_the_last_stable_offset(
    broker: KafkaUnderTest, make_topic
) -> None:
    topic = make_topic(1)
    # A committed transaction first, so that the last stable offset has something to stop at.
    _run_producer(broker, topic, "commit", 5, id_prefix="c-", partition="0")
    ((lso_before, hw_before),) = partition_offsets(broker.config(), topic).values()
    assert lso_before == hw_before

    opened = _run_producer(
        broker, topic, "open", 50, id_prefix="o-", partition="0", timeout_ms="3000"
    )
    assert opened["producer_id"] is not None and opened["producer_id"] >= 0
    first_open_offset = opened["offsets"]["0"][0]

    ((lso, hw),) = partition_offsets(broker.config(), topic).values()
    assert lso == first_open_offset, "the open transaction's first offset must pin the LSO"
    assert hw > lso

    # Nothing of the open transaction is readable while it is open.
    report = audit_topic(broker.config(), topic, expected_ids=_ids("c-", 5), settle_s=0)
    assert not report.missing and not report.duplicates
    assert report.records == 5
    assert report.lagging, "the audit must flag a partition held back by an open transaction"

    # The coordinator aborts it once transaction.timeout.ms passes (the test broker sweeps every
    # second); then the last stable offset catches up with the high watermark and the data stays hidden.
    deadline = time.monotonic() + 60
    while True:
        ((lso, hw),) = partition_offsets(broker.config(), topic).values()
        if lso == hw or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert lso == hw, f"open transaction was never timed out (lso {lso}, hw {hw})"
    report = audit_topic(broker.config(), topic, expected_ids=_ids("c-", 5))
    assert report.passed, report.summary()
    assert not set(report.counts) & set(_ids("o-", 50))


def test_broker_kill_and_restart_keep_committed_data(broker: KafkaUnderTest, topic: str) -> None:
    if not broker.can_kill:
        pytest.fail(f"the {broker.variant} Kafka cannot be killed by the tests; run this on ours")
    _run_producer(broker, topic, "commit", 20, id_prefix="k-")
    # Kill only once the markers are written: a kill while they are in flight is a different scenario
    # (see tests/broker/test_restart_mid_commit.py).
    assert wait_until_stable(broker.config(), topic, 30)
    broker.kill()
    broker.restart()
    # The restarted coordinator finishes writing the commit markers once it has reloaded its log.
    if not wait_until_stable(broker.config(), topic, 60):
        offsets = partition_offsets(broker.config(), topic)
        log = broker.local.nodes[0].log_tail(6000) if broker.local else ""
        pytest.fail(f"commit markers never written after restart: {offsets}\n{log}")
    report = audit_topic(broker.config(), topic, expected_ids=_ids("k-", 20))
    assert report.passed, report.summary()


def test_in_process_producer_reports_eos_identity(broker: KafkaUnderTest, topic: str) -> None:
    """librdkafka's statistics carry the producer id and epoch the core relies on (docs/design.md 3)."""
    seen: dict = {}
    p = Producer(
        {
            **broker.config(),
            "transactional.id": f"eos-{uuid.uuid4().hex[:6]}",
            "statistics.interval.ms": 100,
            "stats_cb": lambda raw: seen.update(json.loads(raw).get("eos", {})),
        }
    )
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"x")
    p.flush(30)
    deadline = time.monotonic() + 5
    # A sample taken before init_transactions finished says -1: wait for one taken after.
    while seen.get("producer_id", -1) < 0 and time.monotonic() < deadline:
        p.poll(0.1)
    assert seen.get("producer_id", -1) >= 0
    assert seen.get("producer_epoch", -1) >= 0
    p.commit_transaction(30)
