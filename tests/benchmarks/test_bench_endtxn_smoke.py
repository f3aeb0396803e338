"""The EndTxn benchmark runs end to end on a tiny size (timings are reported, never asserted)."""

from __future__ import annotations

import pytest

from benchmarks.bench_endtxn import percentile, run
from twopc.testing.brokers import KafkaUnderTest

pytestmark = pytest.mark.integration


def test_bench_endtxn_smoke(broker: KafkaUnderTest) -> None:
    report = run(broker.bootstrap_servers, n=4, rounds=1)
    assert report["transactions"] == 4
    for key in ("endtxn_only", "with_precheck"):
        assert report[key]["p50_ms"] > 0


def test_percentile() -> None:
    assert percentile([5.0, 1.0, 3.0], 0.5) == 3.0
    assert percentile([1.0, 2.0], 0.99) == 2.0
