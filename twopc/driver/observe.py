"""What twopc tells operators about each batch: one JSON log line per commit, abort and recovery.

The figures are computed by pure functions from the handles and two clock readings, so that the
same numbers reach the log (logger ``twopc``, one line each, machine-readable) and, through
:func:`metrics`, whatever the Spark side publishes (custom metrics, a listener). The oldest
transaction's age against its timeout is the guard margin of docs/design.md section 4, guard 5: a
ratio near 1 means the next slow batch loses its transactions to the coordinator's timeout.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

from twopc.protocol.clock import coordinator_now
from twopc.protocol.handle import Handle

if TYPE_CHECKING:
    from twopc.driver.recovery_report import RecoveryReport

LOGGER_NAME = "twopc"
logger = logging.getLogger(LOGGER_NAME)

EVENTS = ("commit", "abort", "recovery")
# A commit whose oldest transaction was this old, as a fraction of its timeout, warns (guard 5):
# a batch that took twice as long would have lost its transactions (docs/design.md section 4).
AGE_WARNING_RATIO = 0.5
# Outcomes that need no operator: anything else is logged at WARNING.
_QUIET_OUTCOMES = frozenset({"committed", "already_committed", "repaired", "empty", "aborted",
                             "fenced", "rolled_forward"})


@dataclass(frozen=True)
class BatchFigures:
    """The figures of one driver call for one batch (the JSON log line's fields)."""

    event: str  # commit / abort / recovery
    batch: str
    outcome: str  # a CommitReport status, a BatchOutcome value, or the error's class name
    records: int  # records in the batch's transactions
    transactions: int  # the batch's transactions
    committed_transactions: int  # of which this call saw committed
    commit_latency_ms: float  # the driver call's duration (monotonic clock)
    oldest_txn_age_ms: int | None  # the oldest transaction's age (coordinator clock, estimated)
    oldest_txn_timeout_ms: int | None  # that transaction's transaction.timeout.ms
    oldest_txn_age_ratio: float | None  # age / timeout: 1.0 is when the coordinator aborts it

    def as_dict(self) -> dict[str, str | int | float | None]:
        return asdict(self)


def oldest_transaction(handles: Sequence[Handle], now_ms: int) -> tuple[int, int] | None:
    """(age, timeout) of the handle closest to its timeout, on the coordinator's clock as the
    guard estimates it; None without handles."""
    if not handles:
        return None
    coord_now, _ = coordinator_now(handles, now_ms)
    worst = max(handles, key=lambda h: (coord_now - h.start_ms) / max(h.timeout_ms, 1))
    return max(0, coord_now - worst.start_ms), worst.timeout_ms


def figures(event: str, batch: str, outcome: str, handles: Sequence[Handle], *,
            committed: int, now_ms: int, latency_ms: float) -> BatchFigures:
    """Pure: the figures of one call that dealt with `handles`."""
    if event not in EVENTS:
        raise ValueError(f"event must be one of {EVENTS}, got {event!r}")
    oldest = oldest_transaction(handles, now_ms)
    age, timeout = oldest if oldest is not None else (None, None)
    ratio = None if age is None or not timeout else round(age / timeout, 4)
    return BatchFigures(event, batch, outcome, sum(h.record_count for h in handles), len(handles),
                        committed, round(latency_ms, 3), age, timeout, ratio)


def age_warning(fig: BatchFigures) -> str | None:
    """Pure: what to tell the operator when a batch's oldest transaction had reached
    AGE_WARNING_RATIO of its timeout at the end of its commit, with the fix; None otherwise."""
    ratio, age, timeout = fig.oldest_txn_age_ratio, fig.oldest_txn_age_ms, fig.oldest_txn_timeout_ms
    if ratio is None or age is None or not timeout or age < timeout * AGE_WARNING_RATIO:
        return None  # the age itself, not the rounded ratio
    return (
        f"batch {fig.batch}: its oldest transaction was {age} ms old when its commit ended, "
        f"{ratio:.0%} of its transaction.timeout.ms ({timeout} ms). A batch that takes twice as "
        "long is aborted whole before its commit (GuardFailed) or loses its transactions to the "
        "coordinator's timeout. Make batches smaller (rate-limit the source: maxOffsetsPerTrigger, "
        "maxFilesPerTrigger; trigger more often) or faster, or raise twopc.transactionTimeoutMs "
        "(within the brokers' transaction.max.timeout.ms)")


def log_batch(fig: BatchFigures) -> None:
    """One JSON line on logger ``twopc``; the dict also rides along as ``record.twopc`` for
    handlers that format records themselves."""
    fields = fig.as_dict()
    level = logging.INFO if fig.outcome in _QUIET_OUTCOMES else logging.WARNING
    logger.log(level, json.dumps(fields, sort_keys=True), extra={"twopc": fields})


def metrics(fig: BatchFigures | None) -> dict[str, float]:
    """The numeric figures, for the Spark side to publish (custom metrics take numbers only).
    A missing figure (no transaction, hence no oldest one) is left out rather than faked."""
    if fig is None:
        return {}
    values = {
        "records": fig.records,
        "transactions": fig.transactions,
        "committed_transactions": fig.committed_transactions,
        "commit_latency_ms": fig.commit_latency_ms,
        "oldest_txn_age_ms": fig.oldest_txn_age_ms,
        "oldest_txn_timeout_ms": fig.oldest_txn_timeout_ms,
        "oldest_txn_age_ratio": fig.oldest_txn_age_ratio,
    }
    return {k: float(v) for k, v in values.items() if v is not None}


def recovery_summary(report: RecoveryReport, *, where: str) -> dict[str, Any]:
    """Pure: what one recovery did, as plain data (a JSON log line, the journal, the listener).

    `where` names the driver call that ran it (``prepare``, ``commit``, ``abort``): in Spark each
    runs in its own driver-side worker, whose log an operator rarely sees.
    """
    return {
        "event": "recovery_report",
        "where": where,
        "acted": recovery_acted(report),
        "summary": report.summary(),
        "batches": {b.batch: b.outcome.value for b in report.batches},
        "rolled_forward": list(report.rolled_forward),
        "orphans_fenced": list(report.orphans_fenced),
        "fence_failures": dict(sorted(report.fence_failures.items())),
        "stranded_released": list(report.stranded.released),
        "stranded_unreleased": [n.transactional_id for n in report.stranded.unreleased],
        "undecided": [b.batch for b in report.undecided],
        "lost_partitions": {b.batch: b.lost_partitions for b in report.batches
                            if b.lost_partitions},
    }


def recovery_acted(report: RecoveryReport) -> bool:
    """Did recovery find anything to do? (A clean restart, or every micro-batch of a healthy query,
    finds nothing: such a report is logged at DEBUG, an acting one at WARNING: it means a crash.)"""
    return bool(report.batches or report.rolled_forward or report.orphans_fenced
                or report.fence_failures or report.stranded.released
                or report.stranded.unreleased)


def log_recovery(summary: dict[str, Any]) -> None:
    level = logging.WARNING if summary.get("acted") else logging.DEBUG
    logger.log(level, json.dumps(summary, sort_keys=True), extra={"twopc": summary})


_worker_handler: logging.Handler | None = None


def show_in_worker_log() -> None:
    """Make twopc's WARNING lines reach stderr in a Spark driver-side Python worker.

    Such a worker (where a Python data source's writer(), streamWriter(), commit() and abort() run)
    has no logging configuration, so lines go nowhere but through logging's last resort; Spark
    copies the worker's stderr to the driver's. Idempotent; does nothing if the process configured
    logging itself (a handler on the root or the ``twopc`` logger). Not for the user's own driver
    process: its logging is the user's to configure.
    """
    global _worker_handler
    if _worker_handler is not None or logger.handlers or logging.getLogger().handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    handler.setLevel(logging.WARNING)
    logger.addHandler(handler)
    _worker_handler = handler
