"""The cold-start benchmark runs end to end with tiny counts (timings are reported, never asserted):
every mode's trial runs its two micro-batches in a fresh process, twopc's topic passes the audit,
and the results carry the split of each micro-batch and the import timings."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.bench_cold_start import SEGMENTS, split_batch, trial_order
from benchmarks.common import SparkKafkaUnavailable, spark_kafka_jars
from twopc.broker.under_test import KafkaUnderTest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_cold_start.py"
ROWS = 400


@pytest.mark.integration
@pytest.mark.spark
def test_cold_start_benchmark_small(broker: KafkaUnderTest, tmp_path: Path) -> None:
    """With Spark's Kafka package, all three modes; without it, the built-in one is left out,
    saying why, and nothing is compared with it."""
    try:
        spark_kafka_jars()
        modes = ["builtin", "py-noop", "twopc"]
    except SparkKafkaUnavailable:
        modes = ["py-noop", "twopc"]
    proc = subprocess.run(
        [sys.executable, str(BENCH), "--trials", "1", "--warmup-trials", "0", "--rows", str(ROWS),
         "--partitions", "2", "--master", "local[2]", "--import-repeats", "1",
         "--results-dir", str(tmp_path), "--name", "smoke"],
        env={**os.environ, "TWOPC_BOOTSTRAP_SERVERS": broker.bootstrap_servers},
        capture_output=True, text=True, timeout=900, check=False,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    if "builtin" not in modes:
        assert "built-in sink skipped:" in proc.stderr
    payload = json.loads((tmp_path / "smoke.json").read_text())
    assert (tmp_path / "smoke.png").stat().st_size > 0
    assert payload["params"]["modes"] == modes and payload["warmup_trials"] == []
    trials = {t["mode"]: t for t in payload["trials"]}
    assert [t["mode"] for t in payload["trials"]] == modes
    for mode, t in trials.items():
        assert t["session_s"] > 0 and t["start_to_batch0_end_s"] > 0
        assert [b["batch_id"] for b in t["batches"]] == [0, 1]
        assert all(b["rows"] == ROWS for b in t["batches"])
        assert all("addBatch" in b["duration_ms"] for b in t["batches"])
        assert "query_start" in t["split_ms"][0] and "query_start" not in t["split_ms"][1]
        if mode != "builtin":  # the Python sinks' timed calls split every micro-batch
            for split in t["split_ms"]:
                assert {"prepare", "to_first_task", "tasks", "to_commit", "commit"} <= set(split)
                assert split["detail"]["committed_rows"] == ROWS
                assert sum(split["detail"]["to_commit_parts"].values()) == \
                    pytest.approx(split["to_commit"])
            assert set(t["roles"]) == {"planner", "task", "commit"}
    twopc = trials["twopc"]
    assert twopc["audit"]["passed"] is True and twopc["audit"]["summary"].startswith("PASS")
    assert f"{2 * ROWS} distinct ids" in twopc["audit"]["summary"]
    assert twopc["roles"]["task"]["by_package"].get("twopc", 0) > 0
    assert trials["py-noop"]["audit"]["rows_received"] == 2 * ROWS
    if "builtin" in trials:
        assert trials["builtin"]["audit"]["missing"] == 0
        assert "twopc_minus_builtin_s" in payload["differences"]
    else:
        assert "twopc_minus_builtin_s" not in payload["differences"]
    assert set(payload["summary"]) == set(modes)
    assert set(payload["differences"]["batch0_twopc_minus_noop_ms"]) >= {"prepare", "tasks"}
    imports = payload["imports"]
    assert set(imports) == {"planner", "task", "commit"}
    assert all(r["total_ms"] > 0 and r["top_self_ms"] for r in imports.values())
    assert payload["machine"]["commit"] not in ("", "unknown")


def test_split_adds_up_to_the_trigger() -> None:
    """The pieces of a micro-batch, from the timed sink's lines, add up to Spark's triggerExecution
    (plus the query's start for batch 0); a batch without lines (the JVM sink) is one piece."""
    batch = {"batch_id": 0, "start_ms": 1000.0, "end_ms": 1900.0,
             "duration_ms": {"triggerExecution": 900.0, "addBatch": 700.0, "commitOffsets": 50.0}}
    lines = [
        {"phase": "prepare", "for_commit": False, "start_ms": 1200.0, "end_ms": 1260.0, "pid": 1},
        {"phase": "task", "start_ms": 1400.0, "end_ms": 1500.0, "pid": 2, "rows": 5},
        {"phase": "task", "start_ms": 1410.0, "end_ms": 1550.0, "pid": 3, "rows": 5},
        {"phase": "prepare", "for_commit": True, "start_ms": 1600.0, "end_ms": 1620.0, "pid": 4,
         "process_start_ms": 1560.0, "sink_module_loaded_ms": 1585.0},
        {"phase": "commit", "start_ms": 1620.0, "end_ms": 1700.0, "pid": 4, "rows": 10},
        {"phase": "task", "start_ms": 2400.0, "end_ms": 2500.0, "pid": 2, "rows": 5},  # batch 1
    ]
    split = split_batch(batch, lines, began_ms=400.0)
    pieces = {k: v for k, v in split.items() if k != "detail"}
    assert set(pieces) <= {k for k, _ in SEGMENTS}
    assert pieces["query_start"] == 600.0 and pieces["tasks"] == 150.0
    assert sum(pieces.values()) == pytest.approx(600.0 + 900.0)
    assert split["detail"]["task_worker_processes"] == 2 and split["detail"]["committed_rows"] == 10
    # The wait for the commit worker in three parts that add up to `to_commit`.
    parts = split["detail"]["to_commit_parts"]
    assert parts == {"process_start": 10.0, "to_sink_module": 25.0,
                     "sink_module_to_stream_writer": 15.0}
    assert sum(parts.values()) == pieces["to_commit"]
    jvm = split_batch(batch, [], began_ms=None)
    assert jvm == {"spark_before_add": 150.0, "add_batch": 700.0, "commit_offsets": 50.0}


def test_modes_alternate() -> None:
    assert trial_order(["builtin", "py-noop", "twopc"], 2) == [
        "builtin", "py-noop", "twopc", "twopc", "py-noop", "builtin"]


def test_unknown_mode_is_refused() -> None:
    proc = subprocess.run([sys.executable, str(BENCH), "--modes", "twopc,fast"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "unknown modes ['fast']" in proc.stderr
