"""What every Spark entry point (data source, foreachBatch sink, job function) shares.

Executor side: `task_write` (skip a committed batch, else write and pre-commit one partition).
Driver side: `prepare` (bind the log to its owner, guards at start, recovery) before any task writes,
and `driver_coordinator` for commit and abort; what each call did goes to the `twopc` log lines and,
for a streaming query, to the journal (journal.py) that TwopcProgressListener reads. Nothing the
protocol needs is kept between calls (it is all in the checkpoint log and the messages); a reused
worker (driver or executor side) only keeps its opened log and control client, as a speed-up.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from twopc import observe
from twopc.crashpoints import crash_point
from twopc.errors import TwopcError
from twopc.handle import ResultKind, WriteResult, transactional_id
from twopc.spark.errors import MissingQueryIdentity
from twopc.spark.guards import check_at_start
from twopc.spark.journal import Journal, batch_entry, record_safely, recovery_entry
from twopc.spark.options import SPARK_CHECKPOINT, SinkConfig
from twopc.spark.schema import rows_from_batches
from twopc.spark.source_offsets import batch_source_offsets, spark_checkpoint_file

if TYPE_CHECKING:
    import pyarrow as pa

    from checkpoint import Log
    from twopc.control import ControlClient
    from twopc.coordinator import Coordinator
    from twopc.recovery import RecoveryReport

_log = logging.getLogger(__name__)

QUERY = "query"
JOB = "job"


@dataclass(frozen=True)
class Owner:
    """Whose log it is: a streaming query (Spark's query id, batches are micro-batch ids), or the
    batch jobs of one transactional id prefix (batches are the users' job ids, kept forever)."""

    kind: str
    owner_id: str

    def __str__(self) -> str:
        return f"{self.kind} {self.owner_id}"


# A driver-side Python worker is reused across micro-batches (spark.python.worker.reuse, the
# default): keep its opened log (whose opening probes the backend's conditional create, two writes
# and a delete) and its control client (connections, cached coordinators and leaders) for the next
# call. Only an optimization: every call still reads the log afresh, and a client that failed a
# call is closed and replaced.
_shared_lock = threading.Lock()
_logs: dict[str, Log] = {}
_clients: dict[str, tuple[int, ControlClient]] = {}


def _log_key(config: SinkConfig) -> str:
    return json.dumps([config.checkpoint_url, config.storage_options,
                       config.allow_unconditional_create], sort_keys=True, default=str)


def _log_for(config: SinkConfig) -> Log:
    from checkpoint import open_log

    key = _log_key(config)
    with _shared_lock:
        log = _logs.get(key)
    if log is None:
        log = open_log(config.checkpoint_url, config.storage_options,
                       allow_unconditional_create=config.allow_unconditional_create)
        with _shared_lock:
            _logs[key] = log
    return log


def _client_for(config: SinkConfig) -> ControlClient:
    from twopc.control import ControlClient

    key = json.dumps(config.control_config(), sort_keys=True)
    with _shared_lock:
        found = _clients.pop(key, None)  # taken: one call at a time uses a client
    if found is not None and found[0] == os.getpid():
        return found[1]
    return ControlClient(config.control_config())  # (a forked child never reuses its parent's)


def _release_client(config: SinkConfig, client: ControlClient, *, healthy: bool) -> None:
    key = json.dumps(config.control_config(), sort_keys=True)
    if healthy:
        with _shared_lock:
            if key not in _clients:
                _clients[key] = (os.getpid(), client)
                return
    client.close()


def open_coordinator(config: SinkConfig, owner: Owner, *, control: bool = True) -> Coordinator:
    from twopc.coordinator import Coordinator

    log = _log_for(config)
    # Executors only ask is_committed() and task_slot(), which read the log: no control connection.
    client = _client_for(config) if control else cast("ControlClient", None)
    if config.margin_ms is None:
        return Coordinator(log, client, owner_kind=owner.kind, owner_id=owner.owner_id,
                           prefix=config.prefix)
    return Coordinator(log, client, owner_kind=owner.kind, owner_id=owner.owner_id,
                       prefix=config.prefix, margin_ms=config.margin_ms)


@contextmanager
def driver_coordinator(config: SinkConfig, owner: Owner) -> Iterator[Coordinator]:
    """A coordinator for one driver call; its control client is kept for the next call of this
    process unless the call failed (then it is closed: its connections may be what failed)."""
    coordinator = open_coordinator(config, owner)
    healthy = False
    try:
        yield coordinator
        healthy = True
    finally:
        _release_client(config, coordinator.control, healthy=healthy)
        if not healthy:  # open it again next time (a storage problem probes again)
            with _shared_lock:
                _logs.pop(_log_key(config), None)


def report_recovery(config: SinkConfig, owner: Owner, report: RecoveryReport | None,
                    where: str) -> dict[str, Any] | None:
    """What a recovery did: a JSON line on logger ``twopc`` (WARNING when it acted) and, for a
    streaming query, the journal's ``recovery.json`` that TwopcProgressListener reports on the
    driver. Returns the summary, or None without a report."""
    if report is None:
        return None
    summary = observe.recovery_summary(report, where=where)
    observe.log_recovery(summary)
    if summary["acted"] and owner.kind == QUERY:
        record_safely("a recovery report", journal_of(config).write_recovery,
                      recovery_entry(owner.owner_id, summary))
    return summary


def journal_of(config: SinkConfig) -> Journal:
    return Journal(config.checkpoint_url, config.storage_options)


def record_batch(config: SinkConfig, owner: Owner, batch: str, fig: observe.BatchFigures | None,
                 recovery: dict[str, Any] | None = None) -> None:
    """Leave one micro-batch's figures (of its commit or abort) for the listener (streaming
    queries only)."""
    if fig is None or owner.kind != QUERY:
        return
    record_safely(f"the figures of batch {batch}", journal_of(config).write_batch, batch,
                  batch_entry(owner.owner_id, fig, recovery), fig.event)


# How long abort() waits before its second sweep: PySpark's default task kill timeout plus a margin.
STRAGGLER_WAIT_S = 4.0


def abort_batch(config: SinkConfig, owner: Owner, batch: str, results: list[WriteResult]) -> None:
    """Spark's abort (or a failed job): the core's abort, then a sweep of the prefix.

    A failed task's message is None (on PySpark 4.3 a failed job hands abort() None for *every*
    task, the successful ones too), so the pre-committed transactions of this batch are unknown to
    the driver; recovery's sweep lists the prefix's open transactions and fences those that no
    record names, so that they stop holding back read_committed consumers now, not at their timeout.

    Spark calls abort() once the job has failed, without waiting for its other tasks to stop: a task
    still running may pre-commit just after the first sweep. PySpark kills an interrupted task's
    Python worker within spark.python.task.killTimeout (2 s by default), so a second sweep after
    STRAGGLER_WAIT_S finds what such tasks left open (seen in tests: a job failed by one bad row, its
    other tasks' transactions open until their timeout).
    """
    began = time.monotonic()
    with _observed_call(config, owner, "abort", batch, results, began) as coordinator:
        aborted = coordinator.abort(batch, results)
        rolled = report_recovery(config, owner, aborted.recovery, "abort")
        swept = report_recovery(config, owner, coordinator.recover(), "abort")
        time.sleep(STRAGGLER_WAIT_S)
        again = report_recovery(config, owner, coordinator.recover(), "abort")
        swept = again if again is not None and again["acted"] else swept
    outcome = "rolled_forward" if aborted.recovery is not None else "fenced"
    record_batch(config, owner, batch, _figures_of("abort", batch, outcome, results, began),
                 rolled or swept)


def _figures_of(event: str, batch: str, outcome: str, results: list[WriteResult],
                began: float) -> observe.BatchFigures:
    handles = [r.handle for r in results if r.handle is not None]
    return observe.figures(event, batch, outcome, handles, committed=0,
                           now_ms=time.time_ns() // 1_000_000,
                           latency_ms=(time.monotonic() - began) * 1000)


@contextmanager
def _observed_call(config: SinkConfig, owner: Owner, event: str, batch: str,
                   results: list[WriteResult], began: float) -> Iterator[Coordinator]:
    """A driver call whose failure still reaches the journal: its figures (outcome: the error's
    class) and whatever its recovery did before it stopped (UndecidedError carries that report)."""
    with driver_coordinator(config, owner) as coordinator:
        try:
            yield coordinator
        except TwopcError as exc:
            recovery = report_recovery(config, owner, getattr(exc, "report", None), event)
            record_batch(config, owner, batch,
                         _figures_of(event, batch, type(exc).__name__, results, began), recovery)
            raise


# Guards at start ask the cluster (a few round trips); a driver-side Python worker is reused across
# micro-batches, so remember which configurations already passed. Only an optimization: a new process
# (a restart) checks again.
_checked: set[tuple[str, str, int]] = set()
_checked_lock = threading.Lock()


def prepare(config: SinkConfig, owner: Owner, job: str | None = None) -> bool:
    """Before any task of a new query, micro-batch or job writes. Returns True if `job` (a job id)
    is already committed: its re-run must write nothing."""
    key = (config.prefix, json.dumps(config.producer_config, sort_keys=True), config.transaction_timeout_ms)
    with _checked_lock:
        first = key not in _checked
    if first:
        check_at_start(config, streaming=owner.kind == QUERY)
        with _checked_lock:
            _checked.add(key)
    with driver_coordinator(config, owner) as coordinator:
        coordinator.bind()
        # Recovery first: a job whose earlier run crashed after its intent is rolled forward here and
        # then counts as committed.
        try:
            recovered = coordinator.recover()
        except TwopcError as exc:  # UndecidedError carries what was done before it stopped
            report_recovery(config, owner, getattr(exc, "report", None), "prepare")
            raise
        report_recovery(config, owner, recovered, "prepare")
        return job is not None and coordinator.is_committed(job)


def query_id_from_spark_checkpoint(spark_checkpoint: str | None) -> str:
    """Spark's query id lives in `<checkpointLocation>/metadata`, written when the query is created."""
    if not spark_checkpoint:
        raise MissingQueryIdentity(
            f"a streaming write through kafka2pc needs the option {SPARK_CHECKPOINT!r} on the query "
            "(writeStream.option('checkpointLocation', ...)): twopc binds its log to the query id kept "
            "there, so that a query on a new Spark checkpoint cannot skip batches of an old one"
        )
    import fsspec

    url = spark_checkpoint_file(spark_checkpoint, "metadata")
    try:
        with fsspec.open(url, "rt") as handle:
            first_line = handle.readline()
        query_id = json.loads(first_line)["id"]
    except (OSError, ValueError, KeyError) as exc:
        raise MissingQueryIdentity(
            f"cannot read the query id from {url}: {exc}; the Spark checkpoint location must be "
            "readable from the driver's Python process (a local path or an fsspec URL)"
        ) from exc
    return str(query_id)


def task_write(
    config: SinkConfig,
    owner: Owner,
    batch: str,
    batches: Iterable[pa.RecordBatch],
    *,
    task_partition: int,
    attempt: int,
    known_committed: bool = False,
) -> WriteResult:
    """Executor side, one Spark partition: DESIGN.md section 2, executor steps 1-6."""
    from twopc.writer import write_partition

    if known_committed:
        return WriteResult(ResultKind.SKIPPED, batch, task_partition, attempt)
    coordinator = open_coordinator(config, owner, control=False)
    # An id a pending intent names or a stranded commit holds is not free (DESIGN.md section 5):
    # its InitProducerId would end that transaction.
    slot = coordinator.task_slot(batch, task_partition, attempt, config.slots)
    if slot is None:
        return WriteResult(ResultKind.SKIPPED, batch, task_partition, attempt)
    rows = rows_from_batches(batches, task_partition, config.topic)
    # The executor's Python worker runs task after task (spark.python.worker.reuse): its control
    # client (connections, coordinators, leaders) is kept for the next task, as on the driver.
    control = _client_for(config)
    healthy = False
    try:
        result = write_partition(
            config.producer_config,
            transactional_id(config.prefix, task_partition, slot),
            rows,
            batch=batch,
            task_partition=task_partition,
            attempt=attempt,
            default_topic=config.topic,
            transaction_timeout_ms=config.transaction_timeout_ms,
            budget_ms=config.budget_ms,
            control=control,
        )
        healthy = True
    finally:
        _release_client(config, control, healthy=healthy)
    # A task that dies after its pre-commit, before Spark hears of it (tests: retries, orphans), or
    # one partition's attempt that lingers there (tests: a speculative copy wins meanwhile).
    crash_point(f"spark.task.precommitted.attempt{attempt}")
    crash_point(f"spark.task.precommitted.partition{task_partition}.attempt{attempt}")
    return result


def job_owner(config: SinkConfig) -> Owner:
    """Batch jobs of one prefix share a log; each job id is a batch of it."""
    return Owner(JOB, config.prefix)


def commit_batch(config: SinkConfig, owner: Owner, batch: str, results: list[WriteResult]) -> None:
    """Spark's commit of a micro-batch (with its source offsets, under twopc.commitSourceOffsets):
    the core's commit, then its figures (and what the settling of an open intent did, if it had
    to) logged and left in the journal for the listener."""
    began = time.monotonic()
    with _observed_call(config, owner, "commit", batch, results, began) as coordinator:
        report = coordinator.commit(batch, results, batch_source_offsets(config, batch))
    record_batch(config, owner, batch, report.figures,
                 report_recovery(config, owner, report.recovery, "commit"))
