"""The recovery benchmark runs end to end with tiny counts (timings are reported, never asserted):
each run rolls every pending transaction forward and passes the audit, or the benchmark fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from twopc.broker.under_test import KafkaUnderTest

pytestmark = pytest.mark.integration

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_recovery.py"


def test_recovery_benchmark_small(broker: KafkaUnderTest, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--counts", "1,3", "--repeats", "1", "--records", "2",
         "--workers", "2", "--threads", "2", "--results-dir", str(tmp_path), "--name", "smoke"],
        env={**os.environ, "TWOPC_BOOTSTRAP_SERVERS": broker.bootstrap_servers},
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    payload = json.loads((tmp_path / "smoke.json").read_text())
    rows = {r["n"]: r for r in payload["results"]}
    assert sorted(rows) == [1, 3]
    for n, r in rows.items():
        run = r["runs"][0]
        assert run["n"] == n and run["recover_s"] > 0 and run["with_connect_s"] >= run["recover_s"]
        assert run["audit"].startswith("PASS") and f"{2 * n} distinct ids" in run["audit"]
        assert run["driver_cpu_s"] > 0  # the broker's CPU is known only for a broker it started
    assert (tmp_path / "smoke.png").stat().st_size > 0


def test_summary_statistics() -> None:
    from benchmarks.bench_recovery import summarize

    raw = {10: [{"recover_s": 0.3, "with_connect_s": 0.4}, {"recover_s": 0.1, "with_connect_s": 0.2},
                {"recover_s": 0.2, "with_connect_s": 0.3}]}
    (row,) = summarize(raw)
    assert row["recover_s"] == {"median": 0.2, "min": 0.1, "max": 0.3, "n": 3}
    assert row["per_txn_ms"] == pytest.approx(20.0)
