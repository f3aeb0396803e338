"""Typed errors of the driver side (coordinator, recovery, guards).

Each says what happened and what to do; none is ever swallowed into a silent loss.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


class TwopcError(Exception):
    """Base class of the driver side's errors."""


@dataclass(frozen=True)
class PartitionLoss:
    """One Spark partition whose committed data and the re-run's data differ (or went missing)."""

    task_partition: int
    committed_records: int | None  # what the earlier run made visible (None: nothing)
    rerun_records: int | None  # what the re-run wrote (None: nothing)
    detail: str

    def __str__(self) -> str:
        return (
            f"partition {self.task_partition}: committed {self.committed_records} records, "
            f"re-run {self.rerun_records} ({self.detail})"
        )


class DataLossError(TwopcError):
    """A batch is partly visible and the re-run cannot repair it without losing or duplicating data."""

    def __init__(self, batch: str, partitions: Sequence[PartitionLoss], detail: str = "") -> None:
        self.batch = batch
        self.partitions = tuple(partitions)
        listing = "; ".join(str(p) for p in self.partitions)
        super().__init__(
            f"batch {batch} is partly committed and the re-run produced different records "
            f"({listing}){': ' + detail if detail else ''}. Nothing more was made visible. The plan "
            "is not deterministic (or the partitioning changed): resolve the batch by hand with "
            "`twopc recover --resolve` (Coordinator.resolve) once you have decided what to keep"
        )


class UndecidedError(TwopcError):
    """The outcome of some recorded transactions could not be proven; nothing was guessed."""

    def __init__(self, batch: str, reasons: dict[str, str], report: object = None) -> None:
        self.batch = batch
        self.reasons = dict(reasons)
        self.report = report  # the RecoveryReport of the call, when there is one
        listing = "; ".join(f"{tid}: {why}" for tid, why in sorted(self.reasons.items()))
        super().__init__(
            f"batch {batch}: the outcome of {len(self.reasons)} transaction(s) is undecided "
            f"({listing}). Retry recovery later (a transaction may still be settling); if it stays "
            "undecided, inspect the partitions and resolve the batch by hand (Coordinator.resolve)"
        )


class LogOwnershipLost(TwopcError):
    """Another driver appended to the checkpoint log first: this one must stop."""

    def __init__(self, url: str, seq: int) -> None:
        self.url = url
        self.seq = seq
        super().__init__(
            f"another driver wrote record {seq} of the checkpoint log {url} first: two drivers are "
            "running against one log. This one committed and fenced nothing after that point and "
            "stops; make sure only one query or job writes through this log"
        )


class QueryMismatch(TwopcError):
    """The log belongs to another query or job (or another transactional id prefix)."""

    def __init__(self, url: str, bound: str, given: str) -> None:
        self.url = url
        self.bound = bound
        self.given = given
        super().__init__(
            f"the checkpoint log {url} is bound to {bound}, not {given}. A query started from a new "
            "Spark checkpoint restarts its batch ids and would wrongly skip batches already in this "
            "log: give the new query its own twopc checkpoint location (or restore the old Spark "
            "checkpoint)"
        )


class GuardFailed(TwopcError):
    """A transaction cannot be committed safely; the whole batch was aborted (nothing visible)."""

    def __init__(self, batch: str, reasons: dict[str, str]) -> None:
        self.batch = batch
        self.reasons = dict(reasons)
        listing = "; ".join(f"{tid}: {why}" for tid, why in sorted(self.reasons.items()))
        super().__init__(
            f"batch {batch} was not committed and its transactions were fenced: {listing}. Nothing "
            "of it is visible; write the batch again (a restarted query re-runs it). If a "
            "transaction ran out of time, raise transaction.timeout.ms or shorten the batches"
        )


class CommitUnverified(TwopcError):
    """The batch is committed, but checking that its commit markers reached every partition (and
    releasing them if a killed broker dropped them, twopc/stranded.py) failed. A later transaction
    on the same ids must not start before that check: its abort would take the committed records
    with it. Recovery (run before every micro-batch, and by `twopc recover`) finishes the check."""

    def __init__(self, batch: str, cause: str) -> None:
        self.batch = batch
        super().__init__(
            f"batch {batch} is committed, but checking that its commit markers reached every "
            f"partition failed: {cause}. Restart the query (or run `twopc recover`) before "
            "writing more: recovery finishes the check; the re-run writes nothing again"
        )


class BatchAborted(TwopcError):
    """The commit decision was taken but no transaction of the batch survived: write it again."""

    def __init__(self, batch: str, reason: str) -> None:
        self.batch = batch
        self.reason = reason
        super().__init__(
            f"batch {batch} was not committed ({reason}); nothing of it is visible and this is "
            "recorded: write the batch again (a restarted query re-runs it)"
        )


class BatchPartlyCommitted(TwopcError):
    """Some transactions of the batch committed, others were aborted: the re-run must repair it."""

    def __init__(self, batch: str, committed: Sequence[int], lost: Sequence[int]) -> None:
        self.batch = batch
        self.committed = tuple(committed)
        self.lost = tuple(lost)
        super().__init__(
            f"batch {batch} is partly committed: Spark partitions {list(self.committed)} are "
            f"visible, {list(self.lost)} were aborted. This is recorded; re-run the batch (restart "
            "the query): a deterministic re-run is repaired, a different one raises DataLossError"
        )


class ResolutionRefused(TwopcError, ValueError):
    """An operator resolution that does not apply to the batch's recorded state."""


class InconsistentLog(TwopcError):
    """The checkpoint log holds records that contradict each other (or an unknown record kind)."""

    def __init__(self, url: str, seq: int, reason: str) -> None:
        self.url = url
        self.seq = seq
        super().__init__(
            f"checkpoint log {url}, record {seq}: {reason}. Recovery stops here rather than skip "
            "it: inspect the log (twopc log dump) and repair or restore it"
        )


class UnsupportedBroker(TwopcError):
    """The Kafka cluster or the producer settings cannot give exactly-once safely."""
