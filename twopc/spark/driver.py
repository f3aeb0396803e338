"""The driver side of every Spark entry point (data source, foreachBatch sink, job function).

`prepare` (bind the log to its owner, guards at start, a batch job's lease on its family's log,
recovery) before any task writes, then `commit_batch` or `abort_batch`. What each call did goes to
the `twopc` log lines and, for a streaming query, to the journal (journal.py) that
TwopcProgressListener reads. Nothing the protocol needs is kept between calls (it is all in the
checkpoint log and the messages): what a reused worker keeps is only a speed-up (reuse.py).

Design: docs/design.md section 7.
"""

from __future__ import annotations

import json
import logging
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any

from twopc.driver import observe
from twopc.errors import JobFamilyBusy, LogOwnershipLost, TwopcError
from twopc.protocol.handle import WriteResult
from twopc.protocol.owner import Owner, OwnerKind
from twopc.spark.errors import MissingQueryIdentity
from twopc.spark.journal import Journal, batch_entry, record_safely, recovery_entry
from twopc.spark.offsets_log import batch_source_offsets, spark_checkpoint_file
from twopc.spark.option_checks import check_at_start
from twopc.spark.options import SPARK_CHECKPOINT, SinkConfig
from twopc.spark.reuse import DriverSide, driver_side

if TYPE_CHECKING:
    from twopc.driver.recovery_report import RecoveryReport

_log = logging.getLogger("twopc")


def job_owner(config: SinkConfig) -> Owner:
    """Batch jobs of one prefix share a log; each job id is a batch of it."""
    return Owner.jobs(config.prefix)


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


# ---- before the tasks ---------------------------------------------------------------------------

# Guards at start ask the cluster (a few round trips); a driver-side Python worker is reused across
# micro-batches, so remember which configurations already passed. Only an optimization: a new process
# (a restart) checks again.
_checked: set[tuple[str, str, int, int | None]] = set()
_checked_lock = threading.Lock()


def new_run() -> str:
    """The id of one run of a batch job (its lease, twopc/driver/lease.py)."""
    return uuid.uuid4().hex


def prepare(config: SinkConfig, owner: Owner, job: str | None = None,
            run: str | None = None, first_look: bool = True) -> bool:
    """Before any task of a new query, micro-batch or job writes. Returns True if `job` (a job id)
    is already committed: its re-run must write nothing.

    A batch job's run (`job` and `run` given) first takes its family's lease (JobFamilyBusy while
    another job of the family runs; twopc/driver/lease.py), then recovers; a run of a committed job
    takes nothing and recovers nothing (it writes nothing, and another job may be running), but
    proves from the log that the job's records ended committed (StrandedCommitAborted if not),
    unless another run of the same job still holds the lease: that one died after the job's
    `committed` record, and this run takes the lease over, recovers and lets it go.
    `first_look`: whether recovery proves the newest committed batch from the log when this
    process has not seen it (Recovery.recover); the streaming writer's planning process, which
    runs this before every micro-batch and never commits, leaves that to the committing one."""
    key = (config.prefix, json.dumps(config.producer_config, sort_keys=True),
           config.transaction_timeout_ms, config.trigger_interval_ms)
    with _checked_lock:
        first = key not in _checked
    if first:
        check_at_start(config, streaming=owner.kind is OwnerKind.QUERY)
        with _checked_lock:
            _checked.add(key)
    with driver_side(config, owner) as side:
        leased = job is not None and run is not None
        if leased:
            assert job is not None and run is not None
            if side.gate.is_committed(job):
                if side.leases.left_by_another_run(job, run):
                    return _take_over_committed(config, owner, side, job, run, first_look)
                if first_look:  # its committing run may have died before its check
                    side.recovery.look_at(job)
                return True
            side.leases.acquire(job, run, config.job_lease_ms)
        try:
            # Recovery first (it binds the log): a job whose earlier run crashed after its intent
            # is rolled forward here and then counts as committed.
            try:
                recovered = side.recovery.recover(first_look=first_look)
            except TwopcError as exc:  # UndecidedError carries what was done before it stopped
                report_recovery(config, owner, getattr(exc, "report", None), "prepare")
                raise
            report_recovery(config, owner, recovered, "prepare")
            committed = job is not None and side.gate.is_committed(job)
        except BaseException:
            if leased:
                release_lease(config, owner, run)
            raise
        if committed and leased:
            release_lease(config, owner, run)
        return committed


