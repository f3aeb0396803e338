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
