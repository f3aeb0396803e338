"""`write_exactly_once(df, job_id, options)`: a batch job written exactly once, without a format name.

A re-run under the same job id (after a crash, or by mistake) writes nothing and says so in the report.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from twopc.handle import ResultKind
from twopc.spark.collect import write_tasks
from twopc.spark.options import JOB_ID, parse_options
from twopc.spark.runtime import abort_batch, driver_coordinator, job_owner, prepare, report_recovery
from twopc.spark.schema import check_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class JobReport:
    job_id: str
    rows: int  # records this run made visible
    transactions: int  # Kafka transactions this run committed
    skipped: bool  # True: the job was already committed, this run wrote nothing

    def __str__(self) -> str:
        if self.skipped:
            return f"job {self.job_id} was already committed: nothing written"
        return f"job {self.job_id}: {self.rows} rows committed in {self.transactions} transactions"


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
    if prepare(config, owner, job_id):
        report = JobReport(job_id, 0, 0, skipped=True)
        _log.warning("twopc: %s", report)
        return report
    with driver_coordinator(config, owner) as coordinator:
        try:
            results = write_tasks(df, config, owner, job_id)
        except BaseException:
            # Tasks that wrote before the job failed left open transactions: fence them now, so that
            # they do not hold read_committed consumers back until they time out.
            abort_batch(config, owner, job_id, [])
            raise
        committed_report = coordinator.commit(job_id, results)
    report_recovery(config, owner, committed_report.recovery, "commit")
    committed = [r for r in results if r.kind is ResultKind.PRECOMMITTED]
    if results and all(r.kind is ResultKind.SKIPPED for r in results):
        return JobReport(job_id, 0, 0, skipped=True)
    return JobReport(job_id, sum(r.rows for r in committed), len(committed), skipped=False)
