"""Typed errors of the driver side (coordinator, recovery, guards).

Each says what happened and what to do; none is ever swallowed into a silent loss.

Design: docs/design.md section 7.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from checkpoint.redact import redact_url


class TwopcError(Exception):
    """Base class of the driver side's errors."""


def _listing(reasons: dict[str, str]) -> str:
    """`id: why; ...`, sorted by transactional id."""
    return "; ".join(f"{tid}: {why}" for tid, why in sorted(reasons.items()))


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
            "`twopc recover --resolve` (Recovery.resolve) once you have decided what to keep"
        )


class CopyForwardFailed(TwopcError):
    """A batch's decided records, aborted by the broker, cannot be committed again from the log's
    copy (gone, or not what the handles say), and the policy forbids the re-run's rows
    (`twopc.repairPolicy=copy`). Nothing more was made visible."""

    def __init__(self, batch: str, reasons: Sequence[str]) -> None:
        self.batch = batch
        self.reasons = tuple(reasons)
        super().__init__(
            f"batch {batch}: the records of its aborted transactions cannot be copied forward "
            f"({'; '.join(self.reasons)[:2000]}). Nothing more was made visible. With "
            "twopc.repairPolicy=auto a re-run repairs it when it reproduces the lost records (a "
            "deterministic source); otherwise resolve the batch by hand with "
            "`twopc recover --resolve` once you have decided what to keep")


class StrandedCommitAborted(DataLossError):
    """Committed records were aborted after their commit: the broker lost their commit markers,
    and the transaction that held them open ended as aborted before a release could commit it (a
    release cut short and then aborted by its timeout, or an operator's abort or fence). The log
    check proves it; twopc keeps the id held and raises this at every check until an operator
    acknowledges it (`twopc recover --acknowledge-loss`)."""

    def __init__(self, lost: Sequence[tuple[str, Any, str]]) -> None:
        # (batch, handle, what the log check said) for each visible handle of the held ids
        self.lost = tuple(lost)
        batches = sorted({b for b, _, _ in self.lost})
        Exception.__init__(self, (
            "DATA LOSS: committed records were aborted after their commit (their commit markers "
            "were lost by a broker, and the transaction holding them open ended as aborted before "
            "twopc's release could commit it): "
            + "; ".join(f"batch {b}, transactional id {h.transactional_id}, {h.record_count} "
                        f"records of Spark partition {h.task_partition} at "
                        + ", ".join(f"{s.topic}[{s.partition}]@{s.first_offset}" for s in h.spans)
                        + f" ({why})" for b, h, why in self.lost)
            + ". read_committed consumers will never see them. The records are still in the "
            "topic until retention removes them (read_uncommitted, from the offsets named). "
            "twopc holds the ids and reports this at every check; once the loss is handled, "
            "record it with `twopc recover --checkpoint URL --acknowledge-loss BATCH --note "
            "'who and why'`"))
        self.batch = batches[0] if batches else ""
        self.partitions = tuple(PartitionLoss(h.task_partition, h.record_count, None,
                                              f"aborted after its commit: {why}")
                                for _, h, why in self.lost)


class UndecidedError(TwopcError):
    """The outcome of some recorded transactions could not be proven; nothing was guessed."""

    def __init__(self, batch: str, reasons: dict[str, str], report: object = None) -> None:
        self.batch = batch
        self.reasons = dict(reasons)
        self.report = report  # the RecoveryReport of the call, when there is one
        listing = _listing(self.reasons)
        super().__init__(
            f"batch {batch}: the outcome of {len(self.reasons)} transaction(s) is undecided "
            f"({listing}). Retry recovery later (a transaction may still be settling); if it stays "
            "undecided, inspect the partitions and resolve the batch by hand (Recovery.resolve)"
        )


class LogOwnershipLost(TwopcError):
    """Another driver appended to the checkpoint log first: this one must stop."""

    def __init__(self, url: str, seq: int) -> None:
        url = redact_url(url)
        self.url = url
        self.seq = seq
        super().__init__(
            f"another driver wrote record {seq} of the checkpoint log {url} first: two drivers are "
            "running against one log (or a re-run of this one's batch job took it over). This one "
            "committed and fenced nothing after that point and stops; make sure only one query "
            "or job writes through this log"
        )


