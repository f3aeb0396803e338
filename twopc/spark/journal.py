"""Per-batch figures beside the twopc log, for whoever was not in the process that made them.

In Spark the figures of a micro-batch (observe.BatchFigures) and what a recovery did are known in a
driver-side Python worker, not in the driver process where users look (logs, listeners). The worker
leaves them here, under ``<twopc.checkpoint>/observe/``, and `TwopcProgressListener` reads them on
the driver:

- ``observe/batch-<id>.json``: the commit of micro-batch ``id``, written before commit() returns,
  hence before Spark writes its own commit log and posts the batch's progress event;
  ``observe/batch-<id>-abort.json``: Spark's abort of it, if it came to that;
- ``observe/recovery.json``: the last recovery that acted (rolled forward, fenced, recorded an
  outcome), overwritten by the next one; ``at_ms`` tells them apart.

These files are hints for people, never read by the protocol: written without fsync, replaced
whole, and the batch files are pruned to the last ``KEEP_BATCHES``. A failure to write one is logged
and ignored (the commit has happened; losing a figure must not fail the batch).

Design: docs/design.md section 7.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Mapping
from typing import Any

from twopc.driver import observe
from twopc.spark.errors import JournalError

_log = logging.getLogger(__name__)

DIRECTORY = "observe"
RECOVERY = "recovery.json"
KEEP_BATCHES = 100
FORMAT = 1


EVENTS = ("commit", "abort")


def batch_name(batch: str, event: str = "commit") -> str:
    if event not in EVENTS:
        raise ValueError(f"event must be one of {EVENTS}, got {event!r}")
    return f"batch-{batch}.json" if event == "commit" else f"batch-{batch}-{event}.json"


def batch_entry(owner_id: str, fig: observe.BatchFigures,
                recovery: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Pure: the JSON document of one batch's figures."""
    return {
        "format": FORMAT,
        "owner_id": owner_id,
        "at_ms": time.time_ns() // 1_000_000,
        "figures": fig.as_dict(),
        "metrics": observe.metrics(fig),
        "recovery": dict(recovery) if recovery is not None else None,
    }


def recovery_entry(owner_id: str, summary: Mapping[str, Any]) -> dict[str, Any]:
    return {"format": FORMAT, "owner_id": owner_id, "at_ms": time.time_ns() // 1_000_000,
            "recovery": dict(summary)}


class Journal:
    """The ``observe/`` directory of one twopc log (any fsspec URL, as the log itself), through the
    checkpoint's own store: a whole-file overwrite (temporary file and rename locally, one PUT on
    object stores), without fsync (these are hints)."""

    def __init__(self, checkpoint_url: str, storage_options: Mapping[str, Any] | None = None) -> None:
        from checkpoint.store import open_store

        self.url = checkpoint_url.rstrip("/") + "/" + DIRECTORY
        # Overwrites only, never a create-if-absent: any backend serves.
        self._store = open_store(self.url, dict(storage_options or {}), allow_unconditional=True)

    def _put(self, name: str, doc: Mapping[str, Any]) -> None:
        self._store.put(name, json.dumps(doc, sort_keys=True).encode(), durable=False)

    def _get(self, name: str) -> dict[str, Any] | None:
        """The document, None if there is none; JournalError for one twopc did not write."""
        data = self._store.get(name)
        if data is None:
            return None
        where = f"{self.url}/{name}"
        try:
            doc = json.loads(data)
        except ValueError as exc:
            raise JournalError(where, f"not JSON: {exc}") from exc
        problem = _shape_problem(doc, name != RECOVERY)
        if problem is not None or not isinstance(doc, dict):
            raise JournalError(where, problem or "not an object")
        return doc

    # --- writers (driver-side workers) ---------------------------------------------------

    def write_batch(self, batch: str, entry: Mapping[str, Any], event: str = "commit") -> None:
        self._put(batch_name(batch, event), entry)
        if batch.isdigit() and int(batch) >= KEEP_BATCHES:
            old = str(int(batch) - KEEP_BATCHES)
            for name in (batch_name(old, e) for e in EVENTS):
                with _quiet():
                    self._store.delete(name)

    def write_recovery(self, entry: Mapping[str, Any]) -> None:
        self._put(RECOVERY, entry)

    # --- readers (the listener, operators) -----------------------------------------------

    def read_batch(self, batch: str, event: str = "commit") -> dict[str, Any] | None:
        return self._get(batch_name(batch, event))

    def read_recovery(self) -> dict[str, Any] | None:
        return self._get(RECOVERY)


def _number(value: Any) -> bool:
    return type(value) in (int, float) and math.isfinite(value)


def _shape_problem(doc: Any, batch: bool) -> str | None:
    """What is wrong with a journal document (None: it is as batch_entry/recovery_entry write)."""
    if not isinstance(doc, dict):
        return f"a {type(doc).__name__}, not an object"
    if doc.get("format") != FORMAT or type(doc.get("format")) is not int:
        return f"format {doc.get('format')!r:.20}, this code reads {FORMAT}"
    if type(doc.get("at_ms")) is not int or not isinstance(doc.get("owner_id"), str):
        return "no at_ms (int) or owner_id (string)"
    recovery = doc.get("recovery")
    if recovery is not None and not isinstance(recovery, dict):
        return "recovery is not an object"
    if not batch:
        return None if isinstance(recovery, dict) else "no recovery object"
    figures, metrics = doc.get("figures"), doc.get("metrics", {})
    if not isinstance(figures, dict) or not isinstance(metrics, dict):
        return "figures or metrics is not an object"
    if not _number(figures.get("commit_latency_ms")):
        return "figures.commit_latency_ms is not a number"
    ratio = figures.get("oldest_txn_age_ratio")
    if ratio is not None and not _number(ratio):
        return "figures.oldest_txn_age_ratio is not a number"
    if not all(_number(v) for v in metrics.values()):
        return "a metric is not a number"
    return None


class _quiet:
    """Suppress and log a storage error: the journal is a hint, never a reason to fail a batch."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: object) -> bool:
        from checkpoint import CheckpointError

        if exc is not None and isinstance(exc, OSError | CheckpointError):
            _log.debug("twopc journal: %s", exc)
            return True
        return False


def record_safely(action: str, write: Any, *args: Any) -> None:
    """Run a journal write; on any storage error, log it and go on."""
    try:
        write(*args)
    except Exception as exc:  # the journal is a hint: any failure is reported, never raised
        _log.warning("twopc: could not write %s to the observe journal: %s", action, exc)
