"""`twopc verify` against real topics: a clean one passes; duplicates and open transactions fail it."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from twopc_testing.txn_producer import run_txn_producer

from twopc.broker.under_test import KafkaUnderTest

pytestmark = pytest.mark.integration


def _produce(broker: KafkaUnderTest, topic: str, end: str, count: int, prefix: str) -> None:
    run_txn_producer(broker.bootstrap_servers, topic, end, count, id_prefix=prefix)


def _verify(broker: KafkaUnderTest, topic: str, *extra: str) -> tuple[int, dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "twopc.cli", "verify", "--bootstrap-servers", broker.bootstrap_servers,
         "--topic", topic, "--json", *extra],
        capture_output=True, text=True, timeout=300, check=False,
    )
    return proc.returncode, json.loads(proc.stdout)


def test_clean_topic_passes(broker: KafkaUnderTest, topic: str) -> None:
    _produce(broker, topic, "commit", 50, "r-")
    code, report = _verify(broker, topic, "--expect", "50", "--id-format", "r-{}")
    assert code == 0, report
    assert report["passed"] and report["records"] == 50 and report["missing_count"] == 0


def test_duplicates_and_missing_fail(broker: KafkaUnderTest, topic: str) -> None:
    _produce(broker, topic, "commit", 20, "r-")
    _produce(broker, topic, "commit", 20, "r-")  # an at-least-once re-run
    code, report = _verify(broker, topic, "--expect", "25", "--id-format", "r-{}")
    assert code == 1
    assert report["duplicate_count"] == 20
    assert report["missing_count"] == 5


def test_open_transaction_fails(broker: KafkaUnderTest, topic: str) -> None:
    _produce(broker, topic, "commit", 10, "r-")
    _produce(broker, topic, "open", 10, "o-")
    # The open transaction's timeout is a minute: the settle wait ends first, and the audit fails.
    code, report = _verify(broker, topic, "--settle", "2")
    assert code == 1
    assert report["lagging_partitions"], report
    assert report["duplicate_count"] == 0


def test_bad_id_spec_is_a_usage_error(broker: KafkaUnderTest, topic: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "twopc.cli", "verify", "--bootstrap-servers", broker.bootstrap_servers,
         "--topic", topic, "--id", "nonsense"],
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert proc.returncode == 2
    assert "--id must be value, key or header:NAME" in proc.stderr


def test_a_topic_whose_log_start_moved_is_audited_from_there(broker: KafkaUnderTest,
                                                             topic: str) -> None:
    """Retention (here delete_records) moves a partition's log start past 0: the audit reads from
    the log start (it raised "Offset out of range" before, on any topic retention had reached)."""
    from confluent_kafka import TopicPartition
    from confluent_kafka.admin import AdminClient

    run_txn_producer(broker.bootstrap_servers, topic, "commit", 40, id_prefix="r-", partition=0)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap_servers})
    for f in admin.delete_records([TopicPartition(topic, 0, 3)]).values():
        f.result(30)
    code, report = _verify(broker, topic, "--expect", "40", "--id-format", "r-{}")
    assert code == 1, report  # r-0 to r-2 are gone: missing, not a crash
    assert report["records"] == 37 and report["missing_count"] == 3, report