class QueryMismatch(TwopcError):
    """The log belongs to another query or job (or another transactional id prefix)."""

    def __init__(self, url: str, bound: str, given: str) -> None:
        url = redact_url(url)
        self.url = url
        self.bound = bound
        self.given = given
        super().__init__(
            f"the checkpoint log {url} is bound to {bound}, not {given}. A query started from a new "
            "Spark checkpoint restarts its batch ids and would wrongly skip batches already in this "
            "log: give the new query its own twopc checkpoint location (or restore the old Spark "
            "checkpoint)"
        )


class PrefixChanged(QueryMismatch):
    """The log was written under another transactional id prefix than the one given now: its
    intents, held ids and whatever its runs left open are under the old prefix, which a run under
    the new one neither settles nor sweeps. Refused before anything is sent or appended."""

    def __init__(self, url: str, bound: str, given: str, old_prefix: str,
                 new_prefix: str) -> None:
        url = redact_url(url)
        self.url = url
        self.bound = bound
        self.given = given
        self.old_prefix = old_prefix
        self.new_prefix = new_prefix
        Exception.__init__(self, (
            f"the checkpoint log {url} was written by {bound}, and this run has "
            f"twopc.transactionalIdPrefix {new_prefix!r}. Its transactions, and any a crashed "
            f"run left open, are under prefix {old_prefix!r}: a run under {new_prefix!r} would "
            "neither settle nor fence them, so nothing was done. Restart with "
            f"twopc.transactionalIdPrefix={old_prefix} (recovery then settles what the log "
            "names). A new prefix needs a twopc.checkpoint of its own, which knows nothing of "
            "this log's batches and job ids: settle this log first (`twopc recover "
            f"--checkpoint {url}` takes the prefix from the log), then give the new prefix a "
            "new twopc.checkpoint together with a fresh Spark checkpointLocation (a query) or "
            "job ids of its own (batch jobs), or the last batches could be written twice"))


class JobFamilyBusy(TwopcError):
    """Another batch job of the same family (prefix and checkpoint log) is running: this one was
    refused before it wrote or settled anything."""

    def __init__(self, url: str, job: str, holder_job: str, run: str, holder: str, since: str,
                 until: str) -> None:
        self.url = url
        self.job = job
        self.holder_job = holder_job
        super().__init__(
            f"job {job} was not started: job {holder_job} of the same family is running (run "
            f"{run} on {holder}, since {since}; its claim on the log {url} lasts until {until} "
            "unless renewed). The jobs of one transactional id prefix share one log, and one "
            "job's recovery would settle or fence what the other has not recorded yet, so they "
            f"run one at a time. Run job {job} again once job {holder_job} has finished. If job "
            f"{holder_job} is no longer running (its driver died), run it again (a run of the "
            "same job id takes the claim over and finishes or rolls back what it left), or wait "
            "until the claim ends. Jobs that must run at the same time need their own "
            "twopc.transactionalIdPrefix and twopc.checkpoint (twopc.jobLeaseMs: how long a "
            "claim lasts)"
        )


class GuardFailed(TwopcError):
    """A transaction cannot be committed safely; the whole batch was aborted (nothing visible)."""

    def __init__(self, batch: str, reasons: dict[str, str]) -> None:
        self.batch = batch
        self.reasons = dict(reasons)
        listing = _listing(self.reasons)
        super().__init__(
            f"batch {batch} was not committed and its transactions were fenced: {listing}. Nothing "
            "of it is visible; write the batch again (a restarted query re-runs it). If a "
            "transaction ran out of time, raise transaction.timeout.ms or shorten the batches"
        )


