"""The copy-forward benchmark runs end to end with tiny counts (timings are reported, never
asserted): both repairs commit and pass the audit, or the benchmark fails."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from twopc.broker.under_test import KafkaUnderTest

pytestmark = pytest.mark.integration

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_copy.py"


def test_copy_benchmark_small(broker: KafkaUnderTest, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--transactions", "3", "--records", "4", "--partitions", "2",
         "--results-dir", str(tmp_path), "--name", "smoke"],
        env={**os.environ, "TWOPC_BOOTSTRAP_SERVERS": broker.bootstrap_servers},
        capture_output=True, text=True, timeout=600, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "smoke.json").read_text())["result"]
    assert result["transactions"] == 3 and result["records"] == 12
    for mode in ("copy", "rerun"):
        assert result[mode]["records_per_s"] > 0
        assert result[mode]["audit"].startswith("PASS"), result[mode]
