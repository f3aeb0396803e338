"""The log-growth benchmark runs end to end at 10 and 100 batches (timings are not checked): both
logs grow through the driver's own code, the purge keeps a query's log bounded, and a job log's
index grows by one entry per committed job."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks" / "bench_log_growth.py"


def test_log_growth_benchmark_small(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--batches", "10,100", "--samples", "3",
         "--dir", str(tmp_path / "logs"), "--results-dir", str(tmp_path), "--name", "smoke"],
        env={**os.environ, "PYTHONPATH": os.pathsep.join(
            [str(ROOT), str(ROOT / "testing"), os.environ.get("PYTHONPATH", "")])},
        capture_output=True, text=True, timeout=300, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    result = json.loads((tmp_path / "smoke.json").read_text())
    assert result["complete"] is True
    assert result["parameters"]["retain_batches"] == 10
    rows = {(r["kind"], r["batches"]): r for r in result["rows"]}
    # Each size is measured when reached; the 3 append samples are the next 3 batches.
    assert sorted(rows) == [("job", 10), ("job", 100), ("query", 10), ("query", 100)]
    for row in rows.values():
        for measure in ("append_prepared", "append_committed", "purge", "open_cold", "read_cold",
                        "open_warm"):
            assert row[measure]["n"] == 3 and row[measure]["median_ms"] > 0, measure
    # The purge keeps the last 10 batches (2 records each) and a little more: bounded.
    for kind in ("query", "job"):
        assert rows[(kind, 100)]["kept_records"] <= 2 * 10 + 4
        assert rows[(kind, 100)]["record_files"] == rows[(kind, 100)]["kept_records"]
    assert rows[("query", 100)]["files"] <= 30  # records, the binding, pointer and mark
    assert rows[("query", 100)]["job_hit"] is None
    # A job log: one index entry per committed job, and the binding.
    assert rows[("job", 100)]["index_files"] == 100 + 1
    assert rows[("job", 100)]["job_hit"]["n"] == 3
    assert (tmp_path / "smoke.png").stat().st_size > 0
    assert "| query | 100 |" in proc.stdout
