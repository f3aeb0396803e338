"""`TwopcProgressListener`: each micro-batch's twopc figures, and what recovery did, on the driver.

    listener = twopc.spark.TwopcProgressListener(options)   # the query's kafka2pc options
    spark.streams.addListener(listener)
    ...
    listener.latest.metrics   # {"records": 400.0, "transactions": 4.0, "commit_latency_ms": ...}

PySpark's Python data sources cannot add custom metrics to a query's progress (4.3 has no API
for it), and the commit runs in a driver-side worker whose log users rarely see. That worker leaves
the figures in the journal beside the twopc log (journal.py) before commit() returns, so they are
there when Spark posts the batch's progress event; this listener reads them there, keeps the last
ones, and logs one JSON line per batch on logger ``twopc.spark.listener`` (INFO), and one per
recovery that acted (WARNING). It never raises into Spark: a figure it cannot read is logged and
skipped.

With the option ``twopc.metricsPort``, the listener also serves the metrics exporter in the driver
process (twopc/spark/metrics.py): ``GET http://driver:PORT/metrics``, until `stop_metrics()`.

Design: docs/design.md section 7.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

from checkpoint.redact import redact_url
from twopc.spark.journal import Journal
from twopc.spark.options import parse_options

if TYPE_CHECKING:
    from twopc.ops.metrics import MetricsServer

LOGGER_NAME = "twopc.spark.listener"
_log = logging.getLogger(LOGGER_NAME)


@dataclass(frozen=True)
class BatchProgress:
    """One micro-batch as twopc saw it, next to Spark's own durations for it."""

    query_id: str
    batch_id: int
    figures: dict[str, Any]  # observe.BatchFigures fields: event, outcome, records, ...
    metrics: dict[str, float]  # the numeric ones (observe.metrics)
    recovery: dict[str, Any] | None  # a recovery that acted since the previous batch
    spark_duration_ms: dict[str, int] = field(default_factory=dict)

    def as_dict(self) -> dict[str, Any]:
        return {"event": "batch_progress", "query_id": self.query_id, "batch_id": self.batch_id,
                "figures": self.figures, "recovery": self.recovery,
                "spark_duration_ms": self.spark_duration_ms}


