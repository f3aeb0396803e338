"""The EndTxn benchmark runs end to end on a tiny size (timings are reported, never asserted)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.bench_endtxn import main, percentile, run, run_commit
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
    # batch pool's open ids (described: the whole pool was listed by the uncounted first round a
    # moment ago), the marker check, the durable records.
    for step in ("control.start_describe_transactions", "control.end_txns",
                 "control.start_open_among", "control.wait_stable", "log.append"):
        assert phases[step] >= 0, step
    assert phases["control.end_txns"] > 0 and phases["log.append"] > 0


def test_percentile() -> None:
    assert percentile([5.0, 1.0, 3.0], 0.5) == 3.0
    assert percentile([1.0, 2.0], 0.99) == 2.0


def test_bench_endtxn_curve_smoke(broker: KafkaUnderTest, tmp_path: Path) -> None:
    """--curve: both commits for each N in one run, a table and a plot."""
    assert main(["--bootstrap-servers", broker.bootstrap_servers, "--curve", "2,4", "--rounds",
                 "1", "--name", "curve", "--results-dir", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "curve.json").read_text())
    assert [pt["transactions"] for pt in report["curve"]] == [2, 4]
    for pt in report["curve"]:
        assert pt["coordinator_commit"]["audit"].startswith("PASS")
        assert pt["librdkafka_commit"]["p50_ms"] > 0
    assert (tmp_path / "curve.png").stat().st_size > 0


def test_reference_over_several_processes(broker: KafkaUnderTest,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Beyond librdkafka's per-process limit of clients the reference splits over processes."""
    import benchmarks.bench_endtxn as bench

    monkeypatch.setattr(bench, "PRODUCERS_PER_PROCESS", 2)
    assert bench.reference_commits(broker.bootstrap_servers, 5, 1)["p50_ms"] > 0
