"""The observe journal and TwopcProgressListener without Spark running: files, owners, de-duplication
of recovery reports, the log lines, and the recovery summary (observe.recovery_summary)."""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path

import pytest

from twopc.driver import observe
from twopc.driver.recovery_report import BatchReport, HandleReport, RecoveryReport
from twopc.protocol.verdicts import BatchOutcome
from twopc.spark.errors import JournalError
from twopc.spark.journal import KEEP_BATCHES, Journal, batch_entry, batch_name, recovery_entry
from twopc.spark.listener import LOGGER_NAME, TwopcProgressListener

QUERY = "6f1c1d2e-0000-4000-8000-000000000001"


def options(tmp_path: Path) -> dict[str, str]:
    return {"kafka.bootstrap.servers": "localhost:1", "twopc.checkpoint": (tmp_path / "log").as_uri(),
            "twopc.transactionalIdPrefix": "jr"}


def fig(batch: str, records: int = 10, outcome: str = "committed") -> observe.BatchFigures:
    return observe.BatchFigures("commit", batch, outcome, records, 2, 2, 12.5, 300, 60000, 0.005)


def rolled_forward_report() -> RecoveryReport:
    rows = (HandleReport("3", "jr-0-0", 0, 5, "roll_forward", "committed"),
            HandleReport("3", "jr-1-0", 1, 7, "roll_forward", "committed"))
    return RecoveryReport(batches=[BatchReport("3", BatchOutcome.COMMITTED, rows, 12)],
                          rolled_forward=("jr-0-0", "jr-1-0"), orphans_fenced=("jr-2-1",))


def test_recovery_summary_names_what_was_done() -> None:
    summary = observe.recovery_summary(rolled_forward_report(), where="prepare")
    assert summary["acted"] is True
    assert summary["where"] == "prepare"
    assert summary["batches"] == {"3": "committed"}
    assert summary["rolled_forward"] == ["jr-0-0", "jr-1-0"]
    assert summary["orphans_fenced"] == ["jr-2-1"]
    assert summary["lost_partitions"] == {}
    assert "batch 3: committed" in summary["summary"]
    json.dumps(summary)  # plain data
    idle = observe.recovery_summary(RecoveryReport(), where="prepare")
    assert idle["acted"] is False and idle["summary"] == "nothing to recover"


def test_acting_recovery_is_a_warning_and_an_idle_one_is_not(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="twopc"):
        observe.log_recovery(observe.recovery_summary(rolled_forward_report(), where="abort"))
        observe.log_recovery(observe.recovery_summary(RecoveryReport(), where="prepare"))
    levels = [(r.levelno, json.loads(r.getMessage())["acted"]) for r in caplog.records
              if r.name == "twopc"]
    assert levels == [(logging.WARNING, True), (logging.DEBUG, False)]


def test_journal_round_trip_and_pruning(tmp_path: Path) -> None:
    journal = Journal((tmp_path / "log").as_uri())
    assert journal.read_batch("0") is None and journal.read_recovery() is None
    for b in range(KEEP_BATCHES + 2):
        journal.write_batch(str(b), batch_entry(QUERY, fig(str(b), records=b)))
    entry = journal.read_batch(str(KEEP_BATCHES + 1))
    assert entry is not None and entry["owner_id"] == QUERY
    assert entry["figures"]["records"] == KEEP_BATCHES + 1
    assert entry["metrics"]["commit_latency_ms"] == 12.5
    # Only the last KEEP_BATCHES stay.
    assert journal.read_batch("0") is None and journal.read_batch("1") is None
    assert journal.read_batch("2") is not None
    names = sorted(p.name for p in (tmp_path / "log" / "observe").iterdir())
    assert len(names) == KEEP_BATCHES and not any(n.startswith(".tmp") for n in names)


def test_a_torn_or_foreign_file_is_a_journal_error_naming_it(tmp_path: Path) -> None:
    """Issue 33: such a file crashed `twopc status`; it is a typed error naming the file (status
    shows it as a note, the listener as a warning), never read as figures."""
    journal = Journal((tmp_path / "log").as_uri())
    journal.write_batch("1", batch_entry(QUERY, fig("1")))
    path = tmp_path / "log" / "observe" / batch_name("1")
    for text in ('{"format": 1, "owner', json.dumps({"format": 99}), "[]",
                 json.dumps({"format": 1, "owner_id": QUERY, "at_ms": 1, "figures": {}}),
                 json.dumps({"format": 1, "owner_id": QUERY, "figures": {"commit_latency_ms": 1}})):
        path.write_text(text)  # half a file, another format, another shape
        with pytest.raises(JournalError, match=batch_name("1")):
            journal.read_batch("1")


