"""The job-id index: a batch job's id outlives the purge of its records (docs/design.md section 5).

A committed job's id goes into the log's index (a key per job, never purged), so that a late
re-run of an old job still writes nothing. The driver writes it as soon as it knows, and the purge
(`plans.plan_purge`) indexes every committed job whose records it removes before the mark moves.
"""

from __future__ import annotations

import contextlib

from checkpoint import KeyExists, Log
from twopc.protocol.owner import Owner, OwnerKind
from twopc.protocol.plans import job_state
from twopc.protocol.state import BatchState, BatchStatus, LogState


def job_key(batch: str) -> str:
    return f"job:{batch}"


def remember_job(log: Log, batch: str, seq: int) -> None:
    """Put a committed job into the index (a retry finds it there already: the same fact).
    Looked up first: the purge asks again for every job it cuts, though the job's commit
    indexed it, and a refused create still costs a durable write (a temporary file and fsync
    locally, a conditional PUT on S3): about 1.3 ms a purge (benchmarks/bench_log_growth.py)."""
    if log.index.get(job_key(batch)) is not None:
        return
    with contextlib.suppress(KeyExists):
        log.index.create(job_key(batch), {"seq": seq})


def batch_state(log: Log, owner: Owner, state: LogState, batch: str) -> BatchState:
    """The batch as the log shows it; for a batch job, also as the job-id index does (its records
    may be purged). The log is read first: a purge indexes a job before its records go, so a job
    this read did not find in the log is in the index by the time it is asked."""
    found = state.batch(batch)
    if owner.kind is not OwnerKind.JOB or found.status is BatchStatus.COMMITTED:
        return found
    return job_state(found, log.index.get(job_key(batch)) is not None)