def _take_over_committed(config: SinkConfig, owner: Owner, side: DriverSide, job: str, run: str,
                         first_look: bool) -> bool:
    """Job `job` is committed, and another run of it still holds the family: one that died (or
    is held up) after the job's `committed` record, before its release, which would keep every
    other job of the family refused until the lease expires. Take the lease over, finish what
    that run left (recovery: its first look and stranded check, the sweep that fences the
    orphans its record names), then let the family go. The job is committed whatever happens
    to the lease here: losing it to another driver (it expired and another job took it, or a
    second re-run took it over) is logged, not raised. What recovery finds (a loss, a commit it
    cannot verify) is raised, as for any run, and then, with the lease let go, the job's look
    (`look_at`) as for any re-run of a committed job."""
    try:
        side.leases.acquire(job, run, config.job_lease_ms)
    except (JobFamilyBusy, LogOwnershipLost) as exc:
        _log.warning("twopc: job %s is committed; taking over the lease its earlier run left "
                     "failed (another driver has it now): %s", job, exc)
        if first_look:  # reading only: no lease needed
            side.recovery.look_at(job)
        return True
    try:
        recovered = side.recovery.recover(first_look=first_look)
        report_recovery(config, owner, recovered, "prepare")
    except LogOwnershipLost as exc:  # a second re-run took it over in turn: it finishes
        _log.warning("twopc: job %s is committed; another run of it took the lease over while "
                     "this one recovered: %s", job, exc)
    except TwopcError as exc:
        report_recovery(config, owner, getattr(exc, "report", None), "prepare")
        raise
    finally:
        release_lease(config, owner, run)
    if first_look:  # as any re-run of a committed job: proven (recovery's look is remembered), or said
        side.recovery.look_at(job)
    return True


def release_lease(config: SinkConfig, owner: Owner, run: str | None) -> None:
    """End the lease of a batch job's run, if it holds it (best effort: an error is logged, and
    the lease then ends at its expiry)."""
    if run is None or owner.kind is not OwnerKind.JOB:
        return
    try:
        with driver_side(config, owner) as side:
            side.leases.release(run)
    except Exception as exc:
        _log.warning("twopc: ending the lease of run %s failed (it ends at its expiry): %s: %s",
                     run, type(exc).__name__, exc)

# ---- after the tasks ----------------------------------------------------------------------------


def commit_batch(config: SinkConfig, owner: Owner, batch: str, results: list[WriteResult],
                 run: str | None = None) -> None:
    """Spark's commit of a micro-batch or a job (a micro-batch with its source offsets, under
    twopc.commitSourceOffsets): the core's commit, then what the settling of an open intent did,
    if it had to, logged, and for a query the batch's figures left in the journal. A job's `run`
    ends its lease once committed (on a failure, Spark's abort() does)."""
    began = time.monotonic()
    with _observed_call(config, owner, "commit", batch, results, began) as side:
        report = side.coordinator.commit(batch, results, batch_source_offsets(config, batch))
    release_lease(config, owner, run)
    record_batch(config, owner, batch, report.figures,
                 report_recovery(config, owner, report.recovery, "commit"))


# How long abort() waits before its second sweep: PySpark's default task kill timeout plus a margin.
STRAGGLER_WAIT_S = 4.0


def abort_batch(config: SinkConfig, owner: Owner, batch: str, results: list[WriteResult], *,
                reason: str = "Spark aborted the batch", stragglers: bool = True,
                run: str | None = None) -> str:
    """Spark's abort (or a failed job or commit): the core's abort, then a sweep of the prefix.
    Returns what became of an open intent: "rolled_forward" (settled as recovery does) or
    "fenced" (there was none). `reason` goes into the record of the fenced transactions. A job's
    `run` ends its lease after that (whatever happened).

    A failed task's message is None (on PySpark 4.3 a failed job hands abort() None for *every*
    task, the successful ones too), so the pre-committed transactions of this batch are unknown to
    the driver; recovery's sweep lists the prefix's open transactions and fences those that no
    record names, so that they stop holding back read_committed consumers now, not at their timeout.

    Spark calls abort() once the job has failed, without waiting for its other tasks to stop: a task
    still running may pre-commit just after the first sweep. PySpark kills an interrupted task's
    Python worker within spark.python.task.killTimeout (2 s by default), so a second sweep after
    STRAGGLER_WAIT_S finds what such tasks left open (seen in tests: a job failed by one bad row, its
    other tasks' transactions open until their timeout). Without `stragglers` (every task had
    finished: a failed commit) one sweep is enough.
    """
    began = time.monotonic()
    try:
        with _observed_call(config, owner, "abort", batch, results, began) as side:
            aborted = side.coordinator.abort(batch, results, reason)
            rolled = report_recovery(config, owner, aborted.recovery, "abort")
            swept = report_recovery(config, owner, side.recovery.recover(), "abort")
            if stragglers:
                time.sleep(STRAGGLER_WAIT_S)
                again = report_recovery(config, owner, side.recovery.recover(), "abort")
                swept = again if again is not None and again["acted"] else swept
    finally:
        release_lease(config, owner, run)
    outcome = "rolled_forward" if aborted.recovery is not None else "fenced"
    record_batch(config, owner, batch, _figures_of("abort", batch, outcome, results, began),
                 rolled or swept)
    return outcome