def test_listener_reports_its_query_and_passes_over_others(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    listener = TwopcProgressListener(options(tmp_path))
    journal = Journal((tmp_path / "log").as_uri())
    journal.write_batch("0", batch_entry(QUERY, fig("0", records=40)))
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME):
        item = listener.observe_batch(QUERY, 0, {"addBatch": 300})
        other = listener.observe_batch("another-query", 0, {})
        missing = listener.observe_batch(QUERY, 1, {})
        again = listener.observe_batch(QUERY, 0, {"addBatch": 300})  # a progress event repeated
    assert other is None and missing is None and again is None
    assert len(listener.batches) == 1
    assert item is not None and listener.latest == item and listener.batch(0) == item
    assert item.figures["records"] == 40 and item.metrics["records"] == 40.0
    assert item.spark_duration_ms == {"addBatch": 300}
    lines = [json.loads(r.getMessage()) for r in caplog.records if r.name == LOGGER_NAME]
    assert [(line["event"], line["batch_id"]) for line in lines] == [("batch_progress", 0)]


def test_listener_reports_each_new_recovery_once_and_not_an_old_one(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    journal = Journal((tmp_path / "log").as_uri())
    summary = observe.recovery_summary(rolled_forward_report(), where="prepare")
    journal.write_recovery(recovery_entry(QUERY, summary))  # from an earlier run
    time.sleep(0.01)
    listener = TwopcProgressListener(options(tmp_path))
    journal.write_batch("4", batch_entry(QUERY, fig("4")))
    assert listener.observe_batch(QUERY, 4, {}) is not None
    assert listener.recoveries == []
    time.sleep(0.01)
    journal.write_recovery(recovery_entry(QUERY, summary))  # this run's
    journal.write_batch("5", batch_entry(QUERY, fig("5")))
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME):
        fifth = listener.observe_batch(QUERY, 5, {})
        journal.write_batch("6", batch_entry(QUERY, fig("6")))
        sixth = listener.observe_batch(QUERY, 6, {})
    assert fifth is not None and fifth.recovery is not None
    assert fifth.recovery["rolled_forward"] == ["jr-0-0", "jr-1-0"]
    assert sixth is not None and sixth.recovery is None
    assert len(listener.recoveries) == 1 and listener.recoveries[0]["query_id"] == QUERY
    warnings = [json.loads(r.getMessage()) for r in caplog.records
                if r.name == LOGGER_NAME and r.levelno == logging.WARNING]
    assert [w["event"] for w in warnings] == ["recovery_report"]


def test_a_failed_commit_is_a_warning(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    listener = TwopcProgressListener(options(tmp_path))
    Journal((tmp_path / "log").as_uri()).write_batch(
        "2", batch_entry(QUERY, fig("2", outcome="GuardFailed")))
    with caplog.at_level(logging.INFO, logger=LOGGER_NAME):
        listener.observe_batch(QUERY, 2, {})
    assert [r.levelno for r in caplog.records if r.name == LOGGER_NAME] == [logging.WARNING]


def test_worker_log_handler_is_added_once_and_only_without_logging_config(
    monkeypatch: pytest.MonkeyPatch
) -> None:
    root, twopc_logger = logging.getLogger(), logging.getLogger("twopc")
    monkeypatch.setattr(root, "handlers", [])
    monkeypatch.setattr(twopc_logger, "handlers", [])
    monkeypatch.setattr(observe, "_worker_handler", None)
    observe.show_in_worker_log()
    observe.show_in_worker_log()
    assert len(twopc_logger.handlers) == 1
    assert twopc_logger.handlers[0].level == logging.WARNING
    assert twopc_logger.level == logging.NOTSET  # the logger's own level is left alone
    monkeypatch.setattr(twopc_logger, "handlers", [])
    monkeypatch.setattr(observe, "_worker_handler", None)
    monkeypatch.setattr(root, "handlers", [logging.NullHandler()])
    observe.show_in_worker_log()
    assert twopc_logger.handlers == []


def test_commit_and_abort_of_a_batch_are_kept_apart_and_pruned_together(tmp_path: Path) -> None:
    journal = Journal((tmp_path / "log").as_uri())
    journal.write_batch("0", batch_entry(QUERY, fig("0", outcome="GuardFailed")), "commit")
    journal.write_batch("0", batch_entry(QUERY, fig("0", outcome="fenced")), "abort")
    commit, abort = journal.read_batch("0", "commit"), journal.read_batch("0", "abort")
    assert commit is not None and commit["figures"]["outcome"] == "GuardFailed"
    assert abort is not None and abort["figures"]["outcome"] == "fenced"
    journal.write_batch(str(KEEP_BATCHES), batch_entry(QUERY, fig(str(KEEP_BATCHES))))
    assert journal.read_batch("0", "commit") is None and journal.read_batch("0", "abort") is None
    with pytest.raises(ValueError):
        journal.read_batch("1", "recovery")
