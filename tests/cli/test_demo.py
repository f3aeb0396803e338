"""`twopc demo`: a real streaming driver (its whole session) SIGKILLed mid-commit, restarted from the
same checkpoints, and the topic audited; and the narration of what recovery did, from log records."""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

from twopc.broker.under_test import KafkaUnderTest
from twopc.demo.narrate import summarize_recovery
from twopc.protocol.handle import Handle, PartitionSpan
from twopc.protocol.log_records import Aborted, Committed, Orphans, RollForward
from twopc.protocol.state import BatchState, BatchStatus


def _handle(p: int, records: int = 10) -> Handle:
    return Handle(f"q-{p}-0", 1000 + p, 0, (PartitionSpan("t", p, 0, records - 1, records, None),),
                  records, "c", 1_000_000, 60000, p, 0, 1_000_000)


def _pending(batch: str, n: int) -> BatchState:
    return BatchState(batch, BatchStatus.PREPARED, 5, 5, 5, tuple(_handle(p) for p in range(n)))


def test_recovery_narration_counts_what_recovery_rolled_forward() -> None:
    pending = [_pending("2", 4)]
    since = [(6, RollForward(("q-1-0", "q-2-0", "q-3-0"))), (7, Orphans(("q-0-1",))),
             (8, Committed("2", 5, ()))]
    summary = summarize_recovery(pending, since)
    (b,) = summary.batches
    assert (b.outcome, b.transactions, b.records, b.rolled_forward, b.finished_before) == (
        "committed", 4, 40, 3, 1)
    assert summary.orphans_fenced == 1
    assert summary.lines()[0] == ("recovery rolled forward batch 2: 3 of 4 transactions (1 already "
                                  "committed before the kill); batch 2 committed (40 records)")


def test_recovery_narration_reports_aborted_and_undecided_batches() -> None:
    pending = [_pending("3", 2), _pending("4", 1)]
    since = [(6, Aborted("3", pending[0].intent, "timed out", 5))]
    outcomes = {b.batch: b.outcome for b in summarize_recovery(pending, since).batches}
    assert outcomes == {"3": "aborted", "4": "undecided"}
    assert summarize_recovery([], []).lines() == ["recovery found nothing to do"]


def test_bad_arguments_exit_2_before_anything_starts() -> None:
    proc = subprocess.run([sys.executable, "-m", "twopc.cli", "demo", "--records", "7", "--batches", "2"],
                          capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 2, proc.stderr
    assert "--records must be a multiple of --batches" in proc.stderr


def _demo(broker: KafkaUnderTest, *extra: str, env: dict[str, str] | None = None
          ) -> tuple[int, dict[str, Any], str]:
    import os

    proc = subprocess.run(
        [sys.executable, "-m", "twopc.cli", "demo", "--bootstrap-servers", broker.bootstrap_servers,
         "--json", "--records", "900", "--batches", "3", "--kill-batch", "1", *extra],
        capture_output=True, text=True, timeout=600, check=False, env={**os.environ, **(env or {})},
    )
    assert proc.stdout.strip(), proc.stderr[-3000:]
    return proc.returncode, json.loads(proc.stdout), proc.stderr


@pytest.mark.integration
@pytest.mark.spark
def test_demo_kills_the_driver_mid_commit_and_the_audit_passes(broker: KafkaUnderTest) -> None:
    code, summary, narration = _demo(broker)
    assert code == 0, narration[-3000:]
    assert summary["passed"] and summary["verdict"].startswith("PASS")
    assert summary["expected"] == summary["found"] == 900
    assert (summary["duplicates"], summary["missing"], summary["open_transactions"]) == (0, 0, 0)
    assert summary["killed_batch"] == 1 and summary["committed_batches"] == [0, 1, 2]
    (recovered,) = summary["recovery"]["batches"]
    # Killed after the intent, before any EndTxn: recovery commits every transaction of batch 1.
    assert recovered["batch"] == "1" and recovered["outcome"] == "committed"
    assert recovered["rolled_forward"] == recovered["transactions"] > 0
    assert "driver killed (SIGKILL) at coordinator.after_intent during batch 1" in narration
    assert "restarted: recovery rolled forward batch 1:" in narration
    assert "batch 1 re-run by Spark" in narration


@pytest.mark.integration
@pytest.mark.spark
@pytest.mark.slow
def test_demo_killed_after_the_first_endtxn(broker: KafkaUnderTest) -> None:
    code, summary, narration = _demo(broker, "--kill-at", "coordinator.after_endtxn_1")
    assert code == 0, narration[-3000:]
    assert summary["passed"] and summary["found"] == 900
    (recovered,) = summary["recovery"]["batches"]
    assert recovered["outcome"] == "committed"
    assert (recovered["finished_before"], recovered["rolled_forward"]) == (
        1, recovered["transactions"] - 1)


@pytest.mark.integration
@pytest.mark.spark
@pytest.mark.slow
def test_builtin_kafka_sink_writes_the_killed_batch_twice(broker: KafkaUnderTest) -> None:
    """Needs Spark's Kafka package: resolved from Maven Central at pyspark's version, or
    TWOPC_SPARK_KAFKA_JARS (a failure to get it fails this test; it is not skipped)."""
    code, summary, narration = _demo(broker, "--sink", "kafka")
    assert code == 0, narration[-3000:]
    assert summary["verdict"] == "DUPLICATES (expected for the built-in sink)"
    assert summary["killed_batch"] == 1
    # Exactly the killed batch (one source file of 300 records) appears twice; nothing is missing.
    assert summary["duplicates"] == 300 and summary["found"] == 1200 and summary["missing"] == 0
    assert all(rid.startswith("demo-1-") for rid in summary["audit"]["duplicates"])
    assert "duplicates are the expected outcome" in narration
