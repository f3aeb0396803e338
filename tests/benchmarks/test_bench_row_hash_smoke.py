"""The row-hash benchmark (issue 34's checksum lever) runs end to end with tiny counts; its figures
are reported, never asserted, but each must be a measurement (positive, one per round)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.spark]

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_row_hash.py"


def test_row_hash_benchmark_small(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--rows", "20000", "--rounds", "2", "--partitions", "2",
         "--results-dir", str(tmp_path), "--name", "smoke"],
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    results = json.loads((tmp_path / "smoke.json").read_text())["results"]
    for name in ("python_checksum_ns", "python_column_sum_ns", "spark_read_scan_ns",
                 "spark_xxhash64_scan_ns"):
        assert len(results[name]["runs"]) == 2 and results[name]["median"] > 0, name
    assert "the lever saves" in proc.stdout
