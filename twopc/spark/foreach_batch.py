"""A foreachBatch sink for existing pipelines: `df.writeStream.foreachBatch(sink).start()`.

Exactly once by batch id, for a deterministic plan (Spark promises the same data for the same batch id
only then). When the check before the intent fails (a transaction ran short of time), the batch was
aborted whole and is written again within the same call, instead of stopping the query. Any other
failure of the commit stops the query with its error, once the batch is settled as Spark's abort()
settles a kafka2pc batch (driver.py `settle_failed_commit`): nothing is left open until the timeout.

Design: docs/design.md section 7.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import TYPE_CHECKING

from twopc.errors import GuardFailed
from twopc.protocol.owner import Owner
from twopc.spark.collect import write_tasks
from twopc.spark.driver import (
    abort_batch,
    prepare,
    record_batch,
    report_recovery,
    settle_failed_commit,
)
from twopc.spark.errors import MissingQueryIdentity, OptionError
from twopc.spark.offsets_log import batch_source_offsets
from twopc.spark.option_checks import check_trigger, query_trigger_ms
from twopc.spark.options import SOURCE_OFFSETS, SPARK_CHECKPOINT, parse_options
from twopc.spark.reuse import driver_side
from twopc.spark.schema import check_schema

if TYPE_CHECKING:
    from pyspark.sql import DataFrame

_log = logging.getLogger(__name__)


class ExactlyOnceKafkaSink:
    """Options as for format("kafka2pc") (no twopc.jobId: the query is the owner)."""

    def __init__(self, options: Mapping[str, str], *, attempts_per_batch: int = 3) -> None:
        self.config = parse_options(options, streaming=True)
        if self.config.source_offsets_group is not None and not self.config.spark_checkpoint:
            raise OptionError(
                f"option {SOURCE_OFFSETS} reads each batch's end offsets from Spark's offsets log: "
                f"give the query's {SPARK_CHECKPOINT} among the sink's options too")
        if attempts_per_batch < 1:
            raise ValueError("attempts_per_batch must be at least 1")
        self.attempts_per_batch = attempts_per_batch
        self._trigger_checked: set[str] = set()  # query ids whose trigger passed the check

    def __call__(self, batch_df: DataFrame, batch_id: int) -> None:
        context = batch_df.sparkSession.sparkContext
        query_id = context.getLocalProperty("sql.streaming.queryId")
        if not query_id:
            raise MissingQueryIdentity(
                "ExactlyOnceKafkaSink must be called by a streaming query's foreachBatch: it binds "
                "the twopc log to the query id"
            )
        check_schema(batch_df.schema, self.config.topic)
        if query_id not in self._trigger_checked:
            # The query's own trigger, known here (the driver's process) unlike in kafka2pc.
            trigger = query_trigger_ms(batch_df.sparkSession, query_id)
            if trigger:
                check_trigger(self.config, trigger,
                              f"the query's trigger (processingTime {trigger} ms)")
            self._trigger_checked.add(query_id)
        owner = Owner.query(query_id, self.config.prefix)
        batch = str(batch_id)
        prepare(self.config, owner)
        for attempt in range(1, self.attempts_per_batch + 1):
            with driver_side(self.config, owner) as side:
                if side.gate.is_committed(batch):
                    _log.info("twopc: batch %s of query %s is already committed", batch, query_id)
                    return
                offsets = batch_source_offsets(self.config, batch)  # before anything opens
                try:
                    results = write_tasks(batch_df, self.config, owner, batch)
                except BaseException:
                    abort_batch(self.config, owner, batch, [])
                    raise
                try:
                    report = side.coordinator.commit(batch, results, offsets)
                except GuardFailed as exc:
                    # Nothing of the batch is visible and the abort is recorded: write it again.
                    if attempt == self.attempts_per_batch:
                        settle_failed_commit(self.config, owner, batch, results, exc)
                        raise
                    _log.warning("twopc: batch %s written again (%d/%d): %s",
                                 batch, attempt + 1, self.attempts_per_batch, exc)
                    continue
                except BaseException as exc:
                    settle_failed_commit(self.config, owner, batch, results, exc)
                    raise
            record_batch(self.config, owner, batch, report.figures,
                         report_recovery(self.config, owner, report.recovery, "commit"))
            return
