"""The throughput benchmark runs end to end, as documented, with tiny counts (timings are reported,
never asserted): every mode produces a sane result and twopc's runs pass the audit."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.common import SparkKafkaUnavailable, spark_kafka_jars
from twopc.broker.under_test import KafkaUnderTest

pytestmark = [pytest.mark.integration, pytest.mark.spark]

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_throughput.py"
ROWS = 3000


def _run(broker: KafkaUnderTest, tmp_path: Path, modes: str, *extra: str,
         env: dict[str, str] | None = None) -> dict[str, object]:
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--rows", str(ROWS), "--runs", "2", "--partitions", "4",
         "--modes", modes, "--master", "local[2]", "--results-dir", str(tmp_path),
         "--name", "smoke", *extra],
        env={**os.environ, "TWOPC_BOOTSTRAP_SERVERS": broker.bootstrap_servers, **(env or {})},
        capture_output=True, text=True, timeout=900, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert (tmp_path / "smoke.png").stat().st_size > 0
    return json.loads((tmp_path / "smoke.json").read_text())  # type: ignore[no-any-return]


def test_python_modes_and_twopc_with_audit(broker: KafkaUnderTest, tmp_path: Path) -> None:
    # No warm-up runs here (timings are not asserted): five modes and the profile stay in budget.
    payload = _run(broker, tmp_path, "ceiling,py-noop,py-plain,twopc", "--profile",
                   "--variant", "l20:kafka.linger.ms=20", "--warmup-runs", "0")
    results = {r["mode"]: r for r in payload["results"]}  # type: ignore[attr-defined]
    assert list(results) == ["ceiling", "py-noop", "py-plain", "twopc", "twopc:l20"]
    for r in results.values():
        assert r["rows"] == ROWS and len(r["seconds"]) == 2
        assert all(s > 0 for s in r["seconds"]) and r["records_per_s"] > 0
        assert r["ratio_to_builtin"] is None  # no built-in sink in this run: no ratio invented
        assert len(r["cpu_s_runs"]) == 2 and len(r["load_average_before_runs"]) == 2
        assert all(run["total"] > 0 for run in r["cpu_s_runs"])
    # Every Spark mode's CPU includes the Spark JVM's; the ceiling runs in the benchmark's process.
    assert all(run["spark_jvm"] > 0 for m in ("py-noop", "py-plain", "twopc")
               for run in results[m]["cpu_s_runs"])
    assert all(run["benchmark_process"] > 0 for run in results["ceiling"]["cpu_s_runs"])
    assert results["twopc:l20"]["label"] == "kafka2pc with kafka.linger.ms=20"
    for mode in ("twopc", "twopc:l20"):
        assert len(results[mode]["audits"]) == 2
        assert all(a.startswith("PASS") and f"{ROWS} distinct ids" in a
                   for a in results[mode]["audits"])
    phases = payload["profile"]["phases"]  # type: ignore[index]
    assert sum(phases["task_rows"]) == ROWS and phases["commit_s"] > 0
    costs = payload["profile"]["cost_ns_per_record"]  # type: ignore[index]
    assert costs["task_all_threads"] >= costs["task_calling_thread"] > 0
    assert costs["checksum"] > 0 and costs["arrow_to_bytes"] > 0
    assert payload["machine"]["nproc"] >= 1  # type: ignore[index]
    assert payload["machine"]["commit"] not in ("", "unknown")  # type: ignore[index]
    assert payload["params"]["variants"] == {"l20": {"kafka.linger.ms": "20"}}  # type: ignore[index]


def test_builtin_sink_and_ratio(broker: KafkaUnderTest, tmp_path: Path) -> None:
    """With Spark's Kafka package (for pyspark 4.3.0, whose own package Maven Central does not have,
    the resolver falls back to 4.2.0): a ratio of exactly 1 for the sink itself. Without it (no
    Maven, no network): the built-in mode is left out, saying why, and no ratio is invented. Either
    way something real is checked; nothing is skipped."""
    try:
        spark_kafka_jars()
    except SparkKafkaUnavailable:
        proc = subprocess.run(
            [sys.executable, str(BENCH), "--rows", str(ROWS), "--runs", "1", "--partitions", "2",
             "--modes", "builtin,twopc", "--master", "local[2]", "--results-dir", str(tmp_path),
             "--name", "smoke"],
            env={**os.environ, "TWOPC_BOOTSTRAP_SERVERS": broker.bootstrap_servers},
            capture_output=True, text=True, timeout=900, check=False,
        )
        assert proc.returncode == 0, proc.stderr[-4000:]
        assert "built-in sink skipped:" in proc.stderr
        results = json.loads((tmp_path / "smoke.json").read_text())["results"]
        assert [r["mode"] for r in results] == ["twopc"]
        assert results[0]["ratio_to_builtin"] is None
        return
    payload = _run(broker, tmp_path, "builtin,twopc")
    results = {r["mode"]: r for r in payload["results"]}  # type: ignore[attr-defined]
    assert results["builtin"]["ratio_to_builtin"] == pytest.approx(1.0)
    assert results["twopc"]["ratio_to_builtin"] > 0


def test_unknown_mode_is_refused(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(BENCH), "--modes", "twopc,fast"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "unknown modes ['fast']" in proc.stderr
