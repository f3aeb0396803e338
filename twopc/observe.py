"""What twopc tells operators about each batch: one JSON log line per commit, abort and recovery.

The figures are computed by pure functions from the handles and two clock readings, so that the
same numbers reach the log (logger ``twopc``, one line each, machine-readable) and, through
:func:`metrics`, whatever the Spark side publishes (custom metrics, a listener). The oldest
transaction's age against its timeout is the guard margin of DESIGN.md section 4, guard 5: a
ratio near 1 means the next slow batch loses its transactions to the coordinator's timeout.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from twopc.guards import coordinator_now
from twopc.handle import Handle

LOGGER_NAME = "twopc"
logger = logging.getLogger(LOGGER_NAME)

EVENTS = ("commit", "abort", "recovery")
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
