"""`write_exactly_once(df, job_id, options)`: a batch job written exactly once, without a format name.

A re-run under the same job id (after a crash, or by mistake) writes nothing and says so in the report.

Design: docs/design.md section 7.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from twopc.spark.collect import write_tasks
from twopc.spark.driver import (
    abort_batch,
    job_owner,
    new_run,
    prepare,
    release_lease,
    report_recovery,
    settle_failed_commit,
)
from twopc.spark.options import JOB_ID, parse_options
from twopc.spark.reuse import driver_side
from twopc.spark.schema import check_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

    from twopc.driver.coordinator import CommitReport
    from twopc.protocol.handle import WriteResult

_log = logging.getLogger(__name__)


ALREADY_COMMITTED = "already_committed"


@dataclass(frozen=True)
class JobReport:
    """What this run of the job made visible."""

    job_id: str
    rows: int  # records this run made visible
    transactions: int  # Kafka transactions this run committed
    # The commit's status (CommitReport.status): "committed" (all of the job, by this run),
    # "repaired" (the part an earlier, partly committed run had not made visible), "copied" (what
    # an earlier run decided and the broker aborted, from the topic's copy), "empty" (no
    # rows), "already_committed" (by an earlier or a concurrent run: nothing of this run is visible).
    status: str
    # What else happened, e.g. that another driver finished committing this run's transactions.
    note: str = ""

    @property
    def skipped(self) -> bool:
        """True: the job was already committed; this run made nothing visible."""
        return self.status == ALREADY_COMMITTED

    def __str__(self) -> str:
        return self._text() + (f" ({self.note})" if self.note else "")

    def _text(self) -> str:
        if self.skipped:
            return (f"job {self.job_id} was already committed (by an earlier or a concurrent run): "
                    "nothing of this run is visible")
        if self.status == "repaired":
            return (f"job {self.job_id}: {self.rows} rows committed in {self.transactions} "
                    "transactions, the part that a partly committed earlier run had not made "
                    "visible (a repair: its visible partitions were not written again)")
        if self.status == "copied":
            return (f"job {self.job_id}: {self.rows} rows committed in {self.transactions} "
                    "transactions, copied forward from the topic's own copy of what an earlier "
                    "run had decided to commit and the broker aborted (twopc.repairPolicy); this "
                    "run's rows were fenced, not written")
        if self.status == "empty":
            return f"job {self.job_id}: no rows; committed as an empty job"
        return f"job {self.job_id}: {self.rows} rows committed in {self.transactions} transactions"


def job_report(job_id: str, commit: CommitReport, results: Sequence[WriteResult]) -> JobReport:
    """Count only the transactions that the commit says this run committed (a duplicate of a
    visible partition, or of a job another run committed first, was fenced, not committed)."""
    if commit.status == "copied":  # the copies are visible, this run's rows fenced
        return JobReport(job_id, commit.copied_records, len(commit.committed), commit.status,
                         "; ".join(commit.notes))
    committed = set(commit.committed)
    mine = [r for r in results if r.handle is not None and r.handle.transactional_id in committed]
    return JobReport(job_id, sum(r.rows for r in mine), len(mine), commit.status,
                     "; ".join(commit.notes))


def write_exactly_once(
    df: DataFrame, job_id: str, options: Mapping[str, str] | None = None, **more: str
) -> JobReport:
    """Write `df` to Kafka exactly once under `job_id`. Options as for format("kafka2pc")
    (`options` for dotted names, keyword arguments such as topic=... for plain ones)."""
    merged: dict[str, str] = {**(options or {}), **more}
    if any(key.lower() == JOB_ID.lower() for key in merged):
        raise TypeError(f"give the job id as the job_id argument, not as the option {JOB_ID}")
    config = parse_options({**merged, JOB_ID: job_id}, streaming=False)
    check_schema(df.schema, config.topic)
    owner = job_owner(config)
    run = new_run()
    # JobFamilyBusy if another job of the family runs (twopc/driver/lease.py).
    if prepare(config, owner, job_id, run):
        report = JobReport(job_id, 0, 0, ALREADY_COMMITTED)
        _log.warning("twopc: %s", report)
        return report
    with driver_side(config, owner) as side:
        try:
            with side.leases.kept(job_id, run, config.job_lease_ms):
                results = write_tasks(df, config, owner, job_id)
        except BaseException:
            # Tasks that wrote before the job failed left open transactions: fence them now, so that
            # they do not hold read_committed consumers back until they time out.
            abort_batch(config, owner, job_id, [], run=run)
            raise
        try:
            committed_report = side.coordinator.commit(job_id, results)
        except BaseException as exc:
            # Whatever failed, nothing may stay open until the timeout: settle the job (its
            # intent, if recorded, is rolled forward), then raise with a note of the outcome.
            settle_failed_commit(config, owner, job_id, results, exc, run)
            raise
    release_lease(config, owner, run)
    report_recovery(config, owner, committed_report.recovery, "commit")
    report = job_report(job_id, committed_report, results)
    if report.skipped:
        _log.warning("twopc: %s", report)
    return report