class CommitUnverified(TwopcError):
    """The batch is committed, but its commit markers (or an earlier commit's still held open,
    twopc/driver/stranded.py) are not proven to have reached every partition: the check failed, or a
    release of markers a killed broker dropped failed. A later transaction on the same ids must
    not start before that: its abort would take the committed records with it (the log holds such
    ids: no task takes them). Recovery (run before every micro-batch, and by `twopc recover`)
    finishes the check."""

    def __init__(self, batch: str, cause: str) -> None:
        self.batch = batch
        super().__init__(
            f"batch {batch} is committed, but its commit markers are not proven to have reached "
            f"every partition: {cause}. Before writing more, restart the query (its recovery "
            "finishes the check; the re-run writes nothing again), or for a batch job run "
            "`twopc recover` (the family's next job's recovery does it too)"
        )


class StrandedUnreleased(TwopcError):
    """Committed transactions still hold partitions open: their commit markers neither landed nor
    could be released (stranded.py). Their records are invisible to read_committed consumers, and
    so is everything after them in those partitions. The log holds their ids (no task takes them)
    until a later check finds them released."""

    def __init__(self, detail: str, report: object = None) -> None:
        self.detail = detail
        self.report = report  # the RecoveryReport of the call, when there is one
        super().__init__(
            f"committed transactions still hold partitions open and were not released: {detail}. "
            "Their records stay invisible to read_committed consumers until they are. Fix what "
            "the reason names (a broker or partition leader down, an ACL: WRITE on the topic and "
            "the transactional id, READ on the topic; stop any other process using the id), "
            "then run `twopc recover` (a restarted query or job runs it too)"
        )


class FenceFailed(TwopcError):
    """Transactions a record names for fencing could not be fenced: they stay open until the
    broker's transaction timeout aborts them. What was recorded stands (`done` says what it is)."""

    def __init__(self, batch: str | None, failures: dict[str, str], done: str,
                 report: object = None) -> None:
        self.batch = batch
        self.failures = dict(failures)
        self.report = report  # the RecoveryReport of the call, when there is one
        listing = _listing(self.failures)
        super().__init__(
            f"{done}, but fencing {len(self.failures)} transaction(s) failed ({listing}). They "
            "stay open until the broker's transaction timeout aborts them, and read_committed "
            "consumers of their partitions wait until then. Grant WRITE on the transactional ids "
            "(or bring the brokers back), then run `twopc recover`: its sweep fences the open "
            "transactions that no record will commit"
        )


class NoFreeSlot(TwopcError):
    """Every transactional id of a Spark partition's pool is held (docs/design.md section 5: an id is
    reused only after its previous transaction is resolved and recorded)."""

    def __init__(self, task_partition: int, slots: int, holders: dict[str, str]) -> None:
        self.task_partition = task_partition
        self.slots = slots
        self.holders = dict(holders)
        listing = _listing(self.holders)
        super().__init__(
            f"Spark partition {task_partition}: all {slots} transactional ids of its pool are "
            f"held ({listing}), and none may be reused before its transaction is resolved and "
            "recorded. Run `twopc recover` (a restarted query or job runs it first) to settle "
            "them, or raise twopc.slotsPerPartition"
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
            "the query, or run the batch job again): under twopc.repairPolicy=auto (the default) "
            "the aborted records are copied forward from the Kafka log when they verify, else a "
            "deterministic re-run is repaired and a different one raises DataLossError"
        )


class ResolutionRefused(TwopcError, ValueError):
    """An operator resolution that does not apply to the batch's recorded state."""


class InconsistentLog(TwopcError):
    """The checkpoint log holds records that contradict each other (or an unknown record kind)."""

    def __init__(self, url: str, seq: int, reason: str) -> None:
        url = redact_url(url)
        self.url = url
        self.seq = seq
        super().__init__(
            f"checkpoint log {url}, record {seq}: {reason}. Recovery stops here rather than skip "
            f"it: inspect the log (`twopc log dump --checkpoint {url}`) and restore the record "
            "from a backup of the storage"
        )


class UnsupportedBroker(TwopcError):
    """The Kafka cluster or the producer settings cannot give exactly-once safely."""


class ProtocolViolation(TwopcError):
    """A driver path was about to end, fence or release a transaction that no record of its call
    names: a bug in twopc, stopped before anything was sent (docs/design.md section 5)."""
