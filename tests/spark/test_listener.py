"""TwopcProgressListener on real streaming queries and a real broker: each micro-batch's figures reach
the driver, and so does what recovery did after the driver was killed in the middle of a commit."""

from __future__ import annotations

import json
import logging
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from checkpoint import open_log
from twopc.broker.under_test import KafkaUnderTest
from twopc.demo.drivers import write_json_files
from twopc.ops.audit import audit_topic
from twopc.protocol.log_records import Committed, RollForward, from_body
from twopc.spark import TwopcProgressListener
from twopc.spark.journal import Journal
from twopc.spark.listener import LOGGER_NAME

from .helpers import errors_of, run_driver, sink_options
from .test_streaming import PER_FILE, start_query

pytestmark = [pytest.mark.spark, pytest.mark.integration]


def wait_for_batches(listener: TwopcProgressListener, last_batch: int, timeout_s: float = 60) -> None:
    """Progress events reach Python listeners asynchronously, after the batch: wait (bounded)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if listener.batch(last_batch) is not None:
            return
        time.sleep(0.1)
    raise AssertionError(f"no progress for batch {last_batch}: {[b.batch_id for b in listener.batches]}")


def test_each_micro_batch_reports_its_figures(
    spark: Any, broker: KafkaUnderTest, topic: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    options = sink_options(broker.bootstrap_servers, topic, tmp_path)
    listener = TwopcProgressListener(options)
    spark.streams.addListener(listener)
    source = tmp_path / "in"
    ids = write_json_files(source, 1, PER_FILE, "l")
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    query = start_query(spark, source, tmp_path / "spark-ckpt", options)
    try:
        for file_no in range(1, 3):
            query.processAllAvailable()
            ids += write_json_files(source, 1, PER_FILE, "l", first=file_no)
        query.processAllAvailable()
        last = query.lastProgress["batchId"]
        wait_for_batches(listener, last)
    finally:
        query.stop()
        spark.streams.removeListener(listener)
    assert audit_topic(broker.config(), topic, ids).passed
    seen = {b.batch_id: b for b in listener.batches if b.query_id == str(query.id)}
    assert sorted(seen) == list(range(last + 1)) and last >= 2
    for item in seen.values():
        f = item.figures
        assert (f["event"], f["outcome"]) == ("commit", "committed")
        assert f["records"] == PER_FILE  # one file per micro-batch
        assert 1 <= f["transactions"] <= 4 and f["committed_transactions"] == f["transactions"]
        assert f["commit_latency_ms"] > 0
        assert f["oldest_txn_timeout_ms"] == 60000
        assert 0 <= f["oldest_txn_age_ratio"] < 1
        assert item.metrics["records"] == float(PER_FILE)
        assert "addBatch" in item.spark_duration_ms
        assert item.recovery is None  # nothing to recover on a fresh query
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == LOGGER_NAME]
    assert {line["batch_id"] for line in lines if line["event"] == "batch_progress"} >= set(seen)


@pytest.mark.all_variants
@pytest.mark.only_variants("kafka4-tv2", "kafka4-tv0")
def test_recovery_after_a_killed_commit_reaches_the_driver(
    spark: Any, broker: KafkaUnderTest, topic: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    source = tmp_path / "in"
    ids = write_json_files(source, 2, 40, "r")
    options = sink_options(broker.bootstrap_servers, topic, tmp_path, prefix="lrec")
    cfg = {"bootstrap": broker.bootstrap_servers, "topic": topic, "source": str(source),
           "checkpoint": options["twopc.checkpoint"], "spark_checkpoint": str(tmp_path / "spark"),
           "prefix": "lrec"}
    # The whole driver (Python, JVM, workers) dies right after batch 0's intent is recorded.
    crashed = run_driver("stream", cfg, env={"TWOPC_CRASH_AT": "coordinator.after_intent",
                                             "TWOPC_CRASH_SCOPE": "session"})
    assert crashed.returncode == -signal.SIGKILL, (crashed.returncode, errors_of(crashed.stderr))

    listener = TwopcProgressListener(options)
    spark.streams.addListener(listener)
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    query = start_query(spark, source, tmp_path / "spark", options)
    try:
        query.processAllAvailable()
        wait_for_batches(listener, query.lastProgress["batchId"])
    finally:
        query.stop()
        spark.streams.removeListener(listener)
    assert audit_topic(broker.config(), topic, ids).passed

    # The listener: one recovery, in the first micro-batch's preparation, that rolled batch 0 forward.
    assert len(listener.recoveries) == 1, listener.recoveries
    rec = listener.recoveries[0]
    assert rec["where"] == "prepare" and rec["acted"] is True
    assert rec["batches"] == {"0": "committed"}
    assert rec["rolled_forward"] and all(t.startswith("lrec-") for t in rec["rolled_forward"])
    first = listener.batch(0)
    assert first is not None and first.recovery == rec
    # The driver log: the same report, as a WARNING line of the listener's logger.
    warnings = [json.loads(r.getMessage()) for r in caplog.records
                if r.name == LOGGER_NAME and r.levelno == logging.WARNING]
    assert [w["event"] for w in warnings] == ["recovery_report"]
    assert warnings[0]["rolled_forward"] == rec["rolled_forward"]
    # The checkpoint: the journal's report, and the log's own records of the roll-forward.
    saved = Journal(options["twopc.checkpoint"]).read_recovery()
    assert saved is not None and saved["recovery"]["rolled_forward"] == rec["rolled_forward"]
    records = [from_body(r.body) for r in open_log(options["twopc.checkpoint"]).records()]
    rolled = [r for r in records if isinstance(r, RollForward)]
    assert [sorted(r.ids) for r in rolled] == [sorted(rec["rolled_forward"])]
    assert any(isinstance(r, Committed) and r.batch == "0" for r in records)


def test_a_failed_commit_is_reported_when_the_query_stops(
    spark: Any, broker: KafkaUnderTest, topic: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # A commit margin of the whole timeout but 1 ms (a larger one is refused as an option): any
    # transaction has used more than 1 ms by its commit, so the check before the intent fails
    # every batch.
    options = {**sink_options(broker.bootstrap_servers, topic, tmp_path),
               "twopc.commitMarginMs": "59999"}
    listener = TwopcProgressListener(options)
    spark.streams.addListener(listener)
    source = tmp_path / "in"
    write_json_files(source, 1, PER_FILE, "g")
    caplog.set_level(logging.INFO, logger=LOGGER_NAME)
    query = start_query(spark, source, tmp_path / "spark-ckpt", options)
    try:
        with pytest.raises(Exception, match=r"GuardFailed|guard"):
            query.awaitTermination(timeout=120)
        deadline = time.monotonic() + 30
        while len(listener.batches) < 2 and time.monotonic() < deadline:
            time.sleep(0.1)
    finally:
        query.stop()
        spark.streams.removeListener(listener)
    got = {(b.batch_id, b.figures["event"]): b.figures for b in listener.batches}
    assert got[(0, "commit")]["outcome"] == "GuardFailed"
    assert got[(0, "commit")]["records"] == PER_FILE
    assert got[(0, "abort")]["outcome"] == "fenced"
    warned = [json.loads(r.getMessage()) for r in caplog.records
              if r.name == LOGGER_NAME and r.levelno == logging.WARNING]
    assert any(w.get("figures", {}).get("outcome") == "GuardFailed" for w in warned)
    assert audit_topic(broker.config(), topic, []).passed  # nothing of the batch became visible
