"""The EndTxn benchmark runs end to end on a tiny size (timings are reported, never asserted)."""

from __future__ import annotations

import pytest

from benchmarks.bench_endtxn import percentile, run, run_commit
from twopc.broker.under_test import KafkaUnderTest

pytestmark = pytest.mark.integration


def test_bench_endtxn_smoke(broker: KafkaUnderTest) -> None:
    report = run(broker.bootstrap_servers, n=4, rounds=1)
    assert report["transactions"] == 4
    for key in ("endtxn_only", "with_precheck", "librdkafka_commit"):
        assert report[key]["p50_ms"] > 0


def test_bench_coordinator_commit_smoke(broker: KafkaUnderTest) -> None:
    """The driver's whole commit() of a few transactions, timed by step, its records audited."""
    report = run_commit(broker.bootstrap_servers, n=3, rounds=2, log=lambda _line: None)
    assert len(report["runs_ms"]) == 2 and report["p50_ms"] > 0
    assert report["audit"].startswith("PASS")
    phases = report["phases_ms"]
    # The steps every commit takes: guard 3's DescribeTransactions (sent early), the EndTxns, the
    # listing of the pool's open ids, the marker check, the durable records.
    for step in ("control.start_describe_transactions", "control.end_txns",
                 "control.start_list_transactions", "control.wait_stable", "log.append"):
        assert phases[step] >= 0, step
    assert phases["control.end_txns"] > 0 and phases["log.append"] > 0


def test_percentile() -> None:
    assert percentile([5.0, 1.0, 3.0], 0.5) == 3.0
    assert percentile([1.0, 2.0], 0.99) == 2.0
