"""The soak run (benchmarks/soak.py) works end to end on a short run: a few micro-batches, one
driver SIGKILL, one round of batch jobs; the audits pass and the report, JSON and plot are written.
Its numbers are reported, never asserted. The real run: docs/soak/report.md."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.soak import lifetimes, quarters
from twopc.broker.under_test import KafkaUnderTest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.integration
@pytest.mark.spark
@pytest.mark.slow  # minutes of Spark: off the default suite, kept within its 90-minute budget
def test_soak_short(broker: KafkaUnderTest, tmp_path: Path) -> None:
    path = os.pathsep.join([str(ROOT), str(ROOT / "testing"), os.environ.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.soak", "--batches", "12", "--kill-every", "6",
         "--broker-every", "0", "--jobs-first-s", "0", "--jobs-every-s", "100000",
         "--jobs-per-round", "1", "--job-rows", "20", "--rate", "40", "--sample-s", "1",
         "--live-heap-every-s", "5",
         "--max-minutes", "10", "--work", str(tmp_path / "work"), "--out", str(tmp_path / "out")],
        cwd=ROOT, env={**os.environ, "PYTHONPATH": path,
                       "TWOPC_BOOTSTRAP_SERVERS": broker.bootstrap_servers},
        capture_output=True, text=True, timeout=900, check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads((tmp_path / "out" / "soak.json").read_text())
    checks = result["checks"]
    assert checks["stream_audit_passed"] and checks["jobs_audit_passed"], checks
    assert checks["offsets_match"] and checks["drained"]
    assert checks["last_batch"] + 1 >= 12 and checks["jobs_committed"] == 1
    kinds = [e["kind"] for e in result["events"]]
    assert kinds.count("fault_driver_kill") == 1
    assert any(s["driver_jvm_rss_kib"] for s in result["samples"])
    assert any(s["driver_jvm_live_heap_kib"] for s in result["samples"])
    assert any(s["log_records"] for s in result["samples"])
    assert (tmp_path / "out" / "soak.png").stat().st_size > 0
    assert "PASS" in (tmp_path / "out" / "report.md").read_text()


def test_quarter_medians_and_lifetimes() -> None:
    samples = [{"t_s": float(i), "batches": i, "x": 100 + (i // 25) * 10} for i in range(100)]
    q = quarters(samples, "x")
    assert q["first_quarter_median"] == 100 and q["last_quarter_median"] == 130
    assert q["change_pct"] == 30.0 and q["max"] == 130
    events = [{"t_s": 50.0, "kind": "fault_driver_kill"}]
    first, second = lifetimes(samples, events, "x")
    assert (first["from_batch"], first["to_batch"]) == (1, 49)
    assert (second["from_batch"], second["to_batch"]) == (51, 99)
    assert second["late"] == 130
