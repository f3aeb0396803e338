"""The executor side of every Spark entry point: one Spark partition written and pre-committed.

Kept apart from the driver side because it runs in another process (an executor's Python worker)
and needs none of the driver's guards, recovery or journal: it only reads the log (to skip a batch
already committed, and to take a free id), and writes (docs/design.md section 2, executor steps 1-6).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from twopc.crashpoints import crash_point
from twopc.protocol.handle import ResultKind, WriteResult
from twopc.protocol.pool import transactional_id
from twopc.spark.reuse import client_for, open_gate, release_client
from twopc.spark.schema import rows_from_batches

if TYPE_CHECKING:
    import pyarrow as pa

    from twopc.protocol.owner import Owner
    from twopc.spark.options import SinkConfig


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
    """Executor side, one Spark partition: docs/design.md section 2, executor steps 1-6."""
    from twopc.executor.writer import write_partition

    if known_committed:
        return WriteResult(ResultKind.SKIPPED, batch, task_partition, attempt)
    # An id a pending intent names or a stranded commit holds is not free (docs/design.md section 5):
    # its InitProducerId would end that transaction.
    slot = open_gate(config, owner).task_slot(batch, task_partition, attempt, config.slots)
    if slot is None:
        return WriteResult(ResultKind.SKIPPED, batch, task_partition, attempt)
    rows = rows_from_batches(batches, task_partition, config.topic)
    # The executor's Python worker runs task after task (spark.python.worker.reuse): its control
    # client (connections, coordinators, leaders) is kept for the next task, as on the driver.
    control = client_for(config)
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
        release_client(config, control, healthy=healthy)
    # A task that dies after its pre-commit, before Spark hears of it (tests: retries, orphans), or
    # one partition's attempt that lingers there (tests: a speculative copy wins meanwhile).
    crash_point(f"spark.task.precommitted.attempt{attempt}")
    crash_point(f"spark.task.precommitted.partition{task_partition}.attempt{attempt}")
    return result