def settle_failed_commit(config: SinkConfig, owner: Owner, batch: str,
                         results: list[WriteResult], failure: BaseException,
                         run: str | None = None) -> None:
    """After a commit of `batch` (foreachBatch, write_exactly_once) raised `failure`: settle the
    batch as Spark's abort() does for the data source, then let the caller raise `failure`.

    Whatever failed (the checkpoint storage before or after the intent, the control client, a
    guard), the batch's pre-committed transactions may still be open, holding read_committed
    consumers back until transaction.timeout.ms: an intent recorded (its write may have landed
    though it reported an error) is the commit decision and is rolled forward, the batch's other
    transactions are fenced, and the prefix is swept. Every task had finished, so one sweep is
    enough. `failure` gets a note saying what became of the batch (committed or not visible);
    if settling fails too, the note says that instead (the next run's recovery settles it). A
    job's `run` ends its lease.
    """
    what = f"job {batch}" if owner.kind is OwnerKind.JOB else f"batch {batch}"
    try:
        outcome = abort_batch(config, owner, batch, results, stragglers=False, run=run, reason=(
            f"the commit failed: {type(failure).__name__}: {failure}")[:1000])
        with driver_side(config, owner) as side:
            committed = side.gate.is_committed(batch)
    except Exception as exc:
        _add_note(failure, f"twopc: settling {what} after this failure failed too "
                  f"({type(exc).__name__}: {exc}); its transactions stay open until "
                  "transaction.timeout.ms, or until the next run's recovery settles them")
        return
    if committed:
        how = ("its intent had been recorded, and settling rolled it forward" if
               outcome == "rolled_forward" else "it was committed before the failure")
        _add_note(failure, f"twopc: {what} is committed ({how}): a re-run writes nothing")
    else:
        _add_note(failure, f"twopc: nothing of {what} is visible: its transactions were fenced "
                  "after this failure (and the prefix's other open ones swept); a re-run writes "
                  "it again")


def _add_note(exc: BaseException, note: str) -> None:
    """The note goes on the error (Python 3.11+) and into the `twopc` log."""
    _log.warning("%s (after %s: %s)", note, type(exc).__name__, exc)
    add = getattr(exc, "add_note", None)
    if add is not None:
        add(note)


@contextmanager
def _observed_call(config: SinkConfig, owner: Owner, event: str, batch: str,
                   results: list[WriteResult], began: float) -> Iterator[DriverSide]:
    """A driver call whose failure still reaches the journal: its figures (outcome: the error's
    class) and whatever its recovery did before it stopped (UndecidedError carries that report)."""
    with driver_side(config, owner) as side:
        try:
            yield side
        except TwopcError as exc:
            recovery = report_recovery(config, owner, getattr(exc, "report", None), event)
            record_batch(config, owner, batch,
                         _figures_of(event, batch, type(exc).__name__, results, began), recovery)
            raise


def _figures_of(event: str, batch: str, outcome: str, results: list[WriteResult],
                began: float) -> observe.BatchFigures:
    handles = [r.handle for r in results if r.handle is not None]
    return observe.figures(event, batch, outcome, handles, committed=0,
                           now_ms=time.time_ns() // 1_000_000,
                           latency_ms=(time.monotonic() - began) * 1000)


# ---- what the calls did -------------------------------------------------------------------------


def report_recovery(config: SinkConfig, owner: Owner, report: RecoveryReport | None,
                    where: str) -> dict[str, Any] | None:
    """What a recovery did: a JSON line on logger ``twopc`` (WARNING when it acted) and, for a
    streaming query, the journal's ``recovery.json`` that TwopcProgressListener reports on the
    driver. Returns the summary, or None without a report."""
    if report is None:
        return None
    summary = observe.recovery_summary(report, where=where)
    observe.log_recovery(summary)
    if summary["acted"] and owner.kind is OwnerKind.QUERY:
        record_safely("a recovery report", journal_of(config).write_recovery,
                      recovery_entry(owner.owner_id, summary))
    return summary


def journal_of(config: SinkConfig) -> Journal:
    return Journal(config.checkpoint_url, config.storage_options)


def record_batch(config: SinkConfig, owner: Owner, batch: str, fig: observe.BatchFigures | None,
                 recovery: dict[str, Any] | None = None) -> None:
    """Leave one micro-batch's figures (of its commit or abort) for the listener (streaming
    queries only)."""
    if fig is None or owner.kind is not OwnerKind.QUERY:
        return
    record_safely(f"the figures of batch {batch}", journal_of(config).write_batch, batch,
                  batch_entry(owner.owner_id, fig, recovery), fig.event)
