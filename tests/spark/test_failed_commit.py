"""A commit that fails in foreachBatch or write_exactly_once, on a real broker and real Spark
(issue 30, item 3): the batch's pre-committed transactions are settled before the error goes up
(an intent recorded is rolled forward, the rest fenced, the prefix swept), so that nothing holds
read_committed consumers back until the transaction timeout; the error itself still goes up, and
the re-run or the restarted query makes the batch visible exactly once.

The checkpoint storage fails for real (the `faulty://` filesystem, testing/twopc_testing/
faulty_fs.py), once, at the intent's write: armed when the driver reaches the crash point
`coordinator.before_intent` (foreachBatch and write_exactly_once commit in this very process)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from twopc_testing.faulty_fs import write_control

import twopc.driver.coordinator as coordinator_module
from checkpoint import open_log
from twopc.broker.under_test import KafkaUnderTest
from twopc.control import ControlClient, TxnState
from twopc.demo.drivers import write_json_files
from twopc.log.session import Session, read_records
from twopc.protocol.log_records import Aborted, Committed, Prepared
from twopc.protocol.state import BatchStatus
from twopc.spark import ExactlyOnceKafkaSink, write_exactly_once

from .helpers import sink_options
from .test_batch import assert_exactly_once, expected, ids_df
from .test_streaming import start_query

pytestmark = [pytest.mark.spark, pytest.mark.integration]

ROWS = 40


@dataclass(frozen=True)
class FaultySink:
    options: dict[str, str]  # sink options whose twopc log lives on faulty://
    control: str  # its control file
    armed: list[str]  # the crash point's name once the fault was armed

    @property
    def prefix(self) -> str:
        return self.options["twopc.transactionalIdPrefix"]

    def records(self) -> list[Any]:
        log = open_log(self.options["twopc.checkpoint"], {"control": self.control})
        return [r for _, r in read_records(log)[1]]


def faulty_sink(broker: KafkaUnderTest, topic: str, tmp_path: Path,
                monkeypatch: pytest.MonkeyPatch, *, lose_reply: bool) -> FaultySink:
    """Sink options on faulty://, and the intent's write set to fail once (fail_the_intent_write)."""
    control = str(tmp_path / "faults.json")
    options = {**sink_options(broker.bootstrap_servers, topic, tmp_path),
               "twopc.checkpoint": f"faulty://{tmp_path}/twopc", "twopc.storage.control": control}
    return FaultySink(options, control,
                      fail_the_intent_write(monkeypatch, control, lose_reply=lose_reply))


def fail_the_intent_write(monkeypatch: pytest.MonkeyPatch, control: str, *,
                          lose_reply: bool) -> list[str]:
    """When this process's driver reaches `coordinator.before_intent` (the intent is next), the
    next write of a log record fails once: before it is written, or (`lose_reply`) after. Returns
    the list the point's name is put in when it armed the fault."""
    armed: list[str] = []
    real: Callable[[str], None] = coordinator_module.crash_point

    def hook(name: str) -> None:
        if name == "coordinator.before_intent" and not armed:
            write_control(control, fail=("write",), match="records/", times=1,
                          lose_reply=lose_reply)
            armed.append(name)
        real(name)

    monkeypatch.setattr(coordinator_module, "crash_point", hook)
    return armed


def open_in_pool(control: ControlClient, prefix: str) -> list[str]:
    return sorted(t.transactional_id for t in control.list_transactions(
        prefix, states=[TxnState.ONGOING]))


def test_foreach_batch_fences_a_batch_whose_intent_could_not_be_written(
    spark: Any, broker: KafkaUnderTest, topic: str, tmp_path: Path, control: ControlClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sink = faulty_sink(broker, topic, tmp_path, monkeypatch, lose_reply=False)
    options = sink.options
    source = tmp_path / "in"
    ids = write_json_files(source, 1, ROWS, "fi")
    query = start_query(spark, source, tmp_path / "ckpt", options,
                        foreach=ExactlyOnceKafkaSink(options))
    try:
        # The storage error itself stops the query (it is not swallowed).
        with pytest.raises(Exception, match="storage error during create"):
            query.awaitTermination(timeout=240)
    finally:
        query.stop()
    assert sink.armed, "the driver never reached the intent"
    # At once, not at the transaction timeout (60 s): the batch's transactions were fenced
    # before the error went up.
    assert open_in_pool(control, sink.prefix) == []
    records = sink.records()
    assert not any(isinstance(r, Prepared) for r in records), records
    assert any(isinstance(r, Aborted) and r.batch == "0" and r.handles for r in records), records
    # The restarted query writes the batch again, exactly once.
    query = start_query(spark, source, tmp_path / "ckpt", options,
                        foreach=ExactlyOnceKafkaSink(options))
    try:
        query.processAllAvailable()
    finally:
        query.stop()
    assert_exactly_once(broker, topic, ids)


def test_write_exactly_once_rolls_forward_an_intent_whose_write_reply_was_lost(
    spark: Any, broker: KafkaUnderTest, topic: str, tmp_path: Path, control: ControlClient,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sink = faulty_sink(broker, topic, tmp_path, monkeypatch, lose_reply=True)
    began = time.monotonic()
    with pytest.raises(Exception, match="storage error during create") as failed:
        write_exactly_once(ids_df(spark, "lr", ROWS), "J", sink.options)
    assert sink.armed, "the driver never reached the intent"
    # The intent was written after all: the decision was commit, and it was carried out before
    # the error went up. Nothing is left open, and the error says what became of the job.
    assert open_in_pool(control, sink.prefix) == []
    assert time.monotonic() - began < 60  # well before the transaction timeout
    notes = "\n".join(getattr(failed.value, "__notes__", []))
    assert "job J is committed" in notes, notes
    state = Session(open_log(sink.options["twopc.checkpoint"], {"control": sink.control})).state
    assert state.batch("J").status is BatchStatus.COMMITTED
    assert any(isinstance(r, Committed) and r.batch == "J" for r in sink.records())
    again = write_exactly_once(ids_df(spark, "lr", ROWS), "J", sink.options)
    assert again.skipped, again
    assert_exactly_once(broker, topic, expected("lr", ROWS))
