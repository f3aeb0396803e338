"""The trigger-interval benchmark runs end to end on a short run (timings are reported, never
asserted): records become visible, the commit phase is measured, nothing is seen twice."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.common import Spread, percentile
from twopc.broker.under_test import KafkaUnderTest

pytestmark = [pytest.mark.integration, pytest.mark.spark]

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_intervals.py"


def test_intervals_benchmark_short(broker: KafkaUnderTest, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--triggers", "1", "--duration", "14", "--warmup", "4",
         "--rate", "200", "--master", "local[2]", "--results-dir", str(tmp_path), "--name", "smoke"],
        env={**os.environ, "TWOPC_BOOTSTRAP_SERVERS": broker.bootstrap_servers},
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    (row,) = json.loads((tmp_path / "smoke.json").read_text())["results"]
    assert row["trigger_s"] == 1.0
    assert row["first_visible_s"] > 0  # the window counts from the first record seen
    assert row["records_in_window"] > 0 and row["throughput_rps"] > 0
    assert row["duplicates"] == 0
    assert row["commits"] > 0 and row["commit_ms_p50"] > 0
    # TwopcProgressListener saw the batches' figures, and there was nothing to recover.
    assert row["listener_batches"] > 0 and row["coordinator_commit_ms_p50"] > 0
    assert row["recoveries"] == 0
    assert row["e2e_ms_p50"] > 0 and row["e2e_ms_p99"] >= row["e2e_ms_p50"]
    assert 0 < row["oldest_age_fraction_max"] < 1
    assert (tmp_path / "smoke.png").stat().st_size > 0


def test_percentile_and_spread() -> None:
    assert percentile([5.0, 1.0, 3.0], 0.5) == 3.0
    assert percentile([1.0, 2.0], 0.99) == 2.0
    assert percentile(list(range(1, 101)), 0.99) == 99
    assert Spread.of([3.0, 1.0, 2.0, 10.0]).as_dict() == {"median": 2.5, "min": 1.0, "max": 10.0, "n": 4}
    with pytest.raises(ValueError):
        percentile([], 0.5)
