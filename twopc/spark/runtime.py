"""What every Spark entry point (data source, foreachBatch sink, job function) shares.

Executor side: `task_write` (skip a committed batch, else write and pre-commit one partition).
Driver side: `prepare` (bind the log to its owner, guards at start, recovery) before any task writes,
and `open_coordinator` for commit and abort. No state is kept between calls: everything is in the
checkpoint log and the messages.
"""

from __future__ import annotations

import json
import logging
import threading
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

from twopc.crashpoints import crash_point
from twopc.handle import ResultKind, WriteResult, transactional_id
from twopc.spark.errors import MissingQueryIdentity
from twopc.spark.guards import check_at_start
from twopc.spark.options import SPARK_CHECKPOINT, SinkConfig
from twopc.spark.schema import rows_from_batches

if TYPE_CHECKING:
    import pyarrow as pa

    from twopc.coordinator import Coordinator

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


def open_coordinator(config: SinkConfig, owner: Owner, *, control: bool = True) -> Coordinator:
    from checkpoint import open_log
    from twopc.control import ControlClient
    from twopc.coordinator import Coordinator

    log = open_log(
        config.checkpoint_url,
        config.storage_options,
        allow_unconditional_create=config.allow_unconditional_create,
    )
    # Executors only ask is_committed(), which reads the log: they need no control connection.
    client = ControlClient(config.control_config()) if control else cast(ControlClient, None)
    if config.margin_ms is None:
        return Coordinator(log, client, owner_kind=owner.kind, owner_id=owner.owner_id,
                           prefix=config.prefix)
    return Coordinator(log, client, owner_kind=owner.kind, owner_id=owner.owner_id,
                       prefix=config.prefix, margin_ms=config.margin_ms)


def close_coordinator(coordinator: Coordinator) -> None:
    if coordinator.control is not None:
        coordinator.control.close()


def abort_batch(config: SinkConfig, owner: Owner, batch: str, results: list[WriteResult]) -> None:
    """Spark's abort (or a failed job): the core's abort, then a sweep of the prefix.

    A failed task's message is None (on PySpark 4.3 a failed job hands abort() None for *every*
    task, the successful ones too), so the pre-committed transactions of this batch are unknown to
    the driver; recovery's sweep lists the prefix's open transactions and fences those that no
    record names, so that they stop holding back read_committed consumers now, not at their timeout.
    """
    coordinator = open_coordinator(config, owner)
    try:
        coordinator.abort(batch, results)
        coordinator.recover()
    finally:
        close_coordinator(coordinator)


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
    coordinator = open_coordinator(config, owner)
    try:
        coordinator.bind()
        # Recovery first: a job whose earlier run crashed after its intent is rolled forward here and
        # then counts as committed.
        coordinator.recover()
        return job is not None and coordinator.is_committed(job)
    finally:
        close_coordinator(coordinator)


def query_id_from_spark_checkpoint(spark_checkpoint: str | None) -> str:
    """Spark's query id lives in `<checkpointLocation>/metadata`, written when the query is created."""
    if not spark_checkpoint:
        raise MissingQueryIdentity(
            f"a streaming write through kafka2pc needs the option {SPARK_CHECKPOINT!r} on the query "
            "(writeStream.option('checkpointLocation', ...)): twopc binds its log to the query id kept "
            "there, so that a query on a new Spark checkpoint cannot skip batches of an old one"
        )
    import fsspec

    url = spark_checkpoint.rstrip("/") + "/metadata"
    if url.startswith("s3a://"):
        url = "s3://" + url[len("s3a://"):]
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
    if coordinator.is_committed(batch):
        return WriteResult(ResultKind.SKIPPED, batch, task_partition, attempt)
    rows = rows_from_batches(batches, task_partition, config.topic)
    result = write_partition(
        config.producer_config,
        transactional_id(config.prefix, task_partition, config.slot(attempt)),
        rows,
        batch=batch,
        task_partition=task_partition,
        attempt=attempt,
        default_topic=config.topic,
        transaction_timeout_ms=config.transaction_timeout_ms,
        budget_ms=config.budget_ms,
    )
    # A task that dies after its pre-commit, before Spark hears of it (tests: retries, orphans).
    crash_point(f"spark.task.precommitted.attempt{attempt}")
    return result


def job_owner(config: SinkConfig) -> Owner:
    """Batch jobs of one prefix share a log; each job id is a batch of it."""
    return Owner(JOB, config.prefix)