class TwopcProgressListener(StreamingQueryListener):
    """Reports the kafka2pc (or ExactlyOnceKafkaSink) query whose options it is given; progress
    events of other queries are passed over."""

    def __init__(self, options: Mapping[str, str], *, keep: int = 100) -> None:
        super().__init__()
        config = parse_options(options, streaming=True)
        self.checkpoint_url = config.checkpoint_url
        self._journal = Journal(config.checkpoint_url, config.storage_options)
        self._lock = threading.Lock()
        self._batches: deque[BatchProgress] = deque(maxlen=keep)
        self._recoveries: list[dict[str, Any]] = []
        # Files of an earlier run stay in the journal and are not news: report only those written
        # after this listener was made (add it before starting the query).
        self._created_ms = time.time_ns() // 1_000_000
        self._last_recovery_at = self._created_ms
        self._last_batch: dict[str, int] = {}
        self.metrics: MetricsServer | None = None
        if config.metrics_port is not None:
            # Imported here: the executors import twopc.spark and never serve metrics.
            from twopc.spark.metrics import start_metrics

            self.metrics = start_metrics(config)

    def stop_metrics(self) -> None:
        """Stop serving the metrics (twopc.metricsPort); the listener goes on reporting."""
        if self.metrics is not None:
            self.metrics.stop()
            self.metrics = None

    # --- what users read -----------------------------------------------------------------

    @property
    def batches(self) -> list[BatchProgress]:
        with self._lock:
            return list(self._batches)

    @property
    def latest(self) -> BatchProgress | None:
        with self._lock:
            return self._batches[-1] if self._batches else None

    @property
    def recoveries(self) -> list[dict[str, Any]]:
        """Every recovery that acted, as reported (observe.recovery_summary plus ``query_id``)."""
        with self._lock:
            return list(self._recoveries)

    def batch(self, batch_id: int) -> BatchProgress | None:
        with self._lock:
            return next((b for b in self._batches if b.batch_id == batch_id), None)

    # --- Spark's callbacks ---------------------------------------------------------------

    def onQueryStarted(self, event: QueryStartedEvent) -> None:
        pass

    def onQueryIdle(self, event: QueryIdleEvent) -> None:
        pass

    def onQueryProgress(self, event: QueryProgressEvent) -> None:
        try:
            progress = event.progress
            self.observe_batch(str(progress.id), progress.batchId, dict(progress.durationMs))
        except Exception as exc:  # a listener must never fail the query
            _log.warning("twopc listener: cannot report a progress event: %r", exc)

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:
        # A failed batch posts no progress, but its commit or abort left figures (and the abort's
        # recovery) in the journal: report them now.
        try:
            query_id = str(event.id)
            with self._lock:
                last = self._last_batch.get(query_id)
            failed = 0 if last is None else last + 1
            for call in ("commit", "abort"):
                self.observe_batch(query_id, failed, {}, event=call, quiet_if_missing=True)
            self._report_recovery(query_id)
        except Exception as exc:
            _log.warning("twopc listener: cannot report a termination: %r", exc)

    # --- the work ------------------------------------------------------------------------

    def observe_batch(self, query_id: str, batch_id: int, durations: Mapping[str, int],
                      *, event: str = "commit", quiet_if_missing: bool = False) -> BatchProgress | None:
        """Read and report the commit (or abort) of micro-batch `batch_id` of `query_id` (what
        onQueryProgress does)."""
        with self._lock:
            if any((b.query_id, b.batch_id, b.figures.get("event")) == (query_id, batch_id, event)
                   for b in self._batches):
                return None  # reported already (a progress event without new data repeats it)
        entry = self._journal.read_batch(str(batch_id), event)
        if entry is not None and int(entry.get("at_ms", 0)) < self._created_ms:
            entry = None  # left by an earlier run of the query
        if entry is None or entry.get("owner_id") != query_id:
            if entry is None and not quiet_if_missing:
                _log.debug("twopc listener: no figures for batch %s of query %s in %s",
                           batch_id, query_id, redact_url(self._journal.url))
            return None
        recovery = self._report_recovery(query_id)
        if recovery is None and entry.get("recovery") and entry["recovery"].get("acted"):
            recovery = self._note_recovery(query_id, entry["recovery"], entry.get("at_ms", 0))
        item = BatchProgress(query_id, batch_id, dict(entry["figures"]),
                             {k: float(v) for k, v in entry.get("metrics", {}).items()},
                             recovery, {k: int(v) for k, v in durations.items()})
        with self._lock:
            self._batches.append(item)
            self._last_batch[query_id] = max(batch_id, self._last_batch.get(query_id, -1))
        fields = item.as_dict()
        level = logging.INFO if item.figures.get("outcome") in _QUIET else logging.WARNING
        _log.log(level, json.dumps(fields, sort_keys=True), extra={"twopc": fields})
        return item

    def _report_recovery(self, query_id: str) -> dict[str, Any] | None:
        entry = self._journal.read_recovery()
        if entry is None or entry.get("owner_id") != query_id:
            return None
        return self._note_recovery(query_id, entry["recovery"], int(entry.get("at_ms", 0)))

    def _note_recovery(self, query_id: str, summary: Mapping[str, Any],
                       at_ms: int) -> dict[str, Any] | None:
        with self._lock:
            if at_ms <= self._last_recovery_at:
                return None  # reported already
            self._last_recovery_at = at_ms
            report = {**summary, "query_id": query_id, "at_ms": at_ms}
            self._recoveries.append(report)
        _log.warning(json.dumps(report, sort_keys=True), extra={"twopc": report})
        return report


_QUIET = frozenset({"committed", "already_committed", "repaired", "empty"})
